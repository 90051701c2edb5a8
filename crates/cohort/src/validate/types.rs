//! Column types against roles (V5, V6, V7), read from the column's actual
//! catalog type and followed through domains (and, for record ids, through
//! arrays and ranges).

use std::collections::HashMap;

use super::report::Issue;
use crate::catalog::{CatalogColumn, CatalogType, TypeKind};
use crate::model::AnonymiseMethod;

/// Built-in types whose text form depends on session settings (`DateStyle`,
/// `IntervalStyle`, `TimeZone`, `extra_float_digits`, `lc_monetary`,
/// `bytea_output`): a record id of one of them could print differently in
/// another session and silently detach holds and ledger rows.
const SESSION_DEPENDENT: [&str; 10] = [
    "timestamp",
    "timestamptz",
    "date",
    "time",
    "timetz",
    "interval",
    "float4",
    "float8",
    "money",
    "bytea",
];

/// Built-in text types. `citext` (an extension, in any schema) is accepted too.
const TEXT_LIKE: [&str; 3] = ["text", "varchar", "bpchar"];

/// Built-in types an erasure subject can be bound to, besides text-like ones.
const SUBJECT_TYPES: [&str; 5] = ["uuid", "int2", "int4", "int8", "numeric"];

/// Guard against a corrupt catalog sending a walk round in circles.
const MAX_DEPTH: usize = 64;

/// The column types of the tables being validated.
pub(super) struct Types<'a> {
    types: &'a HashMap<u32, CatalogType>,
}

/// A column's type with its domains peeled off.
struct Resolved<'a> {
    /// The first non-domain type, when the catalog has it.
    base: Option<&'a CatalogType>,
    /// Some domain on the way is NOT NULL.
    domain_not_null: bool,
    /// The modifier in force on the base type: the column's own, else the
    /// innermost domain's that has one.
    typmod: i32,
}

impl<'a> Types<'a> {
    pub(super) fn new(types: &'a HashMap<u32, CatalogType>) -> Types<'a> {
        Types { types }
    }

    fn resolve(&self, oid: u32, typmod: i32) -> Resolved<'a> {
        let mut current = self.types.get(&oid);
        let mut domain_not_null = false;
        let mut typmod = typmod;
        for _ in 0..MAX_DEPTH {
            match current {
                Some(t) => match t.kind {
                    TypeKind::Domain { base } => {
                        domain_not_null |= t.not_null;
                        if typmod < 0 {
                            typmod = t.typmod;
                        }
                        current = self.types.get(&base);
                    }
                    _ => break,
                },
                None => break,
            }
        }
        Resolved {
            base: current.filter(|t| !matches!(t.kind, TypeKind::Domain { .. })),
            domain_not_null,
            typmod,
        }
    }

    pub(super) fn base(&self, column: &CatalogColumn) -> Option<&'a CatalogType> {
        self.resolve(column.type_oid, column.typmod).base
    }

    /// The column's base type is the built-in `name`.
    fn is_builtin(&self, column: &CatalogColumn, names: &[&str]) -> bool {
        self.base(column).is_some_and(|t| builtin(t, names))
    }

    fn is_text_like(&self, column: &CatalogColumn) -> bool {
        self.base(column).is_some_and(text_like)
    }

    /// Whether the column accepts NULL: no NOT NULL on it, nor on a domain.
    pub(super) fn nullable(&self, column: &CatalogColumn) -> bool {
        !column.not_null && !self.resolve(column.type_oid, column.typmod).domain_not_null
    }

    /// The first type in the column's type (through domains, array elements,
    /// range and multirange subtypes) whose text depends on session settings.
    fn session_dependent(&self, oid: u32, depth: usize) -> Option<&'a CatalogType> {
        let t = self.types.get(&oid)?;
        if builtin(t, &SESSION_DEPENDENT) {
            return Some(t);
        }
        if depth >= MAX_DEPTH {
            return None;
        }
        match t.kind {
            TypeKind::Domain { base } => self.session_dependent(base, depth + 1),
            TypeKind::Array { element } => self.session_dependent(element, depth + 1),
            TypeKind::Range { subtype } => self.session_dependent(subtype, depth + 1),
            TypeKind::Other => None,
        }
    }

    /// The character limit of a `varchar(n)` / `char(n)` column (through domains).
    fn length_limit(&self, column: &CatalogColumn) -> Option<usize> {
        let r = self.resolve(column.type_oid, column.typmod);
        let base = r.base?;
        // For varchar and bpchar the modifier is the limit plus 4 (VARHDRSZ).
        (builtin(base, &["varchar", "bpchar"]) && r.typmod >= 4)
            .then(|| usize::try_from(r.typmod - 4).ok())
            .flatten()
    }
}

fn builtin(t: &CatalogType, names: &[&str]) -> bool {
    t.schema == "pg_catalog" && names.contains(&t.name.as_str())
}

fn text_like(t: &CatalogType) -> bool {
    builtin(t, &TEXT_LIKE) || (t.name == "citext" && t.is_base)
}

/// V5: the anchor, deleted-at and anonymised-at columns are `timestamptz`.
pub(super) fn timestamptz(types: &Types<'_>, column: &CatalogColumn, role: &str) -> Option<Issue> {
    (!types.is_builtin(column, &["timestamptz"])).then(|| {
        Issue::new(
            format!(
                "the {role} column is {}, not timestamp with time zone: Cohort compares and writes \
                 instants, and a column without a time zone drifts with the session's TimeZone",
                column.sql_type
            ),
            format!(
                "ALTER TABLE ... ALTER COLUMN {} TYPE timestamptz (USING ... AT TIME ZONE 'UTC' for \
                 values stored as UTC)",
                column.name
            ),
        )
    })
}

/// V6: the soft-delete flag is `boolean`.
pub(super) fn soft_delete_flag(types: &Types<'_>, column: &CatalogColumn) -> Option<Issue> {
    (!types.is_builtin(column, &["bool"])).then(|| {
        Issue::new(
            format!(
                "the soft-delete flag column is {}, not boolean",
                column.sql_type
            ),
            "make the flag column boolean, or mark the right field with #[cohort(soft_delete)]",
        )
    })
}

/// V6: tenants are bound as `uuid`.
pub(super) fn tenant(types: &Types<'_>, column: &CatalogColumn) -> Option<Issue> {
    (!types.is_builtin(column, &["uuid"])).then(|| {
        Issue::new(
            format!(
                "the tenant column is {}, but tenant ids are bound as uuid",
                column.sql_type
            ),
            "make the tenant column uuid (or a domain over uuid), or mark the right field with \
             #[cohort(tenant)]",
        )
    })
}

/// V6: an erasure subject can be bound to uuid, text-like, integer or
/// numeric columns (and domains over them).
pub(super) fn subject(types: &Types<'_>, column: &CatalogColumn) -> Option<Issue> {
    let fits = types
        .base(column)
        .is_some_and(|t| text_like(t) || builtin(t, &SUBJECT_TYPES));
    (!fits).then(|| {
        Issue::new(
            format!(
                "the erasure-subject column is {}, which a subject cannot be compared with",
                column.sql_type
            ),
            "mark only uuid, text, varchar, char, citext, smallint, integer, bigint or numeric columns \
             (or domains over them) with #[cohort(erasure_subject)]",
        )
    })
}

/// V6: the anonymise method fits the column.
pub(super) fn anonymised(
    types: &Types<'_>,
    column: &CatalogColumn,
    method: &AnonymiseMethod,
) -> Option<Issue> {
    match method {
        AnonymiseMethod::Null => (!types.nullable(column)).then(|| {
            Issue::new(
                "the column is anonymised to NULL but does not accept NULL (NOT NULL, or a NOT NULL domain)",
                format!(
                    "ALTER TABLE ... ALTER COLUMN {} DROP NOT NULL, or use anonymise = \"empty\" or a literal",
                    column.name
                ),
            )
        }),
        AnonymiseMethod::EmptyString
        | AnonymiseMethod::Literal(_)
        | AnonymiseMethod::Custom(_)
        | AnonymiseMethod::Named(_) => {
            let how = match method {
                AnonymiseMethod::EmptyString => "to the empty string".to_owned(),
                AnonymiseMethod::Literal(l) => format!("to the literal {l:?}"),
                AnonymiseMethod::Custom(c) => format!("by the custom anonymiser {}", c.name),
                AnonymiseMethod::Named(n) => format!("by the anonymiser registered as {n:?}"),
                AnonymiseMethod::Null => String::new(),
            };
            if !types.is_text_like(column) {
                return Some(Issue::new(
                    format!("the column is {}, but it is anonymised {how}, which needs a text-like column", column.sql_type),
                    "anonymise only text, varchar, char or citext columns (or domains over them) this way; \
                     use anonymise = \"null\" for other nullable columns",
                ));
            }
            if let (AnonymiseMethod::Literal(l), Some(limit)) = (method, types.length_limit(column)) {
                let len = l.chars().count();
                if len > limit {
                    return Some(Issue::new(
                        format!(
                            "the column is {}, too short for the literal {l:?} ({len} characters)",
                            column.sql_type
                        ),
                        "use a shorter literal or widen the column",
                    ));
                }
            }
            None
        }
    }
}

/// V7: the record id's text does not depend on session settings.
pub(super) fn record_id(types: &Types<'_>, column: &CatalogColumn) -> Option<Issue> {
    let found = types.session_dependent(column.type_oid, 0)?;
    let via = if found.oid == column.type_oid {
        String::new()
    } else {
        format!(" (built on {})", found.name)
    };
    Some(Issue::new(
        format!(
            "the record id column is {}{via}, whose text form depends on session settings: \
             a record id stored in a hold or the ledger could stop matching its row",
            column.sql_type
        ),
        "use a record id of a type with a stable text form (uuid, integer, bigint, numeric, text, ...), \
         for example a surrogate key marked #[cohort(record_id)]",
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(oid: u32, schema: &str, name: &str, kind: TypeKind) -> (u32, CatalogType) {
        (
            oid,
            CatalogType {
                oid,
                schema: schema.into(),
                name: name.into(),
                kind,
                is_base: matches!(kind, TypeKind::Other),
                not_null: false,
                typmod: -1,
            },
        )
    }

    fn col(oid: u32, typmod: i32, not_null: bool) -> CatalogColumn {
        CatalogColumn {
            name: "c".into(),
            attnum: 1,
            type_oid: oid,
            typmod,
            sql_type: format!("type {oid}"),
            not_null,
            generated: false,
        }
    }

    fn graph() -> HashMap<u32, CatalogType> {
        let mut g: HashMap<u32, CatalogType> = [
            t(1184, "pg_catalog", "timestamptz", TypeKind::Other),
            t(1114, "pg_catalog", "timestamp", TypeKind::Other),
            t(1043, "pg_catalog", "varchar", TypeKind::Other),
            t(2950, "pg_catalog", "uuid", TypeKind::Other),
            t(23, "pg_catalog", "int4", TypeKind::Other),
            t(16, "pg_catalog", "bool", TypeKind::Other),
            t(19, "pg_catalog", "name", TypeKind::Other),
            t(900, "app", "citext", TypeKind::Other),
            t(901, "app", "uuid", TypeKind::Other),
            t(100, "app", "stamp", TypeKind::Domain { base: 1184 }),
            t(101, "app", "stamp2", TypeKind::Domain { base: 100 }),
            t(102, "app", "naive", TypeKind::Domain { base: 1114 }),
            t(103, "app", "_naive", TypeKind::Array { element: 102 }),
            t(104, "app", "naive_range", TypeKind::Range { subtype: 102 }),
            t(105, "app", "short", TypeKind::Domain { base: 1043 }),
            t(106, "app", "required", TypeKind::Domain { base: 1043 }),
            t(107, "app", "loop_a", TypeKind::Domain { base: 108 }),
            t(108, "app", "loop_b", TypeKind::Domain { base: 107 }),
            t(109, "app", "_int4", TypeKind::Array { element: 23 }),
        ]
        .into_iter()
        .collect();
        if let Some(short) = g.get_mut(&105) {
            short.typmod = 5 + 4;
        }
        if let Some(required) = g.get_mut(&106) {
            required.not_null = true;
        }
        g
    }

    #[test]
    fn timestamptz_through_domains_only() {
        let g = graph();
        let types = Types::new(&g);
        assert!(timestamptz(&types, &col(1184, 3, false), "anchor").is_none());
        assert!(timestamptz(&types, &col(101, -1, false), "anchor").is_none());
        assert!(timestamptz(&types, &col(1114, -1, false), "anchor").is_some());
        assert!(timestamptz(&types, &col(102, -1, false), "anchor").is_some());
        // A cycle in a corrupt catalog ends, rejected.
        assert!(timestamptz(&types, &col(107, -1, false), "anchor").is_some());
        // Unknown oid: rejected, not a panic.
        assert!(timestamptz(&types, &col(4242, -1, false), "anchor").is_some());
    }

    #[test]
    fn builtin_means_pg_catalog_but_citext_may_live_anywhere() {
        let g = graph();
        let types = Types::new(&g);
        assert!(tenant(&types, &col(2950, -1, false)).is_none());
        assert!(
            tenant(&types, &col(901, -1, false)).is_some(),
            "app.uuid is not uuid"
        );
        let empty = AnonymiseMethod::EmptyString;
        assert!(anonymised(&types, &col(900, -1, false), &empty).is_none());
        assert!(
            anonymised(&types, &col(19, -1, false), &empty).is_some(),
            "name is rejected"
        );
        assert!(subject(&types, &col(23, -1, false)).is_none());
        assert!(subject(&types, &col(16, -1, false)).is_some());
        assert!(soft_delete_flag(&types, &col(16, -1, false)).is_none());
        assert!(soft_delete_flag(&types, &col(23, -1, false)).is_some());
    }

    #[test]
    fn literals_must_fit_varchar_limits_and_nulls_need_nullable_columns() {
        let g = graph();
        let types = Types::new(&g);
        let literal = AnonymiseMethod::Literal("[redacted]");
        assert!(anonymised(&types, &col(1043, 10 + 4, false), &literal).is_none());
        assert!(anonymised(&types, &col(1043, 9 + 4, false), &literal).is_some());
        assert!(
            anonymised(&types, &col(105, -1, false), &literal).is_some(),
            "domain limit"
        );
        assert!(
            anonymised(&types, &col(1043, -1, false), &literal).is_none(),
            "no limit"
        );
        let null = AnonymiseMethod::Null;
        assert!(anonymised(&types, &col(1043, -1, false), &null).is_none());
        assert!(anonymised(&types, &col(1043, -1, true), &null).is_some());
        assert!(
            anonymised(&types, &col(106, -1, false), &null).is_some(),
            "NOT NULL domain"
        );
    }

    #[test]
    fn session_dependent_record_ids_through_domains_arrays_and_ranges() {
        let g = graph();
        let types = Types::new(&g);
        for oid in [1114, 1184, 102, 103, 104] {
            assert!(record_id(&types, &col(oid, -1, false)).is_some(), "{oid}");
        }
        for oid in [23, 2950, 1043, 109, 107] {
            assert!(record_id(&types, &col(oid, -1, false)).is_none(), "{oid}");
        }
        let issue = record_id(&types, &col(104, -1, false)).expect("rejected");
        assert!(
            issue.problem.contains("built on timestamp"),
            "{}",
            issue.problem
        );
    }
}
