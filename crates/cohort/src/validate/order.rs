//! X16: the order the engine processes retained types in.
//!
//! Where retained tables reference each other through foreign keys without
//! cascade, the referencing (child) type comes before the type it references,
//! so expired children go before their expired parent in the same run instead
//! of making the parent's delete fail on the key. Otherwise registration order
//! is kept. Types in a cycle of such keys keep their registration order among
//! themselves (no order satisfies a cycle; validation does not fail for it).

use std::collections::{BTreeMap, BTreeSet, HashMap};

use crate::catalog::{ForeignKey, OnDelete};

/// The processing order of the types whose tables are `tables` (in
/// registration order, one distinct table each), as indices into `tables`.
pub(super) fn processing_order(tables: &[u32], keys: &[ForeignKey]) -> Vec<usize> {
    let n = tables.len();
    let index: HashMap<u32, usize> = tables.iter().enumerate().map(|(i, &t)| (t, i)).collect();
    // child -> parents: the child must come first.
    let mut before: Vec<BTreeSet<usize>> = vec![BTreeSet::new(); n];
    for k in keys.iter().filter(|k| k.on_delete == OnDelete::Other) {
        if let (Some(&child), Some(&parent)) =
            (index.get(&k.referencing_oid), index.get(&k.referenced_oid))
            && child != parent
        {
            before[child].insert(parent);
        }
    }

    // Strongly connected components by mutual reachability (n is small).
    let reach: Vec<Vec<bool>> = (0..n)
        .map(|start| {
            let mut seen = vec![false; n];
            let mut stack = vec![start];
            while let Some(i) = stack.pop() {
                for &j in &before[i] {
                    if !seen[j] {
                        seen[j] = true;
                        stack.push(j);
                    }
                }
            }
            seen
        })
        .collect();
    // Each component is named by its lowest index (its first-registered member).
    let component: Vec<usize> = (0..n)
        .map(|i| {
            (0..n)
                .find(|&j| j == i || (reach[i][j] && reach[j][i]))
                .unwrap_or(i)
        })
        .collect();
    let mut members: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
    for (i, &c) in component.iter().enumerate() {
        members.entry(c).or_default().push(i);
    }

    // Kahn's algorithm on components, lowest first-registered member first.
    let mut successors: BTreeMap<usize, BTreeSet<usize>> = BTreeMap::new();
    let mut pending: BTreeMap<usize, usize> = members.keys().map(|&c| (c, 0)).collect();
    for (child, parents) in before.iter().enumerate() {
        for &parent in parents {
            let (a, b) = (component[child], component[parent]);
            if a != b && successors.entry(a).or_default().insert(b) {
                *pending.entry(b).or_default() += 1;
            }
        }
    }
    let mut ready: BTreeSet<usize> = pending
        .iter()
        .filter(|(_, n)| **n == 0)
        .map(|(&c, _)| c)
        .collect();
    let mut order = Vec::with_capacity(n);
    while let Some(c) = ready.pop_first() {
        order.extend(members.get(&c).into_iter().flatten().copied());
        for &next in successors.get(&c).into_iter().flatten() {
            if let Some(p) = pending.get_mut(&next) {
                *p -= 1;
                if *p == 0 {
                    ready.insert(next);
                }
            }
        }
    }
    order
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::RelationName;

    fn fk(child: u32, parent: u32, on_delete: OnDelete) -> ForeignKey {
        let rel = RelationName {
            schema: "public".into(),
            name: "t".into(),
        };
        ForeignKey {
            name: format!("{child}_{parent}"),
            on_delete,
            referencing_oid: child,
            referencing: rel.clone(),
            referenced_oid: parent,
            referenced: rel,
        }
    }

    #[test]
    fn children_first_registration_order_otherwise() {
        // Registered: parent 10, unrelated 20, child 30 -> 10, grandchild 40 -> 30.
        let keys = [fk(30, 10, OnDelete::Other), fk(40, 30, OnDelete::Other)];
        assert_eq!(processing_order(&[10, 20, 30, 40], &keys), vec![1, 3, 2, 0]);
        // Cascading keys, self-references and unknown tables do not order anything.
        let keys = [
            fk(30, 10, OnDelete::Cascade),
            fk(10, 10, OnDelete::Other),
            fk(99, 10, OnDelete::Other),
        ];
        assert_eq!(processing_order(&[10, 20, 30], &keys), vec![0, 1, 2]);
    }

    #[test]
    fn cycles_keep_registration_order_and_still_come_after_their_children() {
        // 10 <-> 20 form a cycle; 30 references 20, so it goes first.
        let keys = [
            fk(10, 20, OnDelete::Other),
            fk(20, 10, OnDelete::Other),
            fk(30, 20, OnDelete::Other),
        ];
        assert_eq!(processing_order(&[10, 20, 30], &keys), vec![2, 0, 1]);
        // A cycle of three with an outside parent: the cycle before its parent.
        let keys = [
            fk(1, 2, OnDelete::Other),
            fk(2, 3, OnDelete::Other),
            fk(3, 1, OnDelete::Other),
            fk(3, 4, OnDelete::Other),
        ];
        assert_eq!(processing_order(&[4, 1, 2, 3], &keys), vec![1, 2, 3, 0]);
    }
}
