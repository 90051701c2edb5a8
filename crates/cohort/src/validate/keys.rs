//! V4: a record id identifies exactly one row.
//!
//! The record id must be the whole primary key, or carry a unique constraint
//! or a unique index that is valid, not partial and on exactly that one column
//! (no expression, no other key column; `INCLUDE` columns do not matter). It
//! must also be NOT NULL: a unique index lets any number of NULLs through, and
//! a row without an id can be neither held nor recorded in the ledger.
//!
//! One exception (contract PT1): PostgreSQL requires every unique index of a
//! partitioned table to include its partition key, so a table partitioned by
//! `RANGE` on its anchor can never have a unique index on the record id
//! alone. For such a table a valid, unfiltered unique index on exactly the
//! record id and the anchor (in either order) is accepted; `docs/partitions.md`
//! says what the host must then keep unique itself.

use super::report::Issue;
use crate::catalog::{CatalogColumn, CatalogIndex};

/// Checks the record-id column against the table's unique indexes.
/// `range_anchor` is the anchor's attnum when the table is partitioned by
/// `RANGE` on the anchor alone (see the module docs).
pub(super) fn record_id_unique(
    table_oid: u32,
    column: &CatalogColumn,
    nullable: bool,
    indexes: &[CatalogIndex],
    range_anchor: Option<i16>,
) -> Vec<Issue> {
    let mut issues = Vec::new();
    let on_table = || {
        indexes
            .iter()
            .filter(|i| i.table_oid == table_oid && i.unique)
    };
    let exactly_this = |i: &&CatalogIndex| {
        i.key_attnums == [column.attnum]
            || range_anchor.is_some_and(|a| {
                a != column.attnum
                    && (i.key_attnums == [column.attnum, a] || i.key_attnums == [a, column.attnum])
            })
    };
    let unique = on_table().any(|i| exactly_this(&i) && i.valid && !i.partial);
    if !unique {
        let near: Vec<String> = on_table()
            .filter(|i| i.key_attnums.contains(&column.attnum))
            .map(|i| {
                let why = if !i.valid {
                    "is not valid (a failed CREATE INDEX CONCURRENTLY?)"
                } else if i.partial {
                    "is partial"
                } else if i.key_attnums.contains(&0) {
                    "is on an expression"
                } else if i.primary {
                    "is a primary key on more than this column"
                } else {
                    "covers more than this column"
                };
                format!("{} {why}", i.name)
            })
            .collect();
        let detail = if near.is_empty() {
            String::new()
        } else {
            format!(" ({})", near.join("; "))
        };
        issues.push(Issue::new(
            format!(
                "the record id column {} is not unique: it is not the primary key, and no unique constraint \
                 or unique index that is valid, not partial and on this column alone covers it{detail}",
                column.name
            ),
            format!(
                "ALTER TABLE ... ADD UNIQUE ({}), or mark the primary-key field with #[cohort(record_id)]",
                column.name
            ),
        ));
    }
    if nullable {
        issues.push(Issue::new(
            format!(
                "the record id column {} accepts NULL: a row without an id cannot be held or recorded",
                column.name
            ),
            format!("ALTER TABLE ... ALTER COLUMN {} SET NOT NULL", column.name),
        ));
    }
    issues
}

#[cfg(test)]
mod tests {
    use super::*;

    fn index(name: &str, keys: &[i16], primary: bool, partial: bool, valid: bool) -> CatalogIndex {
        CatalogIndex {
            unique: true,
            table_oid: 1,
            name: name.into(),
            primary,
            valid,
            partial,
            key_attnums: keys.to_vec(),
        }
    }

    fn column() -> CatalogColumn {
        CatalogColumn {
            name: "code".into(),
            attnum: 2,
            type_oid: 25,
            typmod: -1,
            sql_type: "text".into(),
            not_null: true,
            generated: false,
        }
    }

    #[test]
    fn only_a_whole_valid_unfiltered_single_column_key_counts() {
        let c = column();
        for ok in [
            index("pk", &[2], true, false, true),
            index("uq", &[2], false, false, true),
        ] {
            assert!(record_id_unique(1, &c, false, &[ok], None).is_empty());
        }
        for (bad, why) in [
            (
                index("pk", &[1, 2], true, false, true),
                "primary key on more",
            ),
            (index("uq", &[2], false, true, true), "is partial"),
            (index("uq", &[2, 0], false, false, true), "expression"),
            (index("uq", &[2, 3], false, false, true), "covers more"),
            (index("uq", &[2], false, false, false), "not valid"),
        ] {
            let issues = record_id_unique(1, &c, false, &[bad], None);
            assert_eq!(issues.len(), 1);
            assert!(issues[0].problem.contains(why), "{}", issues[0].problem);
        }
        // An index on another table does not count.
        let mut other = index("uq", &[2], false, false, true);
        other.table_oid = 2;
        assert_eq!(record_id_unique(1, &c, false, &[other], None).len(), 1);
        // Nullable: reported even when unique.
        let issues = record_id_unique(1, &c, true, &[index("uq", &[2], false, false, true)], None);
        assert_eq!(issues.len(), 1);
        assert!(issues[0].problem.contains("accepts NULL"));
    }

    // contract: PT1
    #[test]
    fn a_table_range_partitioned_on_its_anchor_may_key_on_id_and_anchor() {
        let c = column();
        for keys in [[2, 3], [3, 2]] {
            let pk = index("pk", &keys, true, false, true);
            assert!(record_id_unique(1, &c, false, std::slice::from_ref(&pk), Some(3)).is_empty());
            // Not partitioned on the anchor: the id alone must be unique.
            assert_eq!(record_id_unique(1, &c, false, &[pk], None).len(), 1);
        }
        // Another column with them, or a partial index, still does not count.
        let wide = index("pk", &[2, 3, 4], true, false, true);
        assert_eq!(record_id_unique(1, &c, false, &[wide], Some(3)).len(), 1);
        let partial = index("uq", &[2, 3], false, true, true);
        assert_eq!(record_id_unique(1, &c, false, &[partial], Some(3)).len(), 1);
    }
}
