//! Verifying the evidence chain (contract EV1).
//!
//! Every hash is recomputed here: the canonical bytes come from SQL written
//! in this crate (the same encoding the migration's trigger functions use,
//! see `schema::evidence`, but never a call to those functions) and the
//! SHA-256 is computed in Rust. A trigger function replaced by an attacker
//! cannot make a tampered row pass.

use std::collections::{HashMap, HashSet};
use std::fmt;

use futures_util::TryStreamExt;
use sha2::{Digest, Sha256};
use sqlx::{PgConnection, Row};
use uuid::Uuid;

use super::to_hex;
use crate::error::Error;
use crate::schema::SchemaName;
use crate::schema::evidence::{LinkKind, canonical_bytes_sql};
use crate::sql::AssertSqlSafe;

/// Which of Cohort's tables a chain problem is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ChainTable {
    /// `sweep_run`: the install-wide run chain.
    Run,
    /// `sweep_run_entity_summary`: each run's summaries chain.
    Summary,
    /// `sweep_run_row_detail`: each run's row-details chain.
    RowDetail,
    /// `retention_holds`: each retained entity's hold chain.
    Hold,
    /// `retention_matter_events`: the install's chain of matter events
    /// (and `retention_matters`, whose rows must agree with their last event).
    Matter,
    /// `retention_disposition_decisions`: the install's chain of decisions
    /// on disposition batches (and `retention_disposition_batches`, whose
    /// rows must agree with their decisions; contract DR3).
    Disposition,
    /// `retention_event_log`: the install's chain of event recordings and
    /// withdrawals (and `retention_events`, whose rows must agree with their
    /// last link; contract SL4).
    Event,
}

impl ChainTable {
    /// The table's name.
    pub fn table(&self) -> &'static str {
        match self {
            ChainTable::Run => "sweep_run",
            ChainTable::Summary => "sweep_run_entity_summary",
            ChainTable::RowDetail => "sweep_run_row_detail",
            ChainTable::Hold => "retention_holds",
            ChainTable::Matter => "retention_matter_events",
            ChainTable::Disposition => "retention_disposition_decisions",
            ChainTable::Event => "retention_event_log",
        }
    }
}

/// What is wrong with a link.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ProblemKind {
    /// The row's content no longer hashes to its stored link hash: it was
    /// changed after it was chained.
    Changed,
    /// Links `from..=to` of the chain are gone and nothing records why: rows
    /// were deleted. [`ChainProblem::row`] names the row after the gap, or
    /// the run whose sealed chain is short.
    Missing {
        /// The first missing position.
        from: i64,
        /// The last missing position.
        to: i64,
    },
    /// The row does not follow its predecessor (its stored predecessor hash
    /// is not the previous link's hash), or it sits at a position taken
    /// twice: it was inserted, moved or renumbered out of order.
    OutOfOrder,
    /// The row joined its run's chain after the run was sealed at settle
    /// (past the count and head the run's link records).
    InsertedAfterSeal,
    /// The row carries no link at all: it was written with Cohort's
    /// triggers disabled (or its link columns were cleared).
    Unchained,
    /// A hold was deleted while it still protected its row (not a prune).
    DeletedWhileActive,
}

/// One row (or gap) that fails verification.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ChainProblem {
    /// The table.
    pub table: ChainTable,
    /// The row: `run_id` for runs, `summary_id` / `detail_id` for summaries
    /// and details, `hold_id` for holds (`hold_id/removal` for a hold's
    /// removal link), or the run (`run <id>`) whose sealed chain is short.
    pub row: String,
    /// The run whose chain it is in (summaries and details).
    pub run_id: Option<Uuid>,
    /// The retained entity whose chain it is in (holds).
    pub entity_id: Option<Uuid>,
    /// The link's position in its chain, where it has one.
    pub seq: Option<i64>,
    /// What is wrong.
    pub kind: ProblemKind,
}

impl fmt::Display for ChainProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let chain = match (self.table, self.run_id, self.entity_id) {
            (ChainTable::Run, _, _) => "the run chain".to_owned(),
            (_, Some(run), _) => format!("the {} chain of run {run}", self.table.table()),
            (_, _, Some(entity)) => format!("the hold chain of entity {entity}"),
            _ => format!("the {} chain", self.table.table()),
        };
        let at = self.seq.map(|s| format!(" at {s}")).unwrap_or_default();
        match &self.kind {
            ProblemKind::Changed => write!(
                f,
                "{} row {}{at} in {chain} was changed after it was chained",
                self.table.table(),
                self.row
            ),
            ProblemKind::Missing { from, to } => write!(
                f,
                "links {from}..={to} of {chain} were deleted (before {})",
                self.row
            ),
            ProblemKind::OutOfOrder => write!(
                f,
                "{} row {}{at} in {chain} was inserted or moved out of order",
                self.table.table(),
                self.row
            ),
            ProblemKind::InsertedAfterSeal => write!(
                f,
                "{} row {}{at} joined {chain} after the run was sealed",
                self.table.table(),
                self.row
            ),
            ProblemKind::Unchained => write!(
                f,
                "{} row {} carries no chain link (written with Cohort's triggers off)",
                self.table.table(),
                self.row
            ),
            ProblemKind::DeletedWhileActive => write!(
                f,
                "{} {}{at} in {chain} was deleted while it was active",
                match self.table {
                    ChainTable::Matter => "matter",
                    ChainTable::Disposition => "disposition batch",
                    ChainTable::Event => "event",
                    _ => "hold",
                },
                self.row
            ),
        }
    }
}

/// A position of a chain: its sequence number and hash.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ChainHead {
    /// The link's position (1 for the first link).
    pub seq: i64,
    /// The link's SHA-256, lower-case hex.
    pub hash: String,
}

/// A hold link that left the table through a prune: the hold had stopped
/// protecting (expired or removed) before it was deleted.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct PrunedLink {
    /// The retained entity whose hold chain it was in.
    pub entity_id: Uuid,
    /// Its position.
    pub seq: i64,
    /// The deleted hold.
    pub hold_id: String,
}

/// What [`verify`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct VerifyReport {
    /// The schema verified.
    pub schema: SchemaName,
    /// Sealed runs checked.
    pub runs: u64,
    /// Runs still `Started` (not sealed yet; their row details are checked).
    pub runs_in_progress: u64,
    /// Summaries checked.
    pub summaries: u64,
    /// Row details checked.
    pub details: u64,
    /// Hold links (creations and removals) checked.
    pub hold_links: u64,
    /// Superseded removal links (a removal brought forward) accounted for.
    pub superseded: u64,
    /// Matter events (creations, changes, releases) checked.
    pub matter_links: u64,
    /// Decisions on disposition batches checked (contract DR3).
    pub disposition_links: u64,
    /// Event links (recordings and withdrawals; contract SL4) checked.
    pub event_links: u64,
    /// The run chain's head: the install's chain head.
    pub head: Option<ChainHead>,
    /// Every row or gap that fails. Empty when the chain is intact.
    pub problems: Vec<ChainProblem>,
    /// Hold links that were pruned (not a problem).
    pub pruned: Vec<PrunedLink>,
    /// Whether captured payloads still in row details were checked against
    /// their digests. False when the verifying role may not read
    /// `captured_payload` (the auditor role of docs/security.md): the links,
    /// which cover each digest, are checked all the same.
    pub payloads_checked: bool,
}

impl VerifyReport {
    /// True when nothing failed (pruned links do not count).
    pub fn is_intact(&self) -> bool {
        self.problems.is_empty()
    }
}

impl fmt::Display for VerifyReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let verdict = if self.is_intact() {
            "intact".to_owned()
        } else {
            format!("{} problem(s)", self.problems.len())
        };
        writeln!(
            f,
            "evidence chain of schema {:?}: {verdict} ({} runs sealed, {} in progress, {} summaries, \
             {} row details, {} hold links, {} matter links, {} disposition decisions, {} event links, \
             {} pruned)",
            self.schema.as_str(),
            self.runs,
            self.runs_in_progress,
            self.summaries,
            self.details,
            self.hold_links,
            self.matter_links,
            self.disposition_links,
            self.event_links,
            self.pruned.len()
        )?;
        if let Some(head) = &self.head {
            writeln!(f, "  head: {} {}", head.seq, head.hash)?;
        }
        for p in &self.problems {
            writeln!(f, "  - {p}")?;
        }
        Ok(())
    }
}

/// What a sealed run's link records about its two chains.
#[derive(Debug, Clone)]
struct Seal {
    summaries: i64,
    summaries_head: Option<Vec<u8>>,
    details: i64,
    details_head: Option<Vec<u8>>,
}

fn sha256(bytes: &[u8]) -> Vec<u8> {
    Sha256::digest(bytes).to_vec()
}

/// Verifies the evidence chain of the install in `schema` and returns what
/// it found; an intact chain has no [`VerifyReport::problems`].
///
/// It reads every run, summary, row detail and hold once, streaming (memory
/// grows with the number of runs and holds, not with row details), in one
/// `REPEATABLE READ READ ONLY` transaction of its own (or, when `conn` is
/// in a transaction, under a savepoint of the caller's), so it sees one
/// consistent state while sweeps go on.
///
/// The chain proves that the rows are those that were chained, in that
/// order, up to the head it reports. Keep the head (or certificates, which
/// carry the head at their run's settle) outside the database: a writer able
/// to rewrite every later link could otherwise forge a consistent chain.
///
/// ```no_run
/// # async fn demo(pool: sqlx::PgPool) -> Result<(), cohort::Error> {
/// let mut conn = pool.acquire().await?;
/// let schema = cohort::schema::SchemaName::public();
/// let report = cohort::evidence::verify(&mut conn, &schema).await?;
/// assert!(report.is_intact(), "{report}");
/// # Ok(()) }
/// ```
pub async fn verify(conn: &mut PgConnection, schema: &SchemaName) -> Result<VerifyReport, Error> {
    super::ensure_ready(conn, schema).await?;
    let mut tx = super::snapshot(conn).await?;
    let mut report = VerifyReport {
        schema: schema.clone(),
        runs: 0,
        runs_in_progress: 0,
        summaries: 0,
        details: 0,
        hold_links: 0,
        superseded: 0,
        matter_links: 0,
        disposition_links: 0,
        event_links: 0,
        head: None,
        problems: Vec::new(),
        pruned: Vec::new(),
        payloads_checked: false,
    };
    report.payloads_checked = crate::sql::query_scalar(
        "SELECT pg_catalog.has_column_privilege($1::pg_catalog.text::pg_catalog.regclass, \
                'captured_payload', 'SELECT')",
    )
    .bind(schema.table("sweep_run_row_detail").to_string())
    .fetch_one(&mut *tx)
    .await?;
    let seals = verify_runs(&mut tx, schema, &mut report).await?;
    verify_run_chains(&mut tx, schema, &seals, ChainTable::Summary, &mut report).await?;
    verify_run_chains(&mut tx, schema, &seals, ChainTable::RowDetail, &mut report).await?;
    verify_holds(&mut tx, schema, &mut report).await?;
    verify_matters(&mut tx, schema, &mut report).await?;
    verify_dispositions(&mut tx, schema, &mut report).await?;
    verify_events(&mut tx, schema, &mut report).await?;
    tx.commit().await?;
    Ok(report)
}

/// The run chain. Returns each run's seal (`None` for runs in progress).
async fn verify_runs(
    conn: &mut PgConnection,
    schema: &SchemaName,
    report: &mut VerifyReport,
) -> Result<HashMap<Uuid, Option<Seal>>, Error> {
    let canon = canonical_bytes_sql(LinkKind::Run, &|c| format!("r.{c}"));
    let sql = format!(
        "SELECT r.run_id, r.status, r.chain_seq, r.chain_prev, r.chain_hash, \
                r.chain_summaries, r.chain_summaries_head, r.chain_details, r.chain_details_head, \
                {canon} AS canon \
         FROM {runs} AS r ORDER BY r.chain_seq NULLS LAST, r.started_at, r.run_id",
        runs = schema.table("sweep_run")
    );
    let mut seals = HashMap::new();
    let mut walk = Walk::new();
    let mut rows = crate::sql::query(AssertSqlSafe(sql)).fetch(&mut *conn);
    while let Some(row) = rows.try_next().await? {
        let run_id: Uuid = row.try_get("run_id")?;
        let status: String = row.try_get("status")?;
        let seq: Option<i64> = row.try_get("chain_seq")?;
        let problem = |kind: ProblemKind, seq: Option<i64>| ChainProblem {
            table: ChainTable::Run,
            row: run_id.to_string(),
            run_id: None,
            entity_id: None,
            seq,
            kind,
        };
        let Some(seq) = seq else {
            if status == "Started" {
                report.runs_in_progress += 1;
                seals.insert(run_id, None);
            } else {
                report.problems.push(problem(ProblemKind::Unchained, None));
            }
            continue;
        };
        report.runs += 1;
        let link = Link {
            seq,
            prev: row.try_get("chain_prev")?,
            hash: row.try_get("chain_hash")?,
            canon: row.try_get("canon")?,
        };
        for (kind, at) in walk.step(&link, &mut |_| None) {
            report.problems.push(problem(kind, at));
        }
        seals.insert(
            run_id,
            Some(Seal {
                summaries: row
                    .try_get::<Option<i64>, _>("chain_summaries")?
                    .unwrap_or(0),
                summaries_head: row.try_get("chain_summaries_head")?,
                details: row.try_get::<Option<i64>, _>("chain_details")?.unwrap_or(0),
                details_head: row.try_get("chain_details_head")?,
            }),
        );
        report.head = Some(ChainHead {
            seq,
            hash: to_hex(link.hash.as_deref().unwrap_or_default()),
        });
    }
    Ok(seals)
}

/// One link as read.
struct Link {
    seq: i64,
    prev: Option<Vec<u8>>,
    hash: Option<Vec<u8>>,
    canon: Vec<u8>,
}

/// A bridge: a link no longer in its table, recorded by the trigger.
#[derive(Debug, Clone)]
struct Bridge {
    prev: Option<Vec<u8>>,
    hash: Option<Vec<u8>>,
    why: String,
    hold_id: String,
    /// Microseconds since the epoch the hold stopped protecting.
    inactive_since: Option<i128>,
    /// Microseconds since the epoch it was deleted.
    at: Option<i128>,
}

/// Walking one chain in position order.
struct Walk {
    expected: i64,
    /// The previous link's hash; `None` at the start, and unknown after a
    /// gap (then the next link's predecessor cannot be checked).
    prev: Option<Option<Vec<u8>>>,
}

impl Walk {
    fn new() -> Walk {
        Walk {
            expected: 1,
            prev: Some(None),
        }
    }

    /// Checks `link`; `bridge` answers for positions missing from the
    /// table (holds only). Returns the problems, each with its position.
    fn step(
        &mut self,
        link: &Link,
        bridge: &mut dyn FnMut(i64) -> Option<Bridge>,
    ) -> Vec<(ProblemKind, Option<i64>)> {
        let mut problems = Vec::new();
        if link.seq < self.expected {
            // A position taken twice (or going backwards).
            problems.push((ProblemKind::OutOfOrder, Some(link.seq)));
        } else {
            let mut gap_start: Option<i64> = None;
            while self.expected < link.seq {
                match bridge(self.expected) {
                    Some(b) => {
                        if let Some(start) = gap_start.take() {
                            problems.push((
                                ProblemKind::Missing {
                                    from: start,
                                    to: self.expected - 1,
                                },
                                Some(link.seq),
                            ));
                        }
                        if let Some(prev) = &self.prev
                            && *prev != b.prev
                        {
                            problems.push((ProblemKind::OutOfOrder, Some(self.expected)));
                        }
                        self.prev = Some(b.hash);
                    }
                    None => {
                        gap_start.get_or_insert(self.expected);
                        self.prev = None;
                    }
                }
                self.expected += 1;
            }
            if let Some(start) = gap_start {
                problems.push((
                    ProblemKind::Missing {
                        from: start,
                        to: link.seq - 1,
                    },
                    Some(link.seq),
                ));
            }
            if let Some(prev) = &self.prev
                && *prev != link.prev
            {
                problems.push((ProblemKind::OutOfOrder, Some(link.seq)));
            }
        }
        if link.hash.as_deref() != Some(sha256(&link.canon).as_slice()) {
            problems.push((ProblemKind::Changed, Some(link.seq)));
        }
        // Go on from the stored hash, so one changed row is named once and
        // does not fail every link after it.
        self.prev = Some(link.hash.clone());
        self.expected = self.expected.max(link.seq + 1);
        problems
    }
}

/// The summaries or row-details chains of every run, compared with the
/// runs' seals.
async fn verify_run_chains(
    conn: &mut PgConnection,
    schema: &SchemaName,
    seals: &HashMap<Uuid, Option<Seal>>,
    table: ChainTable,
    report: &mut VerifyReport,
) -> Result<(), Error> {
    let (kind, id, payload) = match table {
        ChainTable::Summary => (
            LinkKind::Summary,
            "summary_id",
            "NULL::pg_catalog.bytea AS payload, NULL::pg_catalog.bytea AS chain_payload",
        ),
        _ if !report.payloads_checked => (
            LinkKind::Detail,
            "detail_id",
            "NULL::pg_catalog.bytea AS payload, x.chain_payload",
        ),
        _ => (
            LinkKind::Detail,
            "detail_id",
            // The payload is not in the link (the handler queue scrubs it):
            // its digest is, and a payload still there must match it.
            "pg_catalog.convert_to((x.captured_payload)::pg_catalog.text, 'UTF8') AS payload, \
             x.chain_payload",
        ),
    };
    let canon = canonical_bytes_sql(kind, &|c| format!("x.{c}"));
    let sql = format!(
        "SELECT x.{id} AS id, x.run_id, x.chain_seq, x.chain_prev, x.chain_hash, {payload}, \
                {canon} AS canon \
         FROM {t} AS x ORDER BY x.run_id, x.chain_seq NULLS LAST, x.{id}",
        t = schema.table(table.table())
    );
    let mut visited: HashSet<Uuid> = HashSet::new();
    let mut current: Option<(Uuid, Walk)> = None;
    let mut rows = crate::sql::query(AssertSqlSafe(sql)).fetch(&mut *conn);
    while let Some(row) = rows.try_next().await? {
        let row_id: i64 = row.try_get("id")?;
        let run_id: Uuid = row.try_get("run_id")?;
        let seq: Option<i64> = row.try_get("chain_seq")?;
        match table {
            ChainTable::Summary => report.summaries += 1,
            _ => report.details += 1,
        }
        if current.as_ref().map(|(r, _)| *r) != Some(run_id) {
            if let Some((done, walk)) = current.take() {
                finish_run(done, &walk, seals, table, report);
            }
            visited.insert(run_id);
            current = Some((run_id, Walk::new()));
        }
        let problem = |kind: ProblemKind, seq: Option<i64>| ChainProblem {
            table,
            row: row_id.to_string(),
            run_id: Some(run_id),
            entity_id: None,
            seq,
            kind,
        };
        let seal = seals.get(&run_id).cloned().flatten();
        let Some(seq) = seq else {
            // A summary of a run in progress is sealed when the run settles.
            let in_progress = matches!(seals.get(&run_id), Some(None));
            if !(table == ChainTable::Summary && in_progress) {
                let kind = if seal.is_some() {
                    ProblemKind::InsertedAfterSeal
                } else {
                    ProblemKind::Unchained
                };
                report.problems.push(problem(kind, None));
            }
            continue;
        };
        let link = Link {
            seq,
            prev: row.try_get("chain_prev")?,
            hash: row.try_get("chain_hash")?,
            canon: row.try_get("canon")?,
        };
        let Some((_, walk)) = current.as_mut() else {
            continue;
        };
        let mut found = walk.step(&link, &mut |_| None);
        let payload: Option<Vec<u8>> = row.try_get("payload")?;
        if let Some(payload) = payload {
            let digest: Option<Vec<u8>> = row.try_get("chain_payload")?;
            let changed = found.iter().any(|(k, _)| *k == ProblemKind::Changed);
            if digest.as_deref() != Some(sha256(&payload).as_slice()) && !changed {
                found.push((ProblemKind::Changed, Some(seq)));
            }
        }
        for (kind, at) in found {
            report.problems.push(problem(kind, at));
        }
        if let Some(seal) = &seal {
            let sealed = match table {
                ChainTable::Summary => seal.summaries,
                _ => seal.details,
            };
            if seq > sealed {
                report
                    .problems
                    .push(problem(ProblemKind::InsertedAfterSeal, Some(seq)));
            } else if seq == sealed {
                let head = match table {
                    ChainTable::Summary => &seal.summaries_head,
                    _ => &seal.details_head,
                };
                if *head != link.hash {
                    report
                        .problems
                        .push(problem(ProblemKind::OutOfOrder, Some(seq)));
                }
            }
        }
    }
    drop(rows);
    if let Some((done, walk)) = current.take() {
        finish_run(done, &walk, seals, table, report);
    }
    // Sealed runs whose chain is not there at all.
    for (run_id, seal) in seals {
        let Some(seal) = seal else { continue };
        let sealed = match table {
            ChainTable::Summary => seal.summaries,
            _ => seal.details,
        };
        if sealed > 0 && !visited.contains(run_id) {
            report.problems.push(ChainProblem {
                table,
                row: format!("run {run_id}"),
                run_id: Some(*run_id),
                entity_id: None,
                seq: None,
                kind: ProblemKind::Missing {
                    from: 1,
                    to: sealed,
                },
            });
        }
    }
    Ok(())
}

/// A sealed run's chain must reach the length its seal records.
fn finish_run(
    run_id: Uuid,
    walk: &Walk,
    seals: &HashMap<Uuid, Option<Seal>>,
    table: ChainTable,
    report: &mut VerifyReport,
) {
    let Some(Some(seal)) = seals.get(&run_id) else {
        return;
    };
    let sealed = match table {
        ChainTable::Summary => seal.summaries,
        _ => seal.details,
    };
    let reached = walk.expected - 1;
    if reached < sealed {
        report.problems.push(ChainProblem {
            table,
            row: format!("run {run_id}"),
            run_id: Some(run_id),
            entity_id: None,
            seq: None,
            kind: ProblemKind::Missing {
                from: reached + 1,
                to: sealed,
            },
        });
    }
}

fn micros(v: Option<&serde_json::Value>) -> Option<i128> {
    v.and_then(|v| v.as_str()).and_then(|s| s.parse().ok())
}

fn hex_field(v: Option<&serde_json::Value>) -> Option<Vec<u8>> {
    v.and_then(|v| v.as_str()).and_then(|s| hex::decode(s).ok())
}

/// The hold chains, one per retained entity, with their bridges.
async fn verify_holds(
    conn: &mut PgConnection,
    schema: &SchemaName,
    report: &mut VerifyReport,
) -> Result<(), Error> {
    let holds = schema.table("retention_holds");
    // The bridges first: superseded removals and deleted holds' links.
    let mut bridges: HashMap<(Uuid, i64), Bridge> = HashMap::new();
    let sql = format!(
        "SELECT h.retained_entity_id AS entity, b.value AS bridge \
         FROM {holds} AS h CROSS JOIN LATERAL pg_catalog.jsonb_array_elements(h.chain_bridges) AS b(value)"
    );
    let mut rows = crate::sql::query(AssertSqlSafe(sql)).fetch(&mut *conn);
    while let Some(row) = rows.try_next().await? {
        let entity: Uuid = row.try_get("entity")?;
        let b: serde_json::Value = row.try_get("bridge")?;
        let Some(seq) = b.get("seq").and_then(|s| s.as_i64()) else {
            continue;
        };
        bridges.insert(
            (entity, seq),
            Bridge {
                prev: hex_field(b.get("prev")),
                hash: hex_field(b.get("hash")),
                why: b
                    .get("why")
                    .and_then(|w| w.as_str())
                    .unwrap_or_default()
                    .to_owned(),
                hold_id: b
                    .get("hold_id")
                    .and_then(|w| w.as_str())
                    .unwrap_or_default()
                    .to_owned(),
                inactive_since: micros(b.get("inactive_since")),
                at: micros(b.get("at")),
            },
        );
    }
    drop(rows);

    let created = canonical_bytes_sql(LinkKind::HoldCreated, &|c| format!("h.{c}"));
    let removal = canonical_bytes_sql(LinkKind::HoldRemoval, &|c| format!("h.{c}"));
    let sql = format!(
        "SELECT * FROM ( \
           SELECT h.retained_entity_id AS entity, h.chain_seq AS seq, h.chain_prev AS prev, \
                  h.chain_hash AS hash, h.hold_id, false AS removal, {created} AS canon \
           FROM {holds} AS h \
           UNION ALL \
           SELECT h.retained_entity_id, h.removal_seq, h.removal_prev, h.removal_hash, h.hold_id, \
                  true, {removal} \
           FROM {holds} AS h WHERE h.removal_seq IS NOT NULL OR h.removed_at IS NOT NULL \
         ) AS l ORDER BY l.entity, l.seq NULLS LAST, l.hold_id, l.removal"
    );
    let mut current: Option<(Uuid, Walk)> = None;
    let mut rows = crate::sql::query(AssertSqlSafe(sql)).fetch(&mut *conn);
    while let Some(row) = rows.try_next().await? {
        let entity: Uuid = row.try_get("entity")?;
        let hold_id: Uuid = row.try_get("hold_id")?;
        let is_removal: bool = row.try_get("removal")?;
        let seq: Option<i64> = row.try_get("seq")?;
        report.hold_links += 1;
        if current.as_ref().map(|(e, _)| *e) != Some(entity) {
            if let Some((done, mut walk)) = current.take() {
                finish_entity(done, &mut walk, &bridges, report);
            }
            current = Some((entity, Walk::new()));
        }
        let name = if is_removal {
            format!("{hold_id}/removal")
        } else {
            hold_id.to_string()
        };
        let Some(seq) = seq else {
            report.problems.push(ChainProblem {
                table: ChainTable::Hold,
                row: name,
                run_id: None,
                entity_id: Some(entity),
                seq: None,
                kind: ProblemKind::Unchained,
            });
            continue;
        };
        let link = Link {
            seq,
            prev: row.try_get("prev")?,
            hash: row.try_get("hash")?,
            canon: row.try_get("canon")?,
        };
        let Some((_, walk)) = current.as_mut() else {
            continue;
        };
        let found = walk.step(&link, &mut |s| judge_bridge(entity, s, &bridges, report));
        for (kind, at) in found {
            report.problems.push(ChainProblem {
                table: ChainTable::Hold,
                row: name.clone(),
                run_id: None,
                entity_id: Some(entity),
                seq: at,
                kind,
            });
        }
    }
    drop(rows);
    if let Some((done, mut walk)) = current.take() {
        finish_entity(done, &mut walk, &bridges, report);
    }
    Ok(())
}

/// The install's chain of matter events, and every matter against its
/// last event: a matter row changed without an event (the trigger off, or
/// a rewrite) is named as changed, one with no event as unchained, and an
/// event whose matter row is gone while it still protected as deleted.
async fn verify_matters(
    conn: &mut PgConnection,
    schema: &SchemaName,
    report: &mut VerifyReport,
) -> Result<(), Error> {
    let events = schema.table("retention_matter_events");
    let matters = schema.table("retention_matters");
    let canon = canonical_bytes_sql(LinkKind::Matter, &|c| format!("e.{c}"));
    let sql = format!(
        "SELECT e.chain_seq AS seq, e.chain_prev AS prev, e.chain_hash AS hash, e.matter_id, \
                {canon} AS canon \
         FROM {events} AS e ORDER BY e.chain_seq"
    );
    let mut walk = Walk::new();
    let mut rows = crate::sql::query(AssertSqlSafe(sql)).fetch(&mut *conn);
    while let Some(row) = rows.try_next().await? {
        report.matter_links += 1;
        let matter: Uuid = row.try_get("matter_id")?;
        let link = Link {
            seq: row.try_get("seq")?,
            prev: row.try_get("prev")?,
            hash: row.try_get("hash")?,
            canon: row.try_get("canon")?,
        };
        for (kind, at) in walk.step(&link, &mut |_| None) {
            report.problems.push(ChainProblem {
                table: ChainTable::Matter,
                row: matter.to_string(),
                run_id: None,
                entity_id: None,
                seq: at,
                kind,
            });
        }
    }
    drop(rows);
    // Each matter as stored against its last event; and last events whose
    // matter is gone.
    let same = [
        "tenant_id",
        "scope_kind",
        "subject",
        "retained_entity_id",
        "anchor_from",
        "anchor_to",
        "reason",
        "owner",
        "created_at",
        "expires_at",
        "released_at",
    ]
    .iter()
    .map(|c| format!("m.{c} IS NOT DISTINCT FROM e.{c}"))
    .collect::<Vec<_>>()
    .join(" AND ");
    let sql = format!(
        "SELECT COALESCE(m.matter_id, e.matter_id) AS matter_id, e.chain_seq AS seq, \
                m.matter_id IS NOT NULL AS stored, \
                (e.matter_id IS NOT NULL AND {same} \
                 AND pg_catalog.array_to_string(m.entity_ids, ',') IS NOT DISTINCT FROM e.entity_ids) AS agrees, \
                (e.event = 'Released' OR (e.expires_at IS NOT NULL \
                 AND e.expires_at <= pg_catalog.statement_timestamp())) AS over \
         FROM {matters} AS m \
         FULL JOIN (SELECT DISTINCT ON (x.matter_id) x.* FROM {events} AS x \
                    ORDER BY x.matter_id, x.chain_seq DESC) AS e ON e.matter_id = m.matter_id \
         ORDER BY 1"
    );
    let rows = crate::sql::query(AssertSqlSafe(sql))
        .fetch_all(&mut *conn)
        .await?;
    for row in rows {
        let matter: Uuid = row.try_get("matter_id")?;
        let seq: Option<i64> = row.try_get("seq")?;
        let stored: bool = row.try_get("stored")?;
        let agrees: Option<bool> = row.try_get("agrees")?;
        let over: Option<bool> = row.try_get("over")?;
        let kind = match (stored, seq) {
            (true, None) => Some(ProblemKind::Unchained),
            (true, Some(_)) if agrees != Some(true) => Some(ProblemKind::Changed),
            (false, Some(_)) if over != Some(true) => Some(ProblemKind::DeletedWhileActive),
            _ => None,
        };
        if let Some(kind) = kind {
            report.problems.push(ChainProblem {
                table: ChainTable::Matter,
                row: matter.to_string(),
                run_id: None,
                entity_id: None,
                seq,
                kind,
            });
        }
    }
    Ok(())
}

/// The install's chain of disposition decisions (contract DR3), and every
/// batch against its decisions: its identity (type, tenant, stage, rule
/// hash, rows, approvers required) must be its `Frozen` decision's, and its
/// state what its last decision left it in (an approved or carried-out
/// batch needs the approvals the chain records; a rejected or extended one
/// the decision's date; a carried-out one the decision's counts). A batch
/// changed behind Cohort's back is named as changed, one without a `Frozen`
/// decision as unchained, and one deleted before it was carried out or
/// voided as deleted while active.
async fn verify_dispositions(
    conn: &mut PgConnection,
    schema: &SchemaName,
    report: &mut VerifyReport,
) -> Result<(), Error> {
    let decisions = schema.table("retention_disposition_decisions");
    let batches = schema.table("retention_disposition_batches");
    let canon = canonical_bytes_sql(LinkKind::Disposition, &|c| format!("d.{c}"));
    let sql = format!(
        "SELECT d.chain_seq AS seq, d.chain_prev AS prev, d.chain_hash AS hash, d.batch_id, \
                {canon} AS canon \
         FROM {decisions} AS d ORDER BY d.chain_seq"
    );
    let mut walk = Walk::new();
    let mut rows = crate::sql::query(AssertSqlSafe(sql)).fetch(&mut *conn);
    while let Some(row) = rows.try_next().await? {
        report.disposition_links += 1;
        let batch: Uuid = row.try_get("batch_id")?;
        let link = Link {
            seq: row.try_get("seq")?,
            prev: row.try_get("prev")?,
            hash: row.try_get("hash")?,
            canon: row.try_get("canon")?,
        };
        for (kind, at) in walk.step(&link, &mut |_| None) {
            report.problems.push(ChainProblem {
                table: ChainTable::Disposition,
                row: batch.to_string(),
                run_id: None,
                entity_id: None,
                seq: at,
                kind,
            });
        }
    }
    drop(rows);
    let frozen_same = [
        "retained_entity_id",
        "tenant_id",
        "stage",
        "rule_hash",
        "row_count",
        "approvers_required",
    ]
    .iter()
    .map(|c| format!("b.{c} IS NOT DISTINCT FROM f.{c}"))
    .collect::<Vec<_>>()
    .join(" AND ");
    let last_same = [
        "changed_count",
        "held_count",
        "left_count",
        "ineligible_count",
    ]
    .iter()
    .map(|c| format!("b.{c} IS NOT DISTINCT FROM l.{c}"))
    .collect::<Vec<_>>()
    .join(" AND ");
    let sql = format!(
        "SELECT COALESCE(b.batch_id, f.batch_id) AS batch_id, b.batch_id IS NOT NULL AS stored, \
                f.chain_seq AS frozen_seq, (f.batch_id IS NOT NULL AND {frozen_same}) AS frozen_agrees, \
                b.status, b.approvers_required, l.decision AS last, l.chain_seq AS last_seq, \
                b.keep_until IS NOT DISTINCT FROM l.keep_until AS keep_agrees, \
                ({last_same}) AS counts_agree, \
                ARRAY(SELECT a.decided_by FROM {decisions} AS a \
                      WHERE a.batch_id = COALESCE(b.batch_id, f.batch_id) AND a.decision = 'Approved' \
                      ORDER BY a.chain_seq) AS approvers, \
                ARRAY(SELECT a.automatic FROM {decisions} AS a \
                      WHERE a.batch_id = COALESCE(b.batch_id, f.batch_id) AND a.decision = 'Approved' \
                      ORDER BY a.chain_seq) AS automatic \
         FROM {batches} AS b \
         FULL JOIN (SELECT x.* FROM {decisions} AS x WHERE x.decision = 'Frozen') AS f \
                ON f.batch_id = b.batch_id \
         LEFT JOIN LATERAL (SELECT y.* FROM {decisions} AS y \
                             WHERE y.batch_id = COALESCE(b.batch_id, f.batch_id) \
                             ORDER BY y.chain_seq DESC LIMIT 1) AS l ON true \
         ORDER BY 1"
    );
    let mut rows = crate::sql::query(AssertSqlSafe(sql)).fetch(&mut *conn);
    while let Some(row) = rows.try_next().await? {
        let batch: Uuid = row.try_get("batch_id")?;
        let stored: bool = row.try_get("stored")?;
        let frozen_seq: Option<i64> = row.try_get("frozen_seq")?;
        let last: Option<String> = row.try_get("last")?;
        let last_seq: Option<i64> = row.try_get("last_seq")?;
        let kind = if !stored {
            match last.as_deref() {
                Some("CarriedOut" | "Voided") => None,
                _ => Some(ProblemKind::DeletedWhileActive),
            }
        } else if frozen_seq.is_none() {
            Some(ProblemKind::Unchained)
        } else {
            let frozen_agrees: Option<bool> = row.try_get("frozen_agrees")?;
            let status: Option<String> = row.try_get("status")?;
            let required: Option<i32> = row.try_get("approvers_required")?;
            let keep_agrees: bool = row.try_get("keep_agrees")?;
            let counts_agree: Option<bool> = row.try_get("counts_agree")?;
            let approvers: Vec<String> = row.try_get("approvers")?;
            let automatic: Vec<bool> = row.try_get("automatic")?;
            let approvals: Vec<(String, bool)> = approvers.into_iter().zip(automatic).collect();
            let approved = crate::policy::review::approved(&approvals, required.unwrap_or(1));
            let consistent = match (last.as_deref(), status.as_deref()) {
                (Some("Frozen"), Some("Pending")) => true,
                (Some("Approved"), Some("Pending")) => !approved,
                (Some("Approved"), Some("Approved" | "CarryingOut")) => approved,
                (Some("Rejected"), Some("Rejected")) | (Some("Extended"), Some("Extended")) => {
                    keep_agrees
                }
                (Some("Voided"), Some("Voided")) => true,
                (Some("CarriedOut"), Some("CarriedOut")) => approved && counts_agree == Some(true),
                _ => false,
            };
            (frozen_agrees != Some(true) || !consistent).then_some(ProblemKind::Changed)
        };
        if let Some(kind) = kind {
            report.problems.push(ChainProblem {
                table: ChainTable::Disposition,
                row: batch.to_string(),
                run_id: None,
                entity_id: None,
                seq: last_seq,
                kind,
            });
        }
    }
    Ok(())
}

/// The install's chain of event links (contract SL4), and every event
/// against its last link: an event changed without a link is named as
/// changed, one with no link as unchained, and a link whose event is gone
/// as deleted (events are never deleted).
async fn verify_events(
    conn: &mut PgConnection,
    schema: &SchemaName,
    report: &mut VerifyReport,
) -> Result<(), Error> {
    let log = schema.table("retention_event_log");
    let events = schema.table("retention_events");
    let canon = canonical_bytes_sql(LinkKind::Event, &|c| format!("e.{c}"));
    let sql = format!(
        "SELECT e.chain_seq AS seq, e.chain_prev AS prev, e.chain_hash AS hash, e.event_id, \
                {canon} AS canon \
         FROM {log} AS e ORDER BY e.chain_seq"
    );
    let mut walk = Walk::new();
    let mut rows = crate::sql::query(AssertSqlSafe(sql)).fetch(&mut *conn);
    while let Some(row) = rows.try_next().await? {
        report.event_links += 1;
        let event: Uuid = row.try_get("event_id")?;
        let link = Link {
            seq: row.try_get("seq")?,
            prev: row.try_get("prev")?,
            hash: row.try_get("hash")?,
            canon: row.try_get("canon")?,
        };
        for (kind, at) in walk.step(&link, &mut |_| None) {
            report.problems.push(ChainProblem {
                table: ChainTable::Event,
                row: event.to_string(),
                run_id: None,
                entity_id: None,
                seq: at,
                kind,
            });
        }
    }
    drop(rows);
    let same = [
        "event_type",
        "subject_key",
        "tenant_id",
        "occurred_at",
        "recorded_by",
        "recorded_at",
        "withdrawn_at",
        "withdrawn_by",
        "withdrawn_reason",
    ]
    .iter()
    .map(|c| format!("v.{c} IS NOT DISTINCT FROM e.{c}"))
    .collect::<Vec<_>>()
    .join(" AND ");
    let sql = format!(
        "SELECT COALESCE(v.event_id, e.event_id) AS event_id, e.chain_seq AS seq, \
                v.event_id IS NOT NULL AS stored, (e.event_id IS NOT NULL AND {same}) AS agrees \
         FROM {events} AS v \
         FULL JOIN (SELECT DISTINCT ON (x.event_id) x.* FROM {log} AS x \
                    ORDER BY x.event_id, x.chain_seq DESC) AS e ON e.event_id = v.event_id \
         ORDER BY 1"
    );
    let rows = crate::sql::query(AssertSqlSafe(sql))
        .fetch_all(&mut *conn)
        .await?;
    for row in rows {
        let event: Uuid = row.try_get("event_id")?;
        let seq: Option<i64> = row.try_get("seq")?;
        let stored: bool = row.try_get("stored")?;
        let agrees: Option<bool> = row.try_get("agrees")?;
        let kind = match (stored, seq) {
            (true, None) => Some(ProblemKind::Unchained),
            (true, Some(_)) if agrees != Some(true) => Some(ProblemKind::Changed),
            (false, Some(_)) => Some(ProblemKind::DeletedWhileActive),
            _ => None,
        };
        if let Some(kind) = kind {
            report.problems.push(ChainProblem {
                table: ChainTable::Event,
                row: event.to_string(),
                run_id: None,
                entity_id: None,
                seq,
                kind,
            });
        }
    }
    Ok(())
}

/// A position missing from the hold table, answered by its bridge: a
/// superseded removal, a pruned hold, or a hold deleted while active.
fn judge_bridge(
    entity: Uuid,
    seq: i64,
    bridges: &HashMap<(Uuid, i64), Bridge>,
    report: &mut VerifyReport,
) -> Option<Bridge> {
    let b = bridges.get(&(entity, seq))?.clone();
    if b.why == "superseded" {
        report.superseded += 1;
    } else {
        let pruned = matches!((b.inactive_since, b.at), (Some(i), Some(at)) if i <= at);
        if pruned {
            report.pruned.push(PrunedLink {
                entity_id: entity,
                seq,
                hold_id: b.hold_id.clone(),
            });
        } else {
            report.problems.push(ChainProblem {
                table: ChainTable::Hold,
                row: b.hold_id.clone(),
                run_id: None,
                entity_id: Some(entity),
                seq: Some(seq),
                kind: ProblemKind::DeletedWhileActive,
            });
        }
    }
    Some(b)
}

/// Bridges past an entity's last surviving link: its chain's tail left the
/// table (pruned, or deleted).
fn finish_entity(
    entity: Uuid,
    walk: &mut Walk,
    bridges: &HashMap<(Uuid, i64), Bridge>,
    report: &mut VerifyReport,
) {
    while bridges.contains_key(&(entity, walk.expected)) {
        let seq = walk.expected;
        let _ = judge_bridge(entity, seq, bridges, report);
        walk.expected += 1;
    }
}

/// The run chain's link at position `seq` as stored (`None` when no run
/// holds that position): to check that the ledger still holds a head kept
/// outside the database (a previous [`VerifyReport::head`], or a
/// certificate's [`super::Certificate::chain_head`]). Run [`verify`] too: it
/// proves the stored links are the ones the rows hash to.
///
/// ```no_run
/// # async fn demo(pool: sqlx::PgPool, kept: cohort::evidence::ChainHead) -> Result<(), cohort::Error> {
/// use cohort::evidence::{chain_link_at, verify};
/// let mut conn = pool.acquire().await?;
/// let schema = cohort::schema::SchemaName::public();
/// let intact = verify(&mut conn, &schema).await?.is_intact();
/// let still_there = chain_link_at(&mut conn, &schema, kept.seq).await? == Some(kept);
/// assert!(intact && still_there);
/// # Ok(()) }
/// ```
pub async fn chain_link_at(
    conn: &mut PgConnection,
    schema: &SchemaName,
    seq: i64,
) -> Result<Option<ChainHead>, Error> {
    super::ensure_ready(conn, schema).await?;
    let hash: Option<Vec<u8>> = crate::sql::query_scalar(AssertSqlSafe(format!(
        "SELECT r.chain_hash FROM {} AS r WHERE r.chain_seq OPERATOR(pg_catalog.=) $1",
        schema.table("sweep_run")
    )))
    .bind(seq)
    .fetch_optional(&mut *conn)
    .await?
    .flatten();
    Ok(hash.map(|h| ChainHead {
        seq,
        hash: to_hex(&h),
    }))
}
