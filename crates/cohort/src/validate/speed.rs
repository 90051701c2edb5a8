//! Indexes the batch protocol relies on for speed (not correctness): each
//! finding is a warning in the build report, naming the statement that
//! fixes it.
//!
//! - A sweep's range batches find their upper key by an index scan in
//!   `(tenant, anchor, key)` order (`(anchor, key)` for a tenantless type):
//!   without an index leading with the tenant and anchor columns, every batch
//!   scans the table.
//! - An erasure finds a subject's rows through each subject column: without
//!   an index leading with the column, every erasure batch scans the table.
//! - A type whose rows take their category from a column (contract SL3) has
//!   each category's batches in `(tenant, anchor, key)` order restricted to
//!   the category's values: without an index leading with the tenant, the
//!   category column and the anchor, each category's batches walk the other
//!   categories' rows in the anchor index.

use super::report::Place;
use crate::catalog::CatalogIndex;
use crate::model::resolved::ResolvedEntity;
use crate::validate::ValidationProblem;

use super::report::Issue;

/// The attnums of the columns a check needs, in index order.
pub(super) struct Columns {
    pub(super) tenant: Option<i16>,
    pub(super) anchor: i16,
    pub(super) subjects: Vec<(String, i16)>,
    /// The category column of a type whose category comes from a column.
    pub(super) category: Option<(String, i16)>,
}

/// Whether some valid index on `table` starts with exactly `lead`.
fn led_by(indexes: &[CatalogIndex], table: u32, lead: &[i16]) -> bool {
    indexes
        .iter()
        .any(|i| i.table_oid == table && i.valid && i.key_attnums.starts_with(lead))
}

/// The speed warnings of one retained type.
pub(super) fn warnings(
    e: &ResolvedEntity,
    place: &Place,
    table: u32,
    columns: &Columns,
    indexes: &[CatalogIndex],
) -> Vec<ValidationProblem> {
    let mut out = Vec::new();
    let lead: Vec<i16> = columns.tenant.into_iter().chain([columns.anchor]).collect();
    if !led_by(indexes, table, &lead) {
        let mut cols: Vec<String> = Vec::new();
        if let Some(t) = &e.tenant {
            cols.push(t.name.to_string());
        }
        cols.push(e.anchor.name.to_string());
        cols.push(e.record_id.name.to_string());
        out.push(place.problem(
            None,
            Issue::new(
                format!(
                    "no index leads with ({}): every sweep batch scans the table to find its range",
                    cols[..cols.len() - 1].join(", ")
                ),
                format!(
                    "CREATE INDEX CONCURRENTLY ON {} ({})",
                    e.table,
                    cols.join(", ")
                ),
            ),
        ));
    }
    if let Some((name, attnum)) = &columns.category {
        let lead: Vec<i16> = columns
            .tenant
            .into_iter()
            .chain([*attnum, columns.anchor])
            .collect();
        if !led_by(indexes, table, &lead) {
            let mut cols: Vec<String> = Vec::new();
            if let Some(t) = &e.tenant {
                cols.push(t.name.to_string());
            }
            let quoted = crate::sql::Ident::new(name)
                .map(|i| i.to_string())
                .unwrap_or_else(|_| name.clone());
            cols.push(quoted);
            cols.push(e.anchor.name.to_string());
            cols.push(e.record_id.name.to_string());
            out.push(place.problem(
                Some(name),
                Issue::new(
                    format!(
                        "no index leads with ({}): each category's sweep batches walk the other \
                         categories' rows in the anchor index",
                        cols[..cols.len() - 1].join(", ")
                    ),
                    format!(
                        "CREATE INDEX CONCURRENTLY ON {} ({})",
                        e.table,
                        cols.join(", ")
                    ),
                ),
            ));
        }
    }
    for (name, attnum) in &columns.subjects {
        if !led_by(indexes, table, &[*attnum]) {
            let column = e
                .subjects
                .iter()
                .find(|c| c.name.as_str() == name)
                .map(|c| c.name.to_string())
                .unwrap_or_default();
            out.push(place.problem(
                Some(name),
                Issue::new(
                    format!(
                        "no index leads with the erasure-subject column {name}: every erasure batch scans the table"
                    ),
                    format!("CREATE INDEX CONCURRENTLY ON {} ({column})", e.table),
                ),
            ));
        }
    }
    out
}
