//! V2: retained tables take no part in table inheritance.
//!
//! Legacy inheritance (`INHERITS`) is rejected both ways: a DELETE or UPDATE
//! on a parent reaches its children's rows, which belong to another table's
//! rules; a child's rows show up in its parent's reads.
//!
//! Declarative partitioning is treated as one table: a partitioned table
//! (`relkind = 'p'`) is accepted as a retained table, because statements on it
//! reach its partitions with its own predicate, which is exactly what a sweep
//! means. A partition registered on its own is rejected: its rows already
//! belong to the partitioned table, and sweeping it separately would bypass
//! the parent's registration and count rows twice.

use super::report::Issue;
use crate::catalog::{CatalogTable, InheritanceLink};

/// Checks one retained table against the inheritance links read for it.
pub(super) fn check(table: &CatalogTable, links: &[InheritanceLink]) -> Vec<Issue> {
    let mut issues = Vec::new();
    let parents: Vec<&InheritanceLink> =
        links.iter().filter(|l| l.child_oid == table.oid).collect();
    let children: Vec<&InheritanceLink> =
        links.iter().filter(|l| l.parent_oid == table.oid).collect();

    if table.is_partition {
        let parent = parents
            .iter()
            .find(|l| l.parent_partitioned)
            .map(|l| l.parent.to_string())
            .unwrap_or_else(|| "its partitioned table".to_owned());
        issues.push(Issue::new(
            format!(
                "the table is a partition of {parent}: its rows belong to the partitioned table, and \
                 sweeping it on its own would bypass that table's registration"
            ),
            format!("register a type on {parent} (the partition root) instead of on the partition"),
        ));
    } else {
        let legacy: Vec<String> = parents
            .iter()
            .filter(|l| !l.parent_partitioned)
            .map(|l| l.parent.to_string())
            .collect();
        if !legacy.is_empty() {
            issues.push(Issue::new(
                format!(
                    "the table inherits from {} (table inheritance): its rows are also rows of the parent",
                    legacy.join(", ")
                ),
                "give the retained type a table outside any inheritance hierarchy (ALTER TABLE ... NO INHERIT), \
                 or use declarative partitioning and register the partitioned table",
            ));
        }
    }
    if !table.partitioned && !children.is_empty() {
        let names: Vec<String> = children.iter().map(|l| l.child.to_string()).collect();
        issues.push(Issue::new(
            format!(
                "the table is inherited by {} (table inheritance): a DELETE or UPDATE on it reaches their rows too",
                names.join(", ")
            ),
            "detach the children (ALTER TABLE child NO INHERIT parent), or use declarative partitioning",
        ));
    }
    issues
}
