//! The event key (contract SL4): the column whose value is the subject key
//! events are recorded for, compared with an event's key as text. It must
//! exist and hold a single key (text, a UUID, an integer), not a time, an
//! array or a document.

use super::registry::Target;
use super::report::{Issue, Problems};
use super::types::Types;
use crate::catalog::{CatalogTable, TypeKind};
use crate::model::resolved::Column;
use crate::sql::Ident;

/// Key types: what an event's subject key may be compared with, as text.
const KEY_TYPES: &[&str] = &[
    "text", "varchar", "bpchar", "uuid", "int2", "int4", "int8", "citext",
];

/// The type's event key column, checked; `None` without one (or after a
/// problem).
pub(super) fn key_column(
    target: &Target,
    table: &CatalogTable,
    types: &Types<'_>,
    problems: &mut Problems,
) -> Option<Column> {
    let field = target.descriptor.event_key()?;
    let field = target.descriptor.field(field)?;
    let Some(c) = table.column(field.column) else {
        target.problem(
            problems,
            Some(field.column),
            Issue::new(
                format!(
                    "column {} (field `{}`, the event key) does not exist in table {}",
                    field.column, field.field, target.place.table
                ),
                "add the column, or mark the field whose column holds the event's subject key",
            ),
        );
        return None;
    };
    let fits = types
        .base(c)
        .is_some_and(|t| matches!(t.kind, TypeKind::Other) && KEY_TYPES.contains(&t.name.as_str()));
    if !fits {
        target.problem(
            problems,
            Some(&c.name),
            Issue::new(
                format!(
                    "the event key {} is of type {}; an event's subject key is compared with it as \
                     text, so it must hold one key: text, a UUID or an integer",
                    c.name, c.sql_type
                ),
                "mark a column of a key type with #[cohort(event_key)]",
            ),
        );
        return None;
    }
    Some(Column {
        name: Ident::new(&c.name).ok()?,
        sql_type: c.sql_type.clone(),
        nullable: types.nullable(c),
        cmp_type: c.sql_type.clone(),
        eq: "OPERATOR(pg_catalog.=)".to_owned(),
        operator: None,
    })
}
