//! The statements one retained type runs in a preview, sweep or erasure,
//! built once per entity and strategy from quoted identifiers and catalog
//! type names. Values are bind parameters, allocated by role ([`P`]).
//!
//! Two batch paths, one alternative to the other (see `docs/design.md`):
//!
//! - **range** (sweeps that need no row's values: purge, soft-delete and
//!   built-in anonymisation): one statement finds the batch's upper key with
//!   an index scan (`OFFSET batch - 1 LIMIT 1` after the lower key) and
//!   mutates the key range `(anchor, key) > lo AND (anchor, key) <= hi` with
//!   eligibility and the hold anti-join in it, writing the ledger in the same
//!   statement;
//! - **locked** (custom anonymisers, erasure, and the fallback when a range
//!   statement meets a locked row): the batch's rows are selected
//!   `FOR UPDATE` with their values, then mutated by `(tableoid, ctid)` (a
//!   partition's ctids repeat in its siblings, so never by `ctid` alone) in a
//!   second statement that re-checks eligibility and holds.
//!
//! Both run inside a batch transaction that took the entity fence first.

use std::fmt::Write as _;

use crate::holds::matter_set::{MatterParam, matter_held};
use crate::ledger::Ledger;
use crate::model::AnonymiseMethod;
use crate::model::resolved::{ARCHIVE_AT, ARCHIVE_BATCH, ARCHIVE_RUN, Column, ResolvedEntity};
use crate::policy::Strategy;
use crate::schema::SchemaName;
use crate::sql::predicates::{active_hold_exists, hold_active_at};
use crate::sql::{Ident, Params, Statement};

/// The values the statements bind, by role.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum P {
    /// The scope's tenant (uuid); only tenant-scoped types bind it.
    Tenant,
    /// The cutoff (`PgTime`): `anchor < cutoff` is old enough.
    Cutoff,
    /// The retained-entity id (uuid).
    Entity,
    /// The erasure subject (text).
    Subject,
    /// `batch size - 1` (bigint): the range path's upper-key offset.
    Offset,
    /// The batch size (bigint): the locked path's limit.
    Limit,
    /// The lower key's anchor (`PgTime`), after the first batch of a sweep.
    LoAnchor,
    /// The lower key's record id (text), after the first batch.
    LoKey,
    /// The text of the anonymised column at this index of `entity.anonymise`.
    Literal(usize),
    /// The entity's summary id (bigint).
    Summary,
    /// The run id (uuid), for row details.
    Run,
    /// The entity's type name (text), for row details.
    EntityType,
    /// The ledger's tenant (uuid, nil for tenantless), for row details.
    LedgerTenant,
    /// The action (text), for row details.
    Action,
    /// The locked rows' `tableoid`s (oid[]).
    Oids,
    /// The locked rows' `ctid`s (text[]).
    Tids,
    /// Replacement values of the custom-anonymised column at this index
    /// among the custom ones (text[]).
    Custom(usize),
    /// The record ids of the rows whose handler snapshots are bound (text[]).
    PayloadRids,
    /// Those rows' snapshots, one JSON object per row (text[]).
    Payloads,
    /// The type's handlers' identities (text[]).
    HandlerIds,
    /// Their ranks (int4[]).
    HandlerRanks,
    /// Whether each waits for the run to settle (bool[]).
    HandlerAfter,
    /// The schema of Cohort's tables (text), the payload of the
    /// notification that work was queued.
    Schema,
    /// The bits of the batch loop's filter of the type's holds (bytea;
    /// see `run::holds_filter`).
    HoldBits,
    /// The filter's mask (int4): bit `hashtext(record id) & mask`; `-1`
    /// when the type has no hold to filter for.
    HoldMask,
    /// The type's holds version the filter was read at (int8).
    HoldsVersion,
    /// A value of the type's matters (see `holds::matter_set`).
    Matter(MatterParam),
    /// A later stage's bound on the previous stamp (`PgTime`): the database
    /// time the run's stages began, so a row stamped in this run (a stamp
    /// from then to the statement's time) is never taken by a later stage
    /// of the same run (contract SL1).
    StageBefore,
    /// A later stage's legal-minimum cutoff on the anchor (`PgTime`).
    LegalCutoff,
    /// The archive table's name, unquoted (text), for the archive batch's
    /// ledger row (contract SL2).
    ArchiveTable,
    /// The values of a category's slice (text[]; contract SL3).
    SliceValues,
    /// The disposition batch (uuid) a sweep carries out or freezes into
    /// (contracts DR1, DR2; see `run::review`).
    Batch,
    /// The rule's stage a disposition batch is for (int4).
    ReviewStage,
    /// The SHA-256 of the rule's content (bytea).
    RuleHash,
    /// The run's logical time (`PgTime`): rejections and extensions keep
    /// rows until then.
    LogicalNow,
    /// The event type a rule counts its period from (text; contract SL4).
    EventType,
    /// The physical-order batch's lower bound, exclusive (text of a `tid`;
    /// see `run::order`).
    LoTid,
    /// The end of the batch's window of pages, exclusive (text of a `tid`
    /// `(page, 0)`).
    EndTid,
    /// The last `tid` of the window, `(end page - 1, 65535)`: the batch's
    /// upper bound when the window holds fewer eligible rows than a batch.
    LastTid,
}

/// One stage of a staged rule, as its statements see it (contract SL1).
#[derive(Debug, Clone, Copy)]
pub(crate) struct StageSql<'a> {
    /// The column the stage ages by: the previous stage's stamp; `None` for
    /// the first stage, which ages by the anchor.
    pub(crate) age: Option<&'a Column>,
    /// The earlier stages' strategies: a row must be in each one's state.
    pub(crate) earlier: &'a [Strategy],
    /// The later stages' strategies: a row in any one's state is past this
    /// stage and never taken back by it.
    pub(crate) later: &'a [Strategy],
    /// Whether the legal minimum is checked on the anchor
    /// ([`P::LegalCutoff`]).
    pub(crate) legal_minimum: bool,
}

/// What the statements are for.
pub(crate) enum Purpose<'a> {
    /// A retention sweep: age by the cutoff; locked rows are skipped.
    Sweep,
    /// A subject erasure: match any usable subject column; age only by a
    /// positive legal minimum; wait for locked rows.
    Erasure {
        /// The subject columns whose type accepts the subject.
        subjects: Vec<&'a Column>,
        /// Whether a positive legal minimum applies (`anchor < cutoff`).
        legal_minimum: bool,
    },
}

/// Every statement of one entity and strategy (not `Exempt`).
#[derive(Debug, Clone)]
pub(crate) struct EntitySql {
    /// One row: `eligible` (not held), `held`, `null_anchor`, `legal_minimum`.
    pub(crate) count: Statement<P>,
    /// The range path, first batch and later ones (`None` when the rows'
    /// values are needed, and for erasures). Returns one row: `hi_anchor`,
    /// `hi_key` (NULL on the last batch), `affected`, and `ids` (text[]) when
    /// the rule audits per row.
    pub(crate) range: Option<[Statement<P>; 2]>,
    /// The range path when the type has matters: the same statements, whose
    /// upper key counts only rows no matter covers, so a batch passes any
    /// number of covered rows in one index scan instead of committing empty
    /// batches across them (contract MH4).
    pub(crate) range_matters: Option<[Statement<P>; 2]>,
    /// The range path in physical order (`run::order`): the same change and
    /// ledger, over the rows of a window of pages after a `tid` instead of
    /// a key range; returns `hi_tid` instead of `hi_anchor`/`hi_key`.
    /// `None` where the range path is `None`, and for a disposition batch's
    /// carry-out.
    pub(crate) pages: Option<Statement<P>>,
    /// `EXPLAIN SELECT 1 FROM t WHERE <eligible>`: the planner's estimate of
    /// the eligible rows, from which `run::order` chooses the batch order.
    pub(crate) estimate: Statement<P>,
    /// The first batch's rows in anchor order: how many pages they lie on
    /// (`pages`) and how many they are (`n`), from which `run::order`
    /// judges how scattered anchor-ordered batches are.
    pub(crate) sample: Statement<P>,
    /// The locked path's candidates, first batch and later ones: `o`
    /// (tableoid), `c` (ctid text), `record_id`, `anchor`, then `v0..` (the
    /// custom-anonymised columns' text).
    pub(crate) candidates: [Statement<P>; 2],
    /// The locked path's mutation of the rows `Oids`/`Tids`; returns
    /// `affected` and `ids` when the rule audits per row.
    pub(crate) mutate: Statement<P>,
    /// How many custom-anonymised columns the locked path computes.
    pub(crate) customs: usize,
    /// Whether each changed row is written as a row detail.
    pub(crate) per_row: bool,
    /// Whether row handlers capture the rows (locked path, details with
    /// payloads, queued work).
    pub(crate) capture: bool,
}

/// The shared pieces, written once per statement with its own placeholders.
struct Parts<'a> {
    e: &'a ResolvedEntity,
    strategy: Strategy,
    purpose: &'a Purpose<'a>,
    holds: String,
    ledger: &'a Ledger,
    per_row: bool,
    schema: &'a SchemaName,
    /// Whether the type's row handlers capture its rows.
    capture: bool,
    /// The stage of a staged rule, if any.
    stage: Option<StageSql<'a>>,
    /// Whether the statements are restricted to the rows of one approved
    /// disposition batch ([`P::Batch`]; contract DR2).
    batch: bool,
    /// The rule counts its period from an event (contract SL4): rows age by
    /// their subject's event, not the anchor.
    event: bool,
}

impl Parts<'_> {
    fn erasure(&self) -> bool {
        matches!(self.purpose, Purpose::Erasure { .. })
    }

    /// Tenant, subject, age and "not done yet".
    fn eligible(&self, b: &mut Params<P>) -> String {
        let e = self.e;
        let mut s = match &e.tenant {
            Some(t) => format!("t.{} = {}", t.name, b.p(P::Tenant)),
            None => "true".to_owned(),
        };
        if let Purpose::Erasure { subjects, .. } = self.purpose {
            let subject = b.p(P::Subject);
            let any: Vec<String> = subjects
                .iter()
                .map(|c| c.equals_text("t", &subject))
                .collect();
            if any.is_empty() {
                s.push_str(" AND false");
            } else {
                let _ = write!(s, " AND ({})", any.join(" OR "));
            }
        }
        if self.aged() {
            if self.by_event() {
                let cutoff = b.p(P::Cutoff);
                let _ = write!(s, " AND {}", self.event_exists(b, Some(&cutoff)));
            } else {
                let _ = write!(s, " AND t.{} < {}", self.age().name, b.p(P::Cutoff));
            }
        }
        s.push_str(&self.pending());
        s.push_str(&self.stage_state(b));
        s.push_str(&self.slice(b));
        if self.batch {
            s.push_str(&self.in_batch(b));
        }
        s
    }

    /// A category's rows of a type whose rows take their category from a
    /// column (` AND ...`, or empty; contract SL3): the column's value is
    /// one of the slice's values, or, for the default category, none of the
    /// mapped ones (NULL included). Compared in the column's own type with
    /// its own equality (the values read as that type, as erasure reads a
    /// subject), so an index on the column serves it and a type whose
    /// equality is not its text's (`citext`, `numeric`) compares as the
    /// column does. Judged at the statement, so a row whose value changes
    /// between batches goes by its value then.
    fn slice(&self, b: &mut Params<P>) -> String {
        let Some(slice) = &self.e.slice else {
            return String::new();
        };
        let values = b.p(P::SliceValues);
        let c = &slice.column;
        let any = format!(
            "t.{col} {eq} ANY (CAST({values}::pg_catalog.text[] AS {cmp}[]))",
            col = c.name,
            eq = c.eq,
            cmp = c.cmp_type
        );
        if slice.others {
            format!(" AND (t.{} IS NULL OR NOT ({any}))", c.name)
        } else {
            format!(" AND {any}")
        }
    }

    /// Whether rows age by their subject's event (contract SL4): the rule
    /// counts from one, in a sweep, at its first stage.
    fn by_event(&self) -> bool {
        self.event
            && !self.erasure()
            && self.stage.is_none_or(|s| s.age.is_none())
            && self.e.event_key.is_some()
    }

    /// A live event of the rule's type for row `t`'s subject key (and
    /// tenant), before `cutoff` when given: one probe of the events'
    /// `(event_type, subject_key, tenant_id)` index.
    fn event_exists(&self, b: &mut Params<P>, cutoff: Option<&str>) -> String {
        let Some(key) = &self.e.event_key else {
            return "false".to_owned();
        };
        let tenant = match &self.e.tenant {
            Some(c) => format!("ev.tenant_id OPERATOR(pg_catalog.=) t.{}", c.name),
            None => "ev.tenant_id IS NULL".to_owned(),
        };
        let before = cutoff
            .map(|c| format!(" AND ev.occurred_at OPERATOR(pg_catalog.<) {c}"))
            .unwrap_or_default();
        format!(
            "EXISTS (SELECT 1 FROM {events} AS ev \
              WHERE ev.event_type OPERATOR(pg_catalog.=) {kind}::pg_catalog.text \
                AND ev.subject_key OPERATOR(pg_catalog.=) (t.{key})::pg_catalog.text \
                AND {tenant} AND ev.withdrawn_at IS NULL{before})",
            events = self.schema.table("retention_events"),
            kind = b.p(P::EventType),
            key = key.name,
        )
    }

    /// The column rows age by: the anchor, or a later stage's stamp.
    fn age(&self) -> &Column {
        self.stage.and_then(|s| s.age).unwrap_or(&self.e.anchor)
    }

    /// A row is in the state `strategy` leaves it in (` AND`-able), or
    /// `None` for a strategy that leaves no row.
    fn state_of(&self, strategy: Strategy) -> Option<String> {
        let e = self.e;
        match strategy {
            Strategy::SoftDelete => e
                .soft_delete
                .as_ref()
                .map(|c| format!("t.{} IS TRUE", c.name)),
            Strategy::Anonymise => e
                .anonymised_at
                .as_ref()
                .map(|c| format!("t.{} IS NOT NULL", c.name)),
            Strategy::Purge | Strategy::Exempt | Strategy::Archive => None,
        }
    }

    /// A stage's own conditions (` AND ...`, or empty): in every earlier
    /// stage's state, in no later stage's, a later stage's stamp set
    /// before this run's stages began, and the legal minimum on the anchor.
    fn stage_state(&self, b: &mut Params<P>) -> String {
        let Some(stage) = self.stage else {
            return String::new();
        };
        let mut s = String::new();
        for st in stage.earlier {
            if let Some(state) = self.state_of(*st) {
                let _ = write!(s, " AND {state}");
            }
        }
        for st in stage.later {
            if let Some(state) = self.state_of(*st) {
                let _ = write!(s, " AND ({state}) IS NOT TRUE");
            }
        }
        // Stamped by this run: at or after its stages began and not after
        // this statement (a stamp in the database's future was not written
        // by this run, and is judged like any other).
        if let Some(age) = stage.age {
            let _ = write!(
                s,
                " AND (t.{age} < {before} OR t.{age} > pg_catalog.statement_timestamp())",
                age = age.name,
                before = b.p(P::StageBefore)
            );
        }
        if stage.legal_minimum {
            let _ = write!(s, " AND t.{} < {}", self.e.anchor.name, b.p(P::LegalCutoff));
        }
        s
    }

    /// Whether `anchor < cutoff` applies.
    fn aged(&self) -> bool {
        match self.purpose {
            Purpose::Sweep => true,
            Purpose::Erasure { legal_minimum, .. } => *legal_minimum,
        }
    }

    /// The strategy's own "not done yet" condition (` AND ...`, or empty).
    fn pending(&self) -> String {
        let e = self.e;
        match self.strategy {
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
            Strategy::Purge | Strategy::Exempt | Strategy::Archive => String::new(),
        }
    }

    /// An active hold (by the database clock) covers row `t`: a per-row
    /// probe of the holds' `(retained_entity_id, record_id)` index, kept a
    /// subplan (`OFFSET 0` stops the planner from turning it into a join
    /// over every hold of the type; contract X22).
    fn held(&self, b: &mut Params<P>) -> String {
        let e = self.e;
        let tenant = match &e.tenant {
            Some(c) => format!("h.tenant_id = t.{}", c.name),
            None => "h.tenant_id IS NULL".to_owned(),
        };
        let hold = active_hold_exists(
            &self.holds,
            &b.p(P::Entity),
            &format!("(t.{})::pg_catalog.text", e.record_id.name),
            &tenant,
        );
        format!("({hold} OR {})", self.matter(b))
    }

    /// A live matter of the type (by the database clock) covers row `t`
    /// (contract MH1): the matters the batch loop read, bound as arrays.
    fn matter(&self, b: &mut Params<P>) -> String {
        matter_held(self.e, "t", "pg_catalog.statement_timestamp()", &mut |p| {
            b.p(P::Matter(p))
        })
    }

    /// [`Parts::held`] asked only of the rows the batch loop's filter of
    /// the type's holds lets through (contract X22): a row whose record id
    /// hashes to a clear bit is not held by any hold the filter was built
    /// from, and the statement's guard ([`Parts::fresh`]) makes sure no
    /// other hold was written since. The `CASE` fixes the order: the probe
    /// runs only for the rows whose bit is set (a few percent of the
    /// batch, plus the held rows), and never when the type has no hold.
    fn held_filtered(&self, b: &mut Params<P>) -> String {
        let e = self.e;
        let mask = b.p(P::HoldMask);
        let tenant = match &e.tenant {
            Some(c) => format!("h.tenant_id = t.{}", c.name),
            None => "h.tenant_id IS NULL".to_owned(),
        };
        format!(
            "(CASE WHEN {mask}::pg_catalog.int4 OPERATOR(pg_catalog.<) 0 THEN false \
                  WHEN pg_catalog.get_bit({bits}::pg_catalog.bytea, \
                           pg_catalog.hashtext((t.{rid})::pg_catalog.text) \
                           OPERATOR(pg_catalog.&) {mask}::pg_catalog.int4) OPERATOR(pg_catalog.=) 0 THEN false \
                  ELSE {hold} END OR {matter})",
            bits = b.p(P::HoldBits),
            rid = e.record_id.name,
            hold = active_hold_exists(
                &self.holds,
                &b.p(P::Entity),
                &format!("(t.{})::pg_catalog.text", e.record_id.name),
                &tenant,
            ),
            matter = self.matter(b),
        )
    }

    /// The statement's guard (one primary-key probe): the type's holds
    /// version is still the one the batch loop's filter was read at, so no
    /// hold was written for the type since (the fence keeps one from being
    /// written during the statement).
    fn fresh(&self, b: &mut Params<P>) -> String {
        format!(
            "(SELECT r.holds_version FROM {registry} AS r \
              WHERE r.retained_entity_id = {entity}) IS NOT DISTINCT FROM {version}::pg_catalog.int8",
            registry = self.schema.table("retention_entities"),
            entity = b.p(P::Entity),
            version = b.p(P::HoldsVersion),
        )
    }

    /// `LEFT JOIN` of `t` to the distinct active holds of the type (and
    /// tenant) on the row's record id: `h.record_id` is NULL for rows no
    /// hold covers. Distinct, so a row with two holds counts once.
    fn held_join(&self, b: &mut Params<P>) -> String {
        let e = self.e;
        let (scope, on_tenant) = match &e.tenant {
            Some(c) => (
                format!(" AND h.tenant_id = {}", b.p(P::Tenant)),
                format!(" AND h.tenant_id = t.{}", c.name),
            ),
            None => (" AND h.tenant_id IS NULL".to_owned(), String::new()),
        };
        format!(
            "LEFT JOIN (SELECT DISTINCT h.record_id, h.tenant_id FROM {holds} AS h \
             WHERE h.retained_entity_id = {entity}{scope} AND {active}) AS h \
             ON h.record_id = (t.{rid})::pg_catalog.text{on_tenant}",
            holds = self.holds,
            entity = b.p(P::Entity),
            active = hold_active_at("pg_catalog.statement_timestamp()"),
            rid = e.record_id.name,
        )
    }

    /// ` AND <key> > <lower key>` for batches after the first.
    fn after(&self, b: &mut Params<P>) -> String {
        let (anchor, rid, rid_type) = (
            &self.age().name,
            &self.e.record_id.name,
            &self.e.record_id.sql_type,
        );
        let key = b.p(P::LoKey);
        if self.erasure() {
            format!(" AND t.{rid} > CAST({key}::pg_catalog.text AS {rid_type})")
        } else {
            let lo = b.p(P::LoAnchor);
            format!(
                " AND (t.{anchor}, t.{rid}) > ({lo}::pg_catalog.timestamptz, \
                 CAST({key}::pg_catalog.text AS {rid_type}))"
            )
        }
    }

    /// The batch order. The keyset compares with `>` resolved by name, so the
    /// order is `USING <`, resolved the same way: for a key type whose
    /// operators are off the session's path both fall back alike and batches
    /// stay consistent; for ordinary types it is the index's own order.
    fn order(&self) -> String {
        let (anchor, rid) = (&self.age().name, &self.e.record_id.name);
        if self.erasure() {
            format!("ORDER BY t.{rid} USING <")
        } else {
            format!("ORDER BY t.{anchor}, t.{rid} USING <")
        }
    }

    /// `RETURNING ...` of the mutation: the record id only when it is needed.
    fn returning(&self) -> String {
        if self.strategy == Strategy::Archive {
            // The whole row, for the archive table (`archived`).
            "RETURNING t.*".to_owned()
        } else if self.per_row {
            format!(
                "RETURNING (t.{})::pg_catalog.text AS rid",
                self.e.record_id.name
            )
        } else {
            "RETURNING 1 AS one".to_owned()
        }
    }

    /// The ledger CTEs after mutation CTE `d`, and the final select list's
    /// `affected` (and `ids`).
    fn ledger(&self, b: &mut Params<P>) -> (String, String) {
        let mut ctes = format!(
            ", p AS ({})",
            self.ledger.progress_cte("d", &b.p(P::Summary))
        );
        let mut select = "(SELECT pg_catalog.count(*) FROM d) AS affected".to_owned();
        if self.per_row {
            let payloads = self.capture.then(|| {
                let source = format!(
                    "ROWS FROM (pg_catalog.unnest({}::pg_catalog.text[]), \
                     pg_catalog.unnest({}::pg_catalog.text[])) AS pl(rid, payload)",
                    b.p(P::PayloadRids),
                    b.p(P::Payloads)
                );
                source
            });
            let details = self.ledger.details_cte(
                "d",
                &b.p(P::Run),
                &b.p(P::Entity),
                &b.p(P::EntityType),
                &b.p(P::LedgerTenant),
                &b.p(P::Action),
                payloads.as_deref(),
            );
            let _ = write!(ctes, ", det AS ({details})");
            select.push_str(", ARRAY(SELECT d.rid FROM d) AS ids");
            if self.capture {
                let handlers = format!(
                    "ROWS FROM (pg_catalog.unnest({}::pg_catalog.text[]), \
                     pg_catalog.unnest({}::pg_catalog.int4[]), \
                     pg_catalog.unnest({}::pg_catalog.bool[])) AS hs(id, rank, after)",
                    b.p(P::HandlerIds),
                    b.p(P::HandlerRanks),
                    b.p(P::HandlerAfter)
                );
                let queue = crate::handlers::QueueSql::queue_cte(
                    self.schema,
                    &b.p(P::Run),
                    &b.p(P::Entity),
                    &b.p(P::LedgerTenant),
                    &handlers,
                );
                let _ = write!(ctes, ", work AS ({queue})");
                let _ = write!(
                    select,
                    ", (SELECT pg_catalog.count(*) FROM (SELECT pg_catalog.pg_notify('{channel}', {schema}) \
                        WHERE EXISTS (SELECT 1 FROM d)) AS n) AS notified",
                    channel = crate::handlers::CHANNEL,
                    schema = b.p(P::Schema)
                );
            }
        }
        (ctes, select)
    }

    /// For the archive strategy (contract SL2): the mutation CTE's name
    /// (`d0`, returning whole rows) and the CTEs after it: `d` (each row's
    /// record id, what the ledger's CTEs read), the batch's number, the copy
    /// into the archive table, and the batch's ledger row with the count and
    /// a SHA-256 of the archived rows in their binary form (`record_send`,
    /// independent of the session's time zone and formats), in record id
    /// order. Any other strategy: `d` and nothing.
    fn archived(&self, b: &mut Params<P>) -> (&'static str, String) {
        let (true, Some(archive)) = (self.strategy == Strategy::Archive, &self.e.archive) else {
            return ("d", String::new());
        };
        let rid = &self.e.record_id.name;
        let columns: Vec<String> = archive.columns.iter().map(ToString::to_string).collect();
        let copied: Vec<String> = archive.columns.iter().map(|c| format!("d0.{c}")).collect();
        let batches = self.schema.table("retention_archive_batches");
        let summary = b.p(P::Summary);
        let ctes = format!(
            ", d AS (SELECT (d0.{rid})::pg_catalog.text AS rid FROM d0), \
             n AS MATERIALIZED (SELECT COALESCE(pg_catalog.max(x.batch), 0) OPERATOR(pg_catalog.+) 1 AS batch \
                                FROM {batches} AS x WHERE x.summary_id OPERATOR(pg_catalog.=) {summary}), \
             a AS (INSERT INTO {table} AS a ({columns}, {run_col}, {batch_col}, {at_col}) \
                   SELECT {copied}, {run}, (SELECT n.batch FROM n), pg_catalog.statement_timestamp() \
                   FROM d0 RETURNING a.*), \
             ab AS (INSERT INTO {batches} (run_id, summary_id, retained_entity_id, batch, archive_table, \
                                            row_count, checksum, created_at) \
                    SELECT {run}, {summary}, {entity}, (SELECT n.batch FROM n), {archive_table}, \
                           pg_catalog.count(*), \
                           pg_catalog.sha256(pg_catalog.string_agg(pg_catalog.record_send(a), \
                               '\\x0a'::pg_catalog.bytea ORDER BY a.{rid})), \
                           pg_catalog.statement_timestamp() \
                    FROM a HAVING pg_catalog.count(*) OPERATOR(pg_catalog.>) 0)",
            table = archive.entity.table,
            columns = columns.join(", "),
            copied = copied.join(", "),
            run_col = Ident::known(ARCHIVE_RUN),
            batch_col = Ident::known(ARCHIVE_BATCH),
            at_col = Ident::known(ARCHIVE_AT),
            run = b.p(P::Run),
            entity = b.p(P::Entity),
            archive_table = b.p(P::ArchiveTable),
        );
        ("d0", ctes)
    }

    /// The `SET` list of an UPDATE strategy; custom columns read `v.n{i}`.
    fn set_list(&self, b: &mut Params<P>) -> String {
        let e = self.e;
        let mut sets = Vec::new();
        match self.strategy {
            Strategy::SoftDelete => {
                if let Some(flag) = &e.soft_delete {
                    sets.push(format!("{} = true", flag.name));
                }
                if let Some(at) = &e.deleted_at {
                    sets.push(format!("{} = pg_catalog.statement_timestamp()", at.name));
                }
            }
            Strategy::Anonymise => {
                let mut custom = 0;
                for (i, a) in e.anonymise.iter().enumerate() {
                    let col = &a.column.name;
                    match a.method {
                        AnonymiseMethod::Null => sets.push(format!("{col} = NULL")),
                        AnonymiseMethod::EmptyString => sets.push(format!("{col} = ''")),
                        AnonymiseMethod::Literal(_) => {
                            sets.push(format!("{col} = {}::pg_catalog.text", b.p(P::Literal(i))))
                        }
                        _ if a.computed.is_some() => {
                            sets.push(format!("{col} = v.n{custom}"));
                            custom += 1;
                        }
                        // A method this engine does not know writes nothing.
                        _ => {}
                    }
                }
                if let Some(at) = &e.anonymised_at {
                    sets.push(format!("{} = pg_catalog.statement_timestamp()", at.name));
                }
            }
            Strategy::Purge | Strategy::Exempt | Strategy::Archive => {}
        }
        sets.join(", ")
    }

    fn count(&self) -> Statement<P> {
        let mut b = Params::new();
        let e = self.e;
        let eligible = self.eligible(&mut b);
        let held = self.held_join(&mut b);
        let null_anchor = if self.aged() {
            let mut scope = match &e.tenant {
                Some(t) => format!("t.{} = {}", t.name, b.p(P::Tenant)),
                None => "true".to_owned(),
            };
            if let Purpose::Erasure { subjects, .. } = self.purpose {
                let subject = b.p(P::Subject);
                let any: Vec<String> = subjects
                    .iter()
                    .map(|c| c.equals_text("t", &subject))
                    .collect();
                let _ = write!(scope, " AND ({})", any.join(" OR "));
            }
            scope.push_str(&self.stage_state(&mut b));
            scope.push_str(&self.slice(&mut b));
            // Rows whose event has not happened count as a NULL anchor does
            // (contract SL4): kept, and reported.
            let waiting = if self.by_event() {
                format!("NOT {}", self.event_exists(&mut b, None))
            } else {
                format!("t.{} IS NULL", self.age().name)
            };
            format!(
                "(SELECT pg_catalog.count(*) FROM {table} AS t WHERE {scope} AND {waiting}{pending})",
                table = e.table,
                pending = self.pending()
            )
        } else {
            "0::pg_catalog.int8".to_owned()
        };
        // An erasure's rows the legal minimum still keeps: the subject's
        // rows whose anchor is not yet past it (contract E3).
        let legal_minimum = match self.purpose {
            Purpose::Erasure {
                subjects,
                legal_minimum: true,
            } => {
                let mut scope = match &e.tenant {
                    Some(t) => format!("t.{} = {}", t.name, b.p(P::Tenant)),
                    None => "true".to_owned(),
                };
                let subject = b.p(P::Subject);
                let any: Vec<String> = subjects
                    .iter()
                    .map(|c| c.equals_text("t", &subject))
                    .collect();
                let _ = write!(scope, " AND ({})", any.join(" OR "));
                scope.push_str(&self.slice(&mut b));
                format!(
                    "(SELECT pg_catalog.count(*) FROM {table} AS t WHERE {scope} AND t.{anchor} >= {cutoff}{pending})",
                    table = e.table,
                    anchor = e.anchor.name,
                    cutoff = b.p(P::Cutoff),
                    pending = self.pending()
                )
            }
            _ => "0::pg_catalog.int8".to_owned(),
        };
        // The oldest anchors are finite ones (`-infinity` rows are counted
        // but have no date to show; a client cannot decode infinity).
        // Held rows through one join to the distinct active holds of the
        // type (a hash join), not a correlated EXISTS per row: the count
        // runs at the raw count's speed (docs/performance.md).
        // A row is held when a hold joins it or a matter covers it.
        let matter = self.matter(&mut b);
        let text = format!(
            "SELECT pg_catalog.count(*) FILTER (WHERE NOT x.held) AS eligible, \
                    pg_catalog.count(*) FILTER (WHERE x.held) AS held, \
                    {null_anchor} AS null_anchor, \
                    {legal_minimum} AS legal_minimum, \
                    pg_catalog.min(x.a) FILTER (WHERE NOT x.held \
                        AND pg_catalog.isfinite(x.a)) AS oldest_eligible, \
                    pg_catalog.min(x.a) FILTER (WHERE x.held \
                        AND pg_catalog.isfinite(x.a)) AS oldest_held \
             FROM (SELECT t.{anchor} AS a, (h.record_id IS NOT NULL OR {matter}) AS held \
                   FROM {table} AS t {held} WHERE {eligible}) AS x",
            table = e.table,
            anchor = self.age().name,
        );
        b.finish(text)
    }

    /// The range statement, first batch (`after = false`) or a later one.
    fn range(&self, after: bool, skip_matters: bool) -> Statement<P> {
        let mut b = Params::new();
        let e = self.e;
        let (table, anchor, rid) = (&e.table, &self.age().name, &e.record_id.name);
        let eligible = self.eligible(&mut b);
        let lo = if after {
            self.after(&mut b)
        } else {
            String::new()
        };
        let uncovered = if skip_matters {
            format!(" AND NOT {}", self.matter(&mut b))
        } else {
            String::new()
        };
        let offset = b.p(P::Offset);
        let held = self.held_filtered(&mut b);
        let fresh = self.fresh(&mut b);
        let mutation = match self.strategy {
            Strategy::Purge | Strategy::Exempt | Strategy::Archive => {
                format!("DELETE FROM {table} AS t")
            }
            Strategy::SoftDelete | Strategy::Anonymise => {
                format!("UPDATE {table} AS t SET {}", self.set_list(&mut b))
            }
        };
        let returning = self.returning();
        let (d, archived) = self.archived(&mut b);
        let (ledger, select) = self.ledger(&mut b);
        let ledger = format!("{archived}{ledger}");
        // The upper bound stays a plain index condition: on the last batch
        // there is no upper key, and (infinity, NULL) admits every row below
        // the cutoff (the comparison is decided by the anchor alone).
        // A guard that fails (a hold was written since the filter was
        // read) makes the statement change nothing; the loop reads the
        // holds again and runs the same range.
        let text = format!(
            "WITH g AS MATERIALIZED (SELECT {fresh} AS fresh), \
             hi AS MATERIALIZED ( \
               SELECT t.{anchor} AS a, t.{rid} AS k FROM {table} AS t WHERE {eligible}{lo}{uncovered} \
               AND (SELECT g.fresh FROM g) {order} OFFSET {offset} LIMIT 1), \
             {d} AS ({mutation} WHERE {eligible}{lo} \
               AND (t.{anchor}, t.{rid}) <= (COALESCE((SELECT hi.a FROM hi), 'infinity'::pg_catalog.timestamptz), \
                                              (SELECT hi.k FROM hi)) \
               AND (SELECT g.fresh FROM g) \
               AND NOT {held} {returning}){ledger} \
             SELECT (SELECT g.fresh FROM g) AS fresh, \
                    (SELECT (hi.a)::pg_catalog.timestamptz FROM hi) AS hi_anchor, \
                    (SELECT (hi.k)::pg_catalog.text FROM hi) AS hi_key, {select}",
            order = self.order(),
        );
        b.finish(text)
    }

    /// The range statement in physical order (`run::order`, contract
    /// X18): the batch is the eligible rows after `tid` [`P::LoTid`], up to
    /// the `batch size`-th of them in `ctid` order, looked for only within
    /// the window of pages before [`P::EndTid`] (so the search reads a
    /// bounded number of pages and sorts a bounded number of `tid`s), or up
    /// to the window's end when it holds fewer. Both scans are `tid` range
    /// scans: every page of the table is read by one batch (and re-read
    /// from the buffer cache by its change), as a raw statement reads it
    /// once. Eligibility, the hold check, the guard and the ledger are the
    /// key-range statement's.
    fn pages(&self) -> Statement<P> {
        let mut b = Params::new();
        let e = self.e;
        let table = &e.table;
        let eligible = self.eligible(&mut b);
        let lo = b.p(P::LoTid);
        let end = b.p(P::EndTid);
        let last = b.p(P::LastTid);
        let offset = b.p(P::Offset);
        let held = self.held_filtered(&mut b);
        let fresh = self.fresh(&mut b);
        let mutation = match self.strategy {
            Strategy::Purge | Strategy::Exempt | Strategy::Archive => {
                format!("DELETE FROM {table} AS t")
            }
            Strategy::SoftDelete | Strategy::Anonymise => {
                format!("UPDATE {table} AS t SET {}", self.set_list(&mut b))
            }
        };
        let returning = self.returning();
        let (d, archived) = self.archived(&mut b);
        let (ledger, select) = self.ledger(&mut b);
        let ledger = format!("{archived}{ledger}");
        let text = format!(
            "WITH g AS MATERIALIZED (SELECT {fresh} AS fresh), \
             hi AS MATERIALIZED ( \
               SELECT t.ctid AS c FROM {table} AS t \
               WHERE t.ctid OPERATOR(pg_catalog.>) {lo}::pg_catalog.tid \
                 AND t.ctid OPERATOR(pg_catalog.<) {end}::pg_catalog.tid \
                 AND {eligible} AND (SELECT g.fresh FROM g) \
               ORDER BY t.ctid USING OPERATOR(pg_catalog.<) OFFSET {offset} LIMIT 1), \
             {d} AS ({mutation} \
               WHERE t.ctid OPERATOR(pg_catalog.>) {lo}::pg_catalog.tid \
                 AND t.ctid OPERATOR(pg_catalog.<=) \
                     COALESCE((SELECT hi.c FROM hi), {last}::pg_catalog.tid) \
                 AND {eligible} AND (SELECT g.fresh FROM g) \
                 AND NOT {held} {returning}){ledger} \
             SELECT (SELECT g.fresh FROM g) AS fresh, \
                    (SELECT (hi.c)::pg_catalog.text FROM hi) AS hi_tid, {select}",
        );
        b.finish(text)
    }

    /// `EXPLAIN SELECT 1 FROM t WHERE <eligible>`: the planner's estimate
    /// of the eligible rows is on its first line (`rows=N`).
    fn estimate(&self) -> Statement<P> {
        let mut b = Params::new();
        let eligible = self.eligible(&mut b);
        let text = format!(
            "EXPLAIN SELECT 1 FROM {table} AS t WHERE {eligible}",
            table = self.e.table
        );
        b.finish(text)
    }

    /// How many pages the first anchor-ordered batch's rows lie on, and
    /// how many rows it has (one index scan of a batch).
    fn sample(&self) -> Statement<P> {
        let mut b = Params::new();
        let eligible = self.eligible(&mut b);
        let limit = b.p(P::Limit);
        let text = format!(
            "SELECT pg_catalog.count(DISTINCT pg_catalog.split_part((s.c)::pg_catalog.text, ',', 1)) AS pages, \
                    pg_catalog.count(*) AS n \
             FROM (SELECT t.ctid AS c FROM {table} AS t WHERE {eligible} {order} LIMIT {limit}) AS s",
            table = self.e.table,
            order = self.order(),
        );
        b.finish(text)
    }

    /// The locked path's candidates.
    fn candidates(&self, after: bool) -> Statement<P> {
        let mut b = Params::new();
        let e = self.e;
        let eligible = self.eligible(&mut b);
        // A sweep holds the fence, so its snapshot already shows every hold
        // that can protect a row; an erasure leaves holds to the mutation's
        // re-check (E8), which is then what saves a held row.
        let not_held = if self.erasure() {
            String::new()
        } else {
            format!(" AND NOT {}", self.held(&mut b))
        };
        let lo = if after {
            self.after(&mut b)
        } else {
            String::new()
        };
        let mut select = format!(
            "SELECT t.tableoid AS o, (t.ctid)::pg_catalog.text AS c, \
                    (t.{rid})::pg_catalog.text AS record_id, \
                    (t.{anchor})::pg_catalog.timestamptz AS anchor",
            rid = e.record_id.name,
            anchor = self.age().name
        );
        for (i, a) in self.customs().enumerate() {
            let _ = write!(select, ", (t.{})::pg_catalog.text AS v{i}", a.column.name);
        }
        if self.capture {
            select.push_str(", pg_catalog.to_jsonb(t) AS captured");
        }
        let lock = if self.erasure() {
            "FOR UPDATE OF t"
        } else {
            "FOR UPDATE OF t SKIP LOCKED"
        };
        let text = format!(
            "{select} FROM {table} AS t WHERE {eligible}{not_held}{lo} {order} LIMIT {limit} {lock}",
            table = e.table,
            order = self.order(),
            limit = b.p(P::Limit),
        );
        b.finish(text)
    }

    fn customs(&self) -> impl Iterator<Item = &crate::model::resolved::AnonymisedColumn> {
        let anonymise = self.strategy == Strategy::Anonymise;
        self.e
            .anonymise
            .iter()
            .filter(move |a| anonymise && a.computed.is_some())
    }

    /// The locked path's mutation, by `(tableoid, ctid)`, re-checking
    /// eligibility and holds on a snapshot taken after the rows were locked.
    fn mutate(&self) -> Statement<P> {
        let mut b = Params::new();
        let e = self.e;
        let table = &e.table;
        let mut unnest = vec![
            format!("pg_catalog.unnest({}::pg_catalog.oid[])", b.p(P::Oids)),
            format!(
                "pg_catalog.unnest({}::pg_catalog.text[]::pg_catalog.tid[])",
                b.p(P::Tids)
            ),
        ];
        let mut names = vec!["o".to_owned(), "c".to_owned()];
        for (i, _) in self.customs().enumerate() {
            unnest.push(format!(
                "pg_catalog.unnest({}::pg_catalog.text[])",
                b.p(P::Custom(i))
            ));
            names.push(format!("n{i}"));
        }
        let recheck = format!("{} AND NOT {}", self.eligible(&mut b), self.held(&mut b));
        let found = "t.tableoid = v.o AND t.ctid = v.c";
        let mutation = match self.strategy {
            Strategy::Purge | Strategy::Exempt | Strategy::Archive => {
                format!("DELETE FROM {table} AS t USING v WHERE {found} AND {recheck}")
            }
            Strategy::SoftDelete | Strategy::Anonymise => format!(
                "UPDATE {table} AS t SET {} FROM v WHERE {found} AND {recheck}",
                self.set_list(&mut b)
            ),
        };
        let returning = self.returning();
        let (d, archived) = self.archived(&mut b);
        let (ledger, select) = self.ledger(&mut b);
        let text = format!(
            "WITH v AS (SELECT * FROM ROWS FROM ({unnest}) AS v({names})), \
             {d} AS ({mutation} {returning}){archived}{ledger} SELECT {select}",
            unnest = unnest.join(", "),
            names = names.join(", "),
        );
        b.finish(text)
    }
}

impl EntitySql {
    /// The statements of `purpose` on `e` with `strategy` (not `Exempt`).
    /// The statement of a subject access export (contract SA1): every row
    /// of `e` an erasure of the subject would match (the same tenant and
    /// subject predicate, E9, whatever the row's age or state), in record
    /// id order, with whether a hold or matter covers it. Each row is
    /// `record_id`, `held` and then, for JSON Lines, `row` (the row as a
    /// JSON object, columns in table order) or, for CSV, one row per column
    /// with `ord`, `column_name` and `value` (text).
    pub(crate) fn subject_rows(
        e: &ResolvedEntity,
        schema: &SchemaName,
        ledger: &Ledger,
        subjects: Vec<&Column>,
        per_column: bool,
    ) -> Statement<P> {
        let purpose = Purpose::Erasure {
            subjects,
            legal_minimum: false,
        };
        let parts = Parts {
            e,
            strategy: Strategy::Exempt,
            purpose: &purpose,
            holds: schema.table("retention_holds").to_string(),
            ledger,
            per_row: false,
            schema,
            capture: false,
            stage: None,
            batch: false,
            event: false,
        };
        let mut b = Params::new();
        let eligible = parts.eligible(&mut b);
        let held = parts.held(&mut b);
        let rid = &e.record_id.name;
        let text = if per_column {
            format!(
                "SELECT (t.{rid})::pg_catalog.text AS record_id, {held} AS held, \
                        c.ord, c.key AS column_name, c.value \
                 FROM {table} AS t \
                 CROSS JOIN LATERAL pg_catalog.json_each_text(pg_catalog.row_to_json(t)) \
                      WITH ORDINALITY AS c(key, value, ord) \
                 WHERE {eligible} ORDER BY t.{rid}, c.ord",
                table = e.table,
            )
        } else {
            format!(
                "SELECT (t.{rid})::pg_catalog.text AS record_id, {held} AS held, \
                        pg_catalog.row_to_json(t)::pg_catalog.text AS row \
                 FROM {table} AS t WHERE {eligible} ORDER BY t.{rid}",
                table = e.table,
            )
        };
        b.finish(text)
    }

    #[allow(clippy::too_many_arguments)]
    pub(crate) fn build(
        e: &ResolvedEntity,
        strategy: Strategy,
        schema: &SchemaName,
        ledger: &Ledger,
        purpose: &Purpose<'_>,
        per_row: bool,
        capture: bool,
        stage: Option<StageSql<'_>>,
        event: bool,
    ) -> EntitySql {
        Self::build_in(
            e, strategy, schema, ledger, purpose, per_row, capture, stage, false, event,
        )
    }

    /// [`EntitySql::build`] for a sweep; with `batch`, every statement is
    /// restricted to the rows of the disposition batch [`P::Batch`]
    /// (contract DR2).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn build_in(
        e: &ResolvedEntity,
        strategy: Strategy,
        schema: &SchemaName,
        ledger: &Ledger,
        purpose: &Purpose<'_>,
        per_row: bool,
        capture: bool,
        stage: Option<StageSql<'_>>,
        batch: bool,
        event: bool,
    ) -> EntitySql {
        // Handlers' work refers to the row details: capture implies them.
        let per_row = per_row || capture;
        let parts = Parts {
            e,
            strategy,
            purpose,
            holds: schema.table("retention_holds").to_string(),
            ledger,
            per_row,
            schema,
            capture,
            stage,
            batch,
            event,
        };
        let customs = parts.customs().count();
        let erasure = parts.erasure();
        // The range path needs no row's values: custom anonymisers and
        // handlers' capture take the locked path.
        let ranged = !erasure && customs == 0 && !capture;
        let range = ranged.then(|| [parts.range(false, false), parts.range(true, false)]);
        let range_matters = ranged.then(|| [parts.range(false, true), parts.range(true, true)]);
        let pages = (ranged && !batch).then(|| parts.pages());
        EntitySql {
            count: parts.count(),
            range,
            range_matters,
            pages,
            estimate: parts.estimate(),
            sample: parts.sample(),
            candidates: [parts.candidates(false), parts.candidates(true)],
            mutate: parts.mutate(),
            customs,
            per_row,
            capture,
        }
    }
}

/// Disposition review (contracts DR1, DR2): the batch restriction of a
/// carry-out, and the freeze.
impl Parts<'_> {
    /// ` AND` row `t` is one of the batch's frozen record ids: a per-row
    /// probe of the records' primary key, kept a subplan (`OFFSET 0`), so a
    /// batch's cost follows the batch and not the disposition batch's size.
    fn in_batch(&self, b: &mut Params<P>) -> String {
        format!(
            " AND EXISTS (SELECT 1 FROM {records} AS dr \
               WHERE dr.batch_id = {batch}::pg_catalog.uuid \
                 AND dr.record_id = (t.{rid})::pg_catalog.text OFFSET 0)",
            records = self.schema.table("retention_disposition_records"),
            batch = b.p(P::Batch),
            rid = self.e.record_id.name,
        )
    }

    /// Row `t` is in a batch of the type, tenant and stage that keeps it
    /// from a new freeze: one waiting for or under its decision, or one
    /// rejected or extended under the same rule until after the run's
    /// logical time.
    fn frozen_elsewhere(&self, b: &mut Params<P>) -> String {
        format!(
            "EXISTS (SELECT 1 FROM {records} AS dr \
               JOIN {batches} AS db ON db.batch_id = dr.batch_id \
              WHERE dr.record_id = (t.{rid})::pg_catalog.text \
                AND db.retained_entity_id = {entity} AND db.tenant_id = {tenant} \
                AND db.stage = {stage}::pg_catalog.int4 \
                AND (db.status IN ('Pending', 'Approved', 'CarryingOut') \
                     OR (db.status IN ('Rejected', 'Extended') \
                         AND db.rule_hash = {hash}::pg_catalog.bytea \
                         AND db.keep_until > {now}::pg_catalog.timestamptz)) OFFSET 0)",
            records = self.schema.table("retention_disposition_records"),
            batches = self.schema.table("retention_disposition_batches"),
            rid = self.e.record_id.name,
            entity = b.p(P::Entity),
            tenant = b.p(P::LedgerTenant),
            stage = b.p(P::ReviewStage),
            hash = b.p(P::RuleHash),
            now = b.p(P::LogicalNow),
        )
    }

    /// One keyset batch of a freeze: of the next `batch size` eligible rows
    /// (in the sweep's order), those no open batch holds and no hold or
    /// matter covers go into batch [`P::Batch`] by `INSERT ... SELECT`,
    /// nothing through the client. (The upper key counts every eligible
    /// row: one probe of the batches per row, not two.) Returns `frozen`, `hi_anchor` and `hi_key`
    /// (NULL after the last batch).
    fn freeze(&self, after: bool) -> Statement<P> {
        let mut b = Params::new();
        let e = self.e;
        let (table, anchor, rid) = (&e.table, &self.age().name, &e.record_id.name);
        let eligible = self.eligible(&mut b);
        let lo = if after {
            self.after(&mut b)
        } else {
            String::new()
        };
        let frozen = self.frozen_elsewhere(&mut b);
        let offset = b.p(P::Offset);
        let held = self.held(&mut b);
        let batch = b.p(P::Batch);
        let text = format!(
            "WITH hi AS MATERIALIZED ( \
               SELECT t.{anchor} AS a, t.{rid} AS k FROM {table} AS t \
               WHERE {eligible}{lo} {order} OFFSET {offset} LIMIT 1), \
             ins AS (INSERT INTO {records} (batch_id, record_id) \
               SELECT {batch}::pg_catalog.uuid, (t.{rid})::pg_catalog.text FROM {table} AS t \
               WHERE {eligible}{lo} \
                 AND (t.{anchor}, t.{rid}) <= (COALESCE((SELECT hi.a FROM hi), 'infinity'::pg_catalog.timestamptz), \
                                                (SELECT hi.k FROM hi)) \
                 AND NOT {frozen} AND NOT {held} RETURNING 1) \
             SELECT (SELECT pg_catalog.count(*) FROM ins) AS frozen, \
                    (SELECT (hi.a)::pg_catalog.timestamptz FROM hi) AS hi_anchor, \
                    (SELECT (hi.k)::pg_catalog.text FROM hi) AS hi_key",
            records = self.schema.table("retention_disposition_records"),
            order = self.order(),
        );
        b.finish(text)
    }
}

impl EntitySql {
    /// The freeze of a sweep's rows under review (contract DR1), first
    /// keyset batch and later ones: see `run::review`.
    pub(crate) fn freeze(
        e: &ResolvedEntity,
        strategy: Strategy,
        schema: &SchemaName,
        ledger: &Ledger,
        stage: Option<StageSql<'_>>,
        event: bool,
    ) -> [Statement<P>; 2] {
        let parts = Parts {
            e,
            strategy,
            purpose: &Purpose::Sweep,
            holds: schema.table("retention_holds").to_string(),
            ledger,
            per_row: false,
            schema,
            capture: false,
            stage,
            batch: false,
            event,
        };
        [parts.freeze(false), parts.freeze(true)]
    }
}
