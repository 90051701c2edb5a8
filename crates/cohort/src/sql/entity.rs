//! The SQL of one retained type: every statement a preview, sweep or erasure
//! runs against the host's table, built once per entity from quoted
//! identifiers and catalog type names. Values are always parameters.
//!
//! Parameter layout shared by every statement here:
//! `$1` tenant (uuid, NULL for tenantless types), `$2` cutoff (timestamptz),
//! `$3` retained-entity id (uuid). Statements add theirs from `$4`.
//!
//! These statements run in transactions whose `search_path` is pinned to
//! `pg_catalog`, so plain operators resolve to the built-in ones; relations
//! are always schema-qualified.

use std::fmt::Write as _;

use crate::model::AnonymiseMethod;
use crate::model::resolved::ResolvedEntity;
use crate::policy::Strategy;
use crate::schema::SchemaName;

/// The advisory-lock key of one row: the same expression for sweeps, erasure,
/// hold creation and host deletions. `entity`, `tenant` and `record` are SQL
/// expressions of type uuid, uuid (NULL for tenantless) and text.
pub(crate) fn row_lock_key(entity: &str, tenant: &str, record: &str) -> String {
    format!(
        "pg_catalog.hashtextextended(({entity})::pg_catalog.text || '|' || \
         COALESCE(({tenant})::pg_catalog.text, '') || '|' || ({record}), 4341726887)"
    )
}

/// The active-hold test for row alias `t`, judged against the database clock.
/// `entity` is the SQL expression of the retained-entity id.
fn active_hold(e: &ResolvedEntity, holds: &str, entity: &str) -> String {
    let rid = &e.record_id.name;
    let tenant = match &e.tenant {
        Some(c) => format!("h.tenant_id = t.{}", c.name),
        None => "h.tenant_id IS NULL".to_owned(),
    };
    format!(
        "EXISTS (SELECT 1 FROM {holds} h WHERE h.retained_entity_id = {entity} \
         AND h.record_id = (t.{rid})::pg_catalog.text AND {tenant} \
         AND h.created_at <= pg_catalog.statement_timestamp() \
         AND (h.expires_at IS NULL OR h.expires_at > pg_catalog.statement_timestamp()) \
         AND (h.removed_at IS NULL OR h.removed_at > pg_catalog.statement_timestamp()))"
    )
}

/// Every statement of one entity and strategy.
#[derive(Debug, Clone)]
pub(crate) struct EntitySql {
    /// Eligible + not held / held / NULL anchors, counted (preview, dry run, measurement).
    /// Returns one row: `eligible`, `held`, `null_anchor` (bigint).
    pub(crate) count: String,
    /// First candidate batch: `$4` limit. Returns `tid`, `record_id`, `anchor`,
    /// `rid_text`, then one `c{i}` text column per custom-anonymised column.
    pub(crate) candidates_first: String,
    /// Later batches, after the keyset cursor `$5` (anchor), `$6` (record id as text).
    pub(crate) candidates_after: String,
    /// Tries the advisory locks of `$4` record ids (text[]) in key order;
    /// returns the ids whose lock is held elsewhere.
    pub(crate) lock_rows: String,
    /// The mutation of `$4` tids (text[]), re-checking eligibility and holds on
    /// a new snapshot; returns the canonical record id of each changed row.
    /// Anonymise: `$5..` literals, then one text[] per custom column (aligned with `$4`).
    pub(crate) mutate: String,
}

/// The eligibility conditions of a sweep on row alias `t`.
fn sweep_eligible(e: &ResolvedEntity, strategy: Strategy) -> String {
    let mut w = String::new();
    if let Some(t) = &e.tenant {
        let _ = write!(w, "t.{} = $1 AND ", t.name);
    }
    let _ = write!(w, "t.{} < $2", e.anchor.name);
    w.push_str(&strategy_pending(e, strategy));
    w
}

/// The strategy's own "not done yet" condition (` AND ...`, or empty).
fn strategy_pending(e: &ResolvedEntity, strategy: Strategy) -> String {
    match strategy {
        Strategy::SoftDelete => e
            .soft_delete
            .as_ref()
            .map(|c| format!(" AND t.{} IS NOT TRUE", c.name))
            .unwrap_or_default(),
        Strategy::Anonymise => e
            .anonymised_at
            .as_ref()
            .map(|c| format!(" AND t.{} IS NULL", c.name))
            .unwrap_or_default(),
        Strategy::Purge | Strategy::Exempt => String::new(),
    }
}

impl EntitySql {
    /// The statements of a sweep of `e` with `strategy` (not `Exempt`).
    pub(crate) fn sweep(e: &ResolvedEntity, strategy: Strategy, schema: &SchemaName) -> EntitySql {
        let table = &e.table;
        let holds = schema.table("retention_holds");
        let rid = &e.record_id.name;
        let anchor = &e.anchor.name;
        let eligible = sweep_eligible(e, strategy);
        let held = active_hold(e, &holds.to_string(), "$3");
        let tenant_only = match &e.tenant {
            Some(t) => format!("t.{} = $1", t.name),
            None => "true".to_owned(),
        };
        let count = format!(
            "SELECT count(*) FILTER (WHERE {eligible} AND NOT {held}) AS eligible, \
                    count(*) FILTER (WHERE {eligible} AND {held}) AS held, \
                    count(*) FILTER (WHERE t.{anchor} IS NULL{pending}) AS null_anchor \
             FROM {table} AS t WHERE {tenant_only} AND (t.{anchor} < $2 OR t.{anchor} IS NULL)",
            pending = strategy_pending(e, strategy),
        );
        let customs: Vec<_> = e
            .anonymise
            .iter()
            .filter(|a| {
                strategy == Strategy::Anonymise && matches!(a.method, AnonymiseMethod::Custom(_))
            })
            .collect();
        let mut select = format!(
            "SELECT t.ctid::pg_catalog.text AS tid, (t.{rid})::pg_catalog.text AS record_id, (t.{anchor})::pg_catalog.timestamptz AS anchor"
        );
        for (i, a) in customs.iter().enumerate() {
            let _ = write!(select, ", (t.{})::pg_catalog.text AS c{i}", a.column.name);
        }
        let base = format!("{select} FROM {table} AS t WHERE {eligible} AND NOT {held}");
        let tail = format!("ORDER BY t.{anchor}, t.{rid} LIMIT $4 FOR UPDATE OF t SKIP LOCKED");
        let candidates_first = format!("{base} {tail}");
        let candidates_after = format!(
            "{base} AND (t.{anchor}, t.{rid}) > ($5::pg_catalog.timestamptz, CAST($6::pg_catalog.text AS {rid_type})) {tail}",
            rid_type = e.record_id.sql_type,
        );
        let lock_rows = format!(
            "SELECT COALESCE(pg_catalog.array_agg(s.r) FILTER (WHERE NOT s.got), '{{}}') FROM ( \
               SELECT o.r, pg_catalog.pg_try_advisory_xact_lock(o.k) AS got FROM ( \
                 SELECT r, {key} AS k FROM pg_catalog.unnest($4::pg_catalog.text[]) AS r ORDER BY 2) o) s",
            key = row_lock_key("$3::pg_catalog.uuid", "$1::pg_catalog.uuid", "r"),
        );
        let recheck = format!("{eligible} AND NOT {held}");
        let mutate = match strategy {
            Strategy::Purge | Strategy::Exempt => format!(
                "DELETE FROM {table} AS t WHERE t.ctid = ANY ($4::pg_catalog.text[]::pg_catalog.tid[]) AND {recheck} \
                 RETURNING (t.{rid})::pg_catalog.text"
            ),
            Strategy::SoftDelete => {
                let mut set = String::new();
                if let Some(flag) = &e.soft_delete {
                    let _ = write!(set, "{} = true", flag.name);
                }
                if let Some(at) = &e.deleted_at {
                    let _ = write!(set, ", {} = pg_catalog.statement_timestamp()", at.name);
                }
                format!(
                    "UPDATE {table} AS t SET {set} \
                     WHERE t.ctid = ANY ($4::pg_catalog.text[]::pg_catalog.tid[]) AND {recheck} \
                     RETURNING (t.{rid})::pg_catalog.text"
                )
            }
            Strategy::Anonymise => {
                let mut sets = Vec::new();
                let mut param = 5;
                let mut unnest = vec!["pg_catalog.unnest($4::pg_catalog.text[])".to_owned()];
                let mut names = vec!["tid".to_owned()];
                for a in &e.anonymise {
                    let col = &a.column.name;
                    match a.method {
                        AnonymiseMethod::Null => sets.push(format!("{col} = NULL")),
                        AnonymiseMethod::EmptyString => sets.push(format!("{col} = ''")),
                        AnonymiseMethod::Literal(_) => {
                            sets.push(format!("{col} = ${param}::pg_catalog.text"));
                            param += 1;
                        }
                        AnonymiseMethod::Custom(_) => {}
                    }
                }
                for (i, a) in customs.iter().enumerate() {
                    unnest.push(format!("pg_catalog.unnest(${param}::pg_catalog.text[])"));
                    names.push(format!("n{i}"));
                    sets.push(format!("{} = v.n{i}", a.column.name));
                    param += 1;
                }
                if let Some(at) = &e.anonymised_at {
                    sets.push(format!("{} = pg_catalog.statement_timestamp()", at.name));
                }
                format!(
                    "UPDATE {table} AS t SET {sets} \
                     FROM ROWS FROM ({unnest}) AS v({names}) \
                     WHERE t.ctid = v.tid::pg_catalog.tid AND {recheck} \
                     RETURNING (t.{rid})::pg_catalog.text",
                    sets = sets.join(", "),
                    unnest = unnest.join(", "),
                    names = names.join(", "),
                )
            }
        };
        EntitySql {
            count,
            candidates_first,
            candidates_after,
            lock_rows,
            mutate,
        }
    }
}
