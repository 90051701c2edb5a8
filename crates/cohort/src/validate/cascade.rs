//! V3: no ON DELETE CASCADE path leads from a purgeable retained table into a
//! retained table (itself included), directly or through any chain of other
//! tables, retained or not. A cascade would delete the other type's rows
//! behind its retention window, its holds and the ledger.
//!
//! The graph has an edge from each referenced table to each table whose
//! foreign key cascades from it (partitions folded into their partitioned
//! table). A breadth-first walk from each purgeable table finds the shortest
//! path to every retained table it reaches; cycles end the walk where a table
//! was seen before.

use std::collections::{HashMap, HashSet, VecDeque};

use super::report::Issue;
use crate::catalog::{ForeignKey, OnDelete};

/// A cascade path from a purgeable table into a retained one.
#[derive(Debug)]
pub(super) struct CascadePath<'a> {
    /// The retained table reached (may be the start itself).
    pub(super) reached: u32,
    /// The keys walked, in order: the first references the start, the last
    /// is on the table reached.
    pub(super) keys: Vec<&'a ForeignKey>,
}

/// Every retained table that deleting from `start` cascades into, each with
/// its shortest path.
pub(super) fn paths_into_retained<'a>(
    keys: &'a [ForeignKey],
    start: u32,
    retained: &HashSet<u32>,
) -> Vec<CascadePath<'a>> {
    let mut edges: HashMap<u32, Vec<&'a ForeignKey>> = HashMap::new();
    for k in keys.iter().filter(|k| k.on_delete == OnDelete::Cascade) {
        edges.entry(k.referenced_oid).or_default().push(k);
    }
    // How each table was first reached. The start is not marked seen, so a
    // cycle back into it is found (once).
    let mut via: HashMap<u32, &'a ForeignKey> = HashMap::new();
    let mut queue = VecDeque::from([start]);
    let mut found = Vec::new();
    while let Some(table) = queue.pop_front() {
        for &k in edges.get(&table).map(Vec::as_slice).unwrap_or_default() {
            let next = k.referencing_oid;
            if via.contains_key(&next) {
                continue;
            }
            via.insert(next, k);
            if retained.contains(&next) {
                found.push(CascadePath {
                    reached: next,
                    keys: path_to(next, start, &via),
                });
            }
            if next != start {
                queue.push_back(next);
            }
        }
    }
    found
}

/// The keys from `start` to `end`, following how each table was reached.
fn path_to<'a>(end: u32, start: u32, via: &HashMap<u32, &'a ForeignKey>) -> Vec<&'a ForeignKey> {
    let mut keys = Vec::new();
    let mut table = end;
    // Each step goes to a table reached earlier, so the walk ends at `start`;
    // the bound only guards against a bug.
    for _ in 0..=via.len() {
        let Some(&k) = via.get(&table) else { break };
        keys.push(k);
        table = k.referenced_oid;
        if table == start {
            break;
        }
    }
    keys.reverse();
    keys
}

/// The problem for one path, worded for the purgeable type.
pub(super) fn issue(
    category: &str,
    start: u32,
    path: &CascadePath<'_>,
    reached_type: &str,
) -> Issue {
    let mut text = match path.keys.first() {
        Some(k) => k.referenced.to_string(),
        None => String::new(),
    };
    for k in &path.keys {
        text.push_str(&format!(" → {} ({})", k.referencing, k.name));
    }
    let into = if path.reached == start {
        "back into its own table".to_owned()
    } else {
        format!("into the table of retained type {reached_type}")
    };
    Issue::new(
        format!(
            "category \"{category}\" may purge rows, and deleting a row cascades {into} through \
             ON DELETE CASCADE: {text}"
        ),
        format!(
            "change the foreign key(s) on this path to ON DELETE RESTRICT or NO ACTION (rows of \
             {reached_type} must go through their own retention rules, holds and ledger), or drop Purge \
             from the capabilities of \"{category}\""
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::RelationName;

    fn fk(name: &str, child: u32, parent: u32, on_delete: OnDelete) -> ForeignKey {
        let rel = |oid: u32| RelationName {
            schema: "public".into(),
            name: format!("t{oid}"),
        };
        ForeignKey {
            name: name.into(),
            on_delete,
            referencing_oid: child,
            referencing: rel(child),
            referenced_oid: parent,
            referenced: rel(parent),
        }
    }

    #[test]
    fn finds_chains_through_unretained_tables_self_references_and_survives_cycles() {
        use OnDelete::{Cascade, Other};
        let keys = vec![
            fk("a_to_b", 2, 1, Cascade), // 1 -> 2
            fk("b_to_c", 3, 2, Cascade), // 2 -> 3 (3 retained)
            fk("c_to_b", 2, 3, Cascade), // 3 -> 2 (cycle)
            fk("self", 4, 4, Cascade),   // 4 -> 4
            fk("plain", 5, 1, Other),    // not a cascade
            fk("c_to_a", 1, 3, Cascade), // 3 -> 1: back to the start
        ];
        let retained: HashSet<u32> = [1, 3, 4, 5].into();
        let paths = paths_into_retained(&keys, 1, &retained);
        let found: Vec<(u32, Vec<&str>)> = paths
            .iter()
            .map(|p| (p.reached, p.keys.iter().map(|k| k.name.as_str()).collect()))
            .collect();
        assert_eq!(
            found,
            vec![
                (3, vec!["a_to_b", "b_to_c"]),
                (1, vec!["a_to_b", "b_to_c", "c_to_a"]),
            ]
        );
        let text = issue("c", 1, &paths[0], "C").problem;
        assert!(
            text.contains("public.t1 → public.t2 (a_to_b) → public.t3 (b_to_c)"),
            "{text}"
        );

        let paths = paths_into_retained(&keys, 4, &retained);
        assert_eq!(paths.len(), 1);
        assert_eq!(paths[0].reached, 4);
        assert!(
            issue("c", 4, &paths[0], "D")
                .problem
                .contains("back into its own table")
        );

        assert!(paths_into_retained(&keys, 5, &retained).is_empty());
    }
}
