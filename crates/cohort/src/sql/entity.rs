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
use crate::model::resolved::{Column, ResolvedEntity};
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
///
/// Parameters: `$1` tenant, `$2` cutoff, `$3` retained-entity id, and for an
/// erasure `$4` the subject (text). `p` below is the first free parameter:
/// 4 for a sweep, 5 for an erasure.
#[derive(Debug, Clone)]
pub(crate) struct EntitySql {
    /// Eligible + not held / held / NULL anchors, counted (preview, dry run,
    /// measurement). Returns one row: `eligible`, `held`, `null_anchor`.
    pub(crate) count: String,
    /// First candidate batch: `$p` limit. Returns `tid`, `record_id`, `anchor`,
    /// then one `c{i}` text column per custom-anonymised column.
    pub(crate) candidates_first: String,
    /// Later batches after the keyset cursor: sweep `$p+1` (anchor) and
    /// `$p+2` (record id as text); erasure `$p+1` (record id as text).
    pub(crate) candidates_after: String,
    /// Takes the advisory locks of `$p` record ids (text[]) in key order.
    /// Sweep: tries them and returns the ids whose lock is held elsewhere.
    /// Erasure: waits for each (an erasure must not miss a row); returns none.
    pub(crate) lock_rows: String,
    /// The mutation of `$p` tids (text[]), re-checking eligibility and holds on
    /// a new snapshot; returns the canonical record id of each changed row.
    /// Anonymise: `$p+1..` literals, then one text[] per custom column.
    pub(crate) mutate: String,
    /// Whether this is an erasure (keyset on the record id only).
    pub(crate) erasure: bool,
}

/// What the statements are for.
pub(crate) enum Purpose<'a> {
    /// A retention sweep: age by the cutoff, skip locked rows.
    Sweep,
    /// A subject erasure: match any usable subject column; age only by a
    /// positive legal minimum; wait for locked rows.
    Erasure {
        /// The subject columns whose type accepts the subject.
        subjects: Vec<&'a Column>,
        /// Whether a positive legal minimum applies (`anchor < $2`).
        legal_minimum: bool,
    },
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
    /// The statements of `purpose` on `e` with `strategy` (not `Exempt`).
    pub(crate) fn build(
        e: &ResolvedEntity,
        strategy: Strategy,
        schema: &SchemaName,
        purpose: &Purpose<'_>,
    ) -> EntitySql {
        let table = &e.table;
        let holds = schema.table("retention_holds").to_string();
        let rid = &e.record_id.name;
        let rid_type = &e.record_id.sql_type;
        let anchor = &e.anchor.name;
        let pending = strategy_pending(e, strategy);
        let held = active_hold(e, &holds, "$3");
        let tenant = match &e.tenant {
            Some(t) => format!("t.{} = $1", t.name),
            None => "true".to_owned(),
        };
        let (erasure, p, scope, age) = match purpose {
            Purpose::Sweep => (false, 4, tenant.clone(), format!(" AND t.{anchor} < $2")),
            Purpose::Erasure {
                subjects,
                legal_minimum,
            } => {
                let any: Vec<String> = subjects
                    .iter()
                    .map(|c| format!("t.{} = CAST($4::pg_catalog.text AS {})", c.name, c.sql_type))
                    .collect();
                let matched = if any.is_empty() {
                    "false".to_owned()
                } else {
                    any.join(" OR ")
                };
                let age = if *legal_minimum {
                    format!(" AND t.{anchor} < $2")
                } else {
                    String::new()
                };
                (true, 5, format!("{tenant} AND ({matched})"), age)
            }
        };
        let eligible = format!("{scope}{age}{pending}");
        // Each count is its own index-friendly scan: rows past the cutoff
        // (split by hold), and NULL anchors.
        let null_anchor = match purpose {
            Purpose::Sweep
            | Purpose::Erasure {
                legal_minimum: true,
                ..
            } => {
                format!(
                    "(SELECT count(*) FROM {table} AS t WHERE {scope} AND t.{anchor} IS NULL{pending})"
                )
            }
            Purpose::Erasure {
                legal_minimum: false,
                ..
            } => "0::pg_catalog.int8".to_owned(),
        };
        let count = format!(
            "SELECT count(*) FILTER (WHERE NOT {held}) AS eligible, count(*) FILTER (WHERE {held}) AS held, \
                    {null_anchor} AS null_anchor \
             FROM {table} AS t WHERE {eligible}"
        );
        let customs: Vec<_> = e
            .anonymise
            .iter()
            .filter(|a| {
                strategy == Strategy::Anonymise && matches!(a.method, AnonymiseMethod::Custom(_))
            })
            .collect();
        let mut select = format!(
            "SELECT t.ctid::pg_catalog.text AS tid, (t.{rid})::pg_catalog.text AS record_id, \
             (t.{anchor})::pg_catalog.timestamptz AS anchor"
        );
        for (i, a) in customs.iter().enumerate() {
            let _ = write!(select, ", (t.{})::pg_catalog.text AS c{i}", a.column.name);
        }
        // Holds are judged by statement 3, after the locks, on a fresh snapshot;
        // judging them here too would only cost a probe per row.
        let base = format!("{select} FROM {table} AS t WHERE {eligible}");
        // The keyset cursor compares with `>` resolved by name, so the order is
        // `USING <`, resolved the same way: for a key type whose operators are
        // not on the session's path (an extension type in another schema) both
        // fall back to the same text operators, and batches stay consistent.
        let (candidates_first, candidates_after) = if erasure {
            // Erasure waits for locked rows: a row a concurrent transaction
            // holds must not be silently missed.
            let tail = format!("ORDER BY t.{rid} USING < LIMIT ${p} FOR UPDATE OF t");
            (
                format!("{base} {tail}"),
                format!(
                    "{base} AND t.{rid} > CAST(${}::pg_catalog.text AS {rid_type}) {tail}",
                    p + 1
                ),
            )
        } else {
            let tail = format!(
                "ORDER BY t.{anchor}, t.{rid} USING < LIMIT ${p} FOR UPDATE OF t SKIP LOCKED"
            );
            (
                format!("{base} {tail}"),
                format!(
                    "{base} AND (t.{anchor}, t.{rid}) > (${}::pg_catalog.timestamptz, CAST(${}::pg_catalog.text AS {rid_type})) {tail}",
                    p + 1,
                    p + 2
                ),
            )
        };
        let key = row_lock_key("$3::pg_catalog.uuid", "$1::pg_catalog.uuid", "r");
        let lock_rows = if erasure {
            format!(
                "SELECT COALESCE(pg_catalog.array_agg(s.r) FILTER (WHERE false), '{{}}') FROM ( \
                   SELECT o.r, pg_catalog.pg_advisory_xact_lock(o.k) AS got FROM ( \
                     SELECT r, {key} AS k FROM pg_catalog.unnest(${p}::pg_catalog.text[]) AS r ORDER BY 2) o) s"
            )
        } else {
            format!(
                "SELECT COALESCE(pg_catalog.array_agg(s.r) FILTER (WHERE NOT s.got), '{{}}') FROM ( \
                   SELECT o.r, pg_catalog.pg_try_advisory_xact_lock(o.k) AS got FROM ( \
                     SELECT r, {key} AS k FROM pg_catalog.unnest(${p}::pg_catalog.text[]) AS r ORDER BY 2) o) s"
            )
        };
        let recheck = format!("{eligible} AND NOT {held}");
        let tids = format!("${p}::pg_catalog.text[]");
        let mutate = match strategy {
            Strategy::Purge | Strategy::Exempt => format!(
                "DELETE FROM {table} AS t WHERE t.ctid = ANY ({tids}::pg_catalog.tid[]) AND {recheck} \
                 RETURNING (t.{rid})::pg_catalog.text"
            ),
            Strategy::SoftDelete => {
                let mut set = Vec::new();
                if let Some(flag) = &e.soft_delete {
                    set.push(format!("{} = true", flag.name));
                }
                if let Some(at) = &e.deleted_at {
                    set.push(format!("{} = pg_catalog.statement_timestamp()", at.name));
                }
                format!(
                    "UPDATE {table} AS t SET {set} \
                     WHERE t.ctid = ANY ({tids}::pg_catalog.tid[]) AND {recheck} \
                     RETURNING (t.{rid})::pg_catalog.text",
                    set = set.join(", ")
                )
            }
            Strategy::Anonymise => {
                let mut sets = Vec::new();
                let mut param = p + 1;
                let mut unnest = vec![format!("pg_catalog.unnest({tids})")];
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
            erasure,
        }
    }
}
