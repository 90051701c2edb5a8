//! The evidence chain (contract EV1): the canonical encoding of every link,
//! and the trigger functions and upgrade step of migration 4 built from it.
//!
//! One encoding, written once here, is rendered twice: into the trigger
//! functions the migration installs (which hash with `pg_catalog.sha256`),
//! and into the queries of [`crate::evidence::verify`] (which hash the
//! canonical bytes in Rust and never call the trigger functions). See
//! `docs/evidence.md` for the design; in short:
//!
//! * row details: one chain per run, linked at insert (`BEFORE INSERT`);
//! * entity summaries: one chain per run, sealed when the run settles;
//! * runs: one chain per install, linked when a run settles (its status
//!   leaves `Started`), under a short transaction-scoped advisory lock; each
//!   run link covers the heads and counts of its summaries' and details'
//!   chains;
//! * holds: one chain per retained entity, a link at creation and one at
//!   every change of `removed_at`, extended under the entity fence that the
//!   fence trigger already holds. A superseded removal link or a deleted
//!   hold's links are kept as *bridges* (`chain_bridges`) on a surviving
//!   hold of the same entity, so verification can tell a prune from a
//!   tampering.

use super::SchemaName;
use crate::sql::QualifiedName;

/// The class (first key) of the run chain's advisory lock, in PostgreSQL's
/// two-`int4` keyspace ("EVID"); the second key is
/// `hashtext(<schema> || ':evidence-runs')`. Taken only while a run settles.
pub(crate) const RUN_CHAIN_LOCK_CLASS: i32 = 0x4556_4944;

/// How a field's value becomes canonical text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Enc {
    /// As stored.
    Text,
    /// Lower-case, hyphenated.
    Uuid,
    /// Decimal.
    Int,
    /// `t` or `f`.
    Bool,
    /// Microseconds since 1970-01-01 UTC, decimal; `infinity`, `-infinity`.
    Time,
    /// Lower-case hex.
    Hash,
}

/// The kinds of link, each with its domain tag and its fields in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LinkKind {
    /// A run (install-wide chain).
    Run,
    /// An entity summary (chain of its run).
    Summary,
    /// A row detail (chain of its run).
    Detail,
    /// A hold's creation (chain of its retained entity).
    HoldCreated,
    /// A change of a hold's `removed_at` (chain of its retained entity).
    HoldRemoval,
    /// A matter's creation, change or release (the install's matter chain).
    Matter,
    /// A decision on a disposition batch (the install's disposition chain,
    /// migration 10).
    Disposition,
    /// An event's recording or withdrawal (the install's event chain,
    /// contract SL4).
    Event,
}

use Enc::{Bool, Hash, Int, Text, Time, Uuid};

const RUN_FIELDS: &[(&str, Enc)] = &[
    ("chain_seq", Int),
    ("chain_prev", Hash),
    ("run_id", Uuid),
    ("run_kind", Text),
    ("trigger", Text),
    ("dry_run", Bool),
    ("tenant_id", Uuid),
    ("logical_now", Time),
    ("status", Text),
    ("started_at", Time),
    ("settled_at", Time),
    ("error", Text),
    ("chain_summaries", Int),
    ("chain_summaries_head", Hash),
    ("chain_details", Int),
    ("chain_details_head", Hash),
];

const SUMMARY_FIELDS: &[(&str, Enc)] = &[
    ("run_id", Uuid),
    ("chain_seq", Int),
    ("chain_prev", Hash),
    ("summary_id", Int),
    ("retained_entity_id", Uuid),
    ("entity_type", Text),
    ("category", Text),
    ("tenant_id", Uuid),
    ("strategy", Text),
    ("status", Text),
    ("affected_count", Int),
    ("held_count", Int),
    ("skipped_count", Int),
    ("null_anchor_count", Int),
    ("legal_minimum_count", Int),
    ("applied_period", Text),
    ("cutoff", Time),
    ("rule_source", Text),
    ("rule_reason", Text),
    ("error", Text),
    ("updated_at", Time),
];

const DETAIL_FIELDS: &[(&str, Enc)] = &[
    ("run_id", Uuid),
    ("chain_seq", Int),
    ("chain_prev", Hash),
    ("detail_id", Int),
    ("retained_entity_id", Uuid),
    ("entity_type", Text),
    ("record_id", Text),
    ("tenant_id", Uuid),
    ("action", Text),
    ("chain_payload", Hash),
    ("created_at", Time),
];

const HOLD_CREATED_FIELDS: &[(&str, Enc)] = &[
    ("retained_entity_id", Uuid),
    ("chain_seq", Int),
    ("chain_prev", Hash),
    ("hold_id", Uuid),
    ("record_id", Text),
    ("tenant_id", Uuid),
    ("reason", Text),
    ("created_at", Time),
    ("expires_at", Time),
];

const HOLD_REMOVAL_FIELDS: &[(&str, Enc)] = &[
    ("retained_entity_id", Uuid),
    ("removal_seq", Int),
    ("removal_prev", Hash),
    ("hold_id", Uuid),
    ("chain_hash", Hash),
    ("removed_at", Time),
];

const MATTER_FIELDS: &[(&str, Enc)] = &[
    ("chain_seq", Int),
    ("chain_prev", Hash),
    ("matter_id", Uuid),
    ("event", Text),
    ("tenant_id", Uuid),
    ("scope_kind", Text),
    ("subject", Text),
    ("entity_ids", Text),
    ("retained_entity_id", Uuid),
    ("anchor_from", Time),
    ("anchor_to", Time),
    ("reason", Text),
    ("owner", Text),
    ("created_at", Time),
    ("expires_at", Time),
    ("released_at", Time),
    ("recorded_at", Time),
];

const DISPOSITION_FIELDS: &[(&str, Enc)] = &[
    ("chain_seq", Int),
    ("chain_prev", Hash),
    ("decision_id", Uuid),
    ("batch_id", Uuid),
    ("decision", Text),
    ("decided_by", Text),
    ("automatic", Bool),
    ("retained_entity_id", Uuid),
    ("tenant_id", Uuid),
    ("stage", Int),
    ("rule_hash", Hash),
    ("approvers_required", Int),
    ("reason", Text),
    ("keep_until", Time),
    ("run_id", Uuid),
    ("row_count", Int),
    ("changed_count", Int),
    ("held_count", Int),
    ("left_count", Int),
    ("ineligible_count", Int),
    ("decided_at", Time),
];

const EVENT_FIELDS: &[(&str, Enc)] = &[
    ("chain_seq", Int),
    ("chain_prev", Hash),
    ("event_id", Uuid),
    ("action", Text),
    ("event_type", Text),
    ("subject_key", Text),
    ("tenant_id", Uuid),
    ("occurred_at", Time),
    ("recorded_by", Text),
    ("recorded_at", Time),
    ("withdrawn_at", Time),
    ("withdrawn_by", Text),
    ("withdrawn_reason", Text),
    ("logged_at", Time),
];

impl LinkKind {
    /// The domain tag, the first field of every canonical encoding.
    pub(crate) const fn tag(self) -> &'static str {
        match self {
            LinkKind::Run => "cohort-ev1:run",
            LinkKind::Summary => "cohort-ev1:summary",
            LinkKind::Detail => "cohort-ev1:detail",
            LinkKind::HoldCreated => "cohort-ev1:hold",
            LinkKind::HoldRemoval => "cohort-ev1:hold-removal",
            LinkKind::Matter => "cohort-ev1:matter",
            LinkKind::Disposition => "cohort-ev1:disposition",
            LinkKind::Event => "cohort-ev1:event",
        }
    }

    /// The fields after the tag, in order, with their encodings.
    pub(crate) const fn fields(self) -> &'static [(&'static str, Enc)] {
        match self {
            LinkKind::Run => RUN_FIELDS,
            LinkKind::Summary => SUMMARY_FIELDS,
            LinkKind::Detail => DETAIL_FIELDS,
            LinkKind::HoldCreated => HOLD_CREATED_FIELDS,
            LinkKind::HoldRemoval => HOLD_REMOVAL_FIELDS,
            LinkKind::Matter => MATTER_FIELDS,
            LinkKind::Disposition => DISPOSITION_FIELDS,
            LinkKind::Event => EVENT_FIELDS,
        }
    }
}

/// A value's canonical text, as SQL (`e` is not NULL).
fn encode(e: &str, enc: Enc) -> String {
    match enc {
        Enc::Text => e.to_owned(),
        Enc::Uuid | Enc::Int => format!("({e})::pg_catalog.text"),
        Enc::Bool => format!("CASE WHEN {e} THEN 't' ELSE 'f' END"),
        Enc::Time => format!(
            "CASE WHEN pg_catalog.isfinite({e}) THEN \
               ((pg_catalog.extract('epoch', {e}) OPERATOR(pg_catalog.*) 1000000::pg_catalog.numeric)\
                ::pg_catalog.numeric(30,0))::pg_catalog.text \
             WHEN {e} OPERATOR(pg_catalog.>) 'epoch'::pg_catalog.timestamptz THEN 'infinity' \
             ELSE '-infinity' END"
        ),
        Enc::Hash => format!("pg_catalog.encode({e}, 'hex')"),
    }
}

/// One field as a netstring: `<byte length>:<text>`, or `~` for NULL.
fn netstring(e: &str, enc: Enc) -> String {
    let v = encode(e, enc);
    format!(
        "CASE WHEN ({e}) IS NULL THEN '~' \
         ELSE pg_catalog.concat(pg_catalog.octet_length({v}), ':', {v}) END"
    )
}

/// Fields a later migration appended to a kind of link, after its
/// [`LinkKind::fields`]: each is left out of the encoding entirely (not
/// even `~`) while it is NULL, so every link written before the field
/// existed keeps its hash. Only trailing fields may be optional, which
/// keeps the encoding unambiguous.
const RUN_OPTIONAL_FIELDS: &[(&str, Enc)] = &[
    // Migration 6: an erasure's keyed subject hash (contract EV4).
    ("subject_hmac", Hash),
];

impl LinkKind {
    /// The optional trailing fields (see [`RUN_OPTIONAL_FIELDS`]).
    pub(crate) const fn optional_fields(self) -> &'static [(&'static str, Enc)] {
        match self {
            LinkKind::Run => RUN_OPTIONAL_FIELDS,
            _ => &[],
        }
    }
}

/// Which form of a link's encoding to write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Form {
    /// The fields of migration 4 only (its frozen trigger and data step).
    Original,
    /// With the optional trailing fields (current).
    Current,
}

fn canonical_sql_in(kind: LinkKind, value: &dyn Fn(&str) -> String, form: Form) -> String {
    let tag = kind.tag();
    let mut parts = vec![format!("'{}:{}'", tag.len(), tag)];
    for (name, enc) in kind.fields() {
        parts.push(netstring(&value(name), *enc));
    }
    if form == Form::Current {
        for (name, enc) in kind.optional_fields() {
            let e = value(name);
            let v = encode(&e, *enc);
            parts.push(format!(
                "CASE WHEN ({e}) IS NULL THEN '' \
                 ELSE pg_catalog.concat(pg_catalog.octet_length({v}), ':', {v}) END"
            ));
        }
    }
    format!("pg_catalog.concat({})", parts.join(", "))
}

/// The SQL expression (text) of a link's canonical encoding: the tag and
/// then every field, each as a netstring, concatenated, then the optional
/// trailing fields that are not NULL. `value` gives the SQL expression of
/// each field by column name.
pub(crate) fn canonical_sql(kind: LinkKind, value: &dyn Fn(&str) -> String) -> String {
    canonical_sql_in(kind, value, Form::Current)
}

/// The canonical encoding as bytes (`bytea`, UTF-8), what the link hash is
/// the SHA-256 of.
pub(crate) fn canonical_bytes_sql(kind: LinkKind, value: &dyn Fn(&str) -> String) -> String {
    format!(
        "pg_catalog.convert_to({}, 'UTF8')",
        canonical_sql(kind, value)
    )
}

/// The digest a row detail's link covers instead of its captured payload
/// (which the row-handler queue scrubs once delivered): SHA-256 of the
/// payload's `jsonb` text, NULL when there is none. `payload` is the SQL
/// expression of the `captured_payload` column.
pub(crate) fn payload_digest_sql(payload: &str) -> String {
    format!(
        "CASE WHEN {payload} IS NULL THEN NULL          ELSE pg_catalog.sha256(pg_catalog.convert_to(({payload})::pg_catalog.text, 'UTF8')) END"
    )
}

/// The link hash, computed by the server (trigger functions only), in the
/// form migration 4 froze (no optional fields).
pub(super) fn hash_sql(kind: LinkKind, value: &dyn Fn(&str) -> String) -> String {
    hash_sql_in(kind, value, Form::Original)
}

fn hash_sql_in(kind: LinkKind, value: &dyn Fn(&str) -> String, form: Form) -> String {
    format!(
        "pg_catalog.sha256(pg_catalog.convert_to({}, 'UTF8'))",
        canonical_sql_in(kind, value, form)
    )
}

/// Column `c` of the row `prefix` (`NEW`, `x`), unless `overrides` names it.
pub(super) fn row<'a>(
    prefix: &'a str,
    overrides: &'a [(&'a str, &'a str)],
) -> impl Fn(&str) -> String + 'a {
    move |c: &str| {
        overrides
            .iter()
            .find(|(name, _)| *name == c)
            .map(|(_, e)| (*e).to_owned())
            .unwrap_or_else(|| format!("{prefix}.{c}"))
    }
}

struct Names {
    runs: QualifiedName,
    summaries: QualifiedName,
    details: QualifiedName,
    holds: QualifiedName,
}

fn names(schema: &SchemaName) -> Names {
    Names {
        runs: schema.table("sweep_run"),
        summaries: schema.table("sweep_run_entity_summary"),
        details: schema.table("sweep_run_row_detail"),
        holds: schema.table("retention_holds"),
    }
}

/// PL/pgSQL statements sealing the summaries of run `run` (an expression):
/// leaves their count in `v_n` and the last hash in `v_prev`.
fn seal_summaries(n: &Names, run: &str) -> String {
    let hash = hash_sql(
        LinkKind::Summary,
        &row("x", &[("chain_seq", "v_n"), ("chain_prev", "v_prev")]),
    );
    format!(
        "v_n := 0;
    v_prev := NULL;
    FOR v_row IN SELECT s.summary_id FROM {summaries} AS s
                  WHERE s.run_id OPERATOR(pg_catalog.=) {run} ORDER BY s.summary_id LOOP
        v_n := v_n OPERATOR(pg_catalog.+) 1;
        UPDATE {summaries} AS x
           SET chain_seq = v_n, chain_prev = v_prev,
               chain_hash = {hash}
         WHERE x.summary_id OPERATOR(pg_catalog.=) v_row.summary_id
        RETURNING x.chain_hash INTO v_prev;
    END LOOP;",
        summaries = n.summaries,
    )
}

/// PL/pgSQL statements reading the details chain head of run `run` into
/// `v_dn` (its length, 0 when empty) and `v_dhead`.
fn details_head(n: &Names, run: &str) -> String {
    format!(
        "v_dn := 0;
    v_dhead := NULL;
    SELECT d.chain_seq, d.chain_hash INTO v_dn, v_dhead FROM {details} AS d
     WHERE d.run_id OPERATOR(pg_catalog.=) {run} AND d.chain_seq IS NOT NULL
     ORDER BY d.chain_seq DESC LIMIT 1;
    v_dn := COALESCE(v_dn, 0);",
        details = n.details
    )
}

/// PL/pgSQL statements taking the run chain's lock and reading its head into
/// `v_seq` (0 when empty) and `v_head`.
fn run_head(n: &Names) -> String {
    format!(
        "PERFORM pg_catalog.pg_advisory_xact_lock({class}, pg_catalog.hashtext(
        TG_TABLE_SCHEMA::pg_catalog.text OPERATOR(pg_catalog.||) ':evidence-runs'));
    v_seq := NULL;
    v_head := NULL;
    SELECT r.chain_seq, r.chain_hash INTO v_seq, v_head FROM {runs} AS r
     WHERE r.chain_seq IS NOT NULL ORDER BY r.chain_seq DESC LIMIT 1;
    v_seq := COALESCE(v_seq, 0);",
        class = RUN_CHAIN_LOCK_CLASS,
        runs = n.runs
    )
}

/// PL/pgSQL statements reading the head of the hold chain of entity
/// `entity` (creation and removal links share one sequence) into `v_seq`
/// (0 when empty) and `v_head`.
fn hold_head(n: &Names, entity: &str) -> String {
    format!(
        "v_seq := NULL;
    v_head := NULL;
    SELECT k.s, k.h INTO v_seq, v_head FROM (
        (SELECT h.chain_seq AS s, h.chain_hash AS h FROM {holds} AS h
          WHERE h.retained_entity_id OPERATOR(pg_catalog.=) {entity} AND h.chain_seq IS NOT NULL
          ORDER BY h.chain_seq DESC LIMIT 1)
        UNION ALL
        (SELECT h.removal_seq, h.removal_hash FROM {holds} AS h
          WHERE h.retained_entity_id OPERATOR(pg_catalog.=) {entity} AND h.removal_seq IS NOT NULL
          ORDER BY h.removal_seq DESC LIMIT 1)
    ) AS k ORDER BY k.s DESC LIMIT 1;
    v_seq := COALESCE(v_seq, 0);",
        holds = n.holds
    )
}

/// Microseconds since the epoch of the statement's clock, as text.
const NOW_MICROS: &str = "((pg_catalog.extract('epoch', pg_catalog.statement_timestamp()) \
     OPERATOR(pg_catalog.*) 1000000::pg_catalog.numeric)::pg_catalog.numeric(30,0))::pg_catalog.text";

/// A bridge entry (JSON object) for a link that leaves the chain's rows.
fn bridge(seq: &str, prev: &str, hash: &str, why: &str, hold: &str, inactive: &str) -> String {
    format!(
        "pg_catalog.jsonb_build_object('seq', {seq}, 'prev', pg_catalog.encode({prev}, 'hex'), \
         'hash', pg_catalog.encode({hash}, 'hex'), 'why', '{why}', 'hold_id', {hold}, \
         'at', {NOW_MICROS}, 'inactive_since', {inactive})"
    )
}

/// The body of `sweep_run_evidence_chain` as migration 4 installed it:
/// seals a run when its status leaves `Started` (or when it is inserted
/// already settled).
pub(super) fn run_trigger_body(schema: &SchemaName) -> String {
    run_trigger_body_in(schema, Form::Original)
}

/// The body of `sweep_run_evidence_chain` from migration 6 on: the run's
/// link also covers its subject hash when it has one (an erasure's).
pub(super) fn run_trigger_body_with_subject(schema: &SchemaName) -> String {
    run_trigger_body_in(schema, Form::Current)
}

fn run_trigger_body_in(schema: &SchemaName, form: Form) -> String {
    let n = names(schema);
    let run_hash = hash_sql_in(LinkKind::Run, &row("NEW", &[]), form);
    format!(
        r#"
-- Cohort's evidence chain (migration 4): seals a run as it settles.
DECLARE
    v_row record;
    v_n bigint;
    v_prev bytea;
    v_dn bigint;
    v_dhead bytea;
    v_seq bigint;
    v_head bytea;
BEGIN
    IF NEW.status OPERATOR(pg_catalog.=) 'Started' THEN
        RETURN NEW;
    END IF;
    IF TG_OP OPERATOR(pg_catalog.=) 'UPDATE' AND OLD.status OPERATOR(pg_catalog.<>) 'Started' THEN
        RETURN NEW;
    END IF;
    {summaries}
    {details}
    {head}
    NEW.chain_summaries := v_n;
    NEW.chain_summaries_head := v_prev;
    NEW.chain_details := v_dn;
    NEW.chain_details_head := v_dhead;
    NEW.chain_seq := v_seq OPERATOR(pg_catalog.+) 1;
    NEW.chain_prev := v_head;
    NEW.chain_hash := {run_hash};
    RETURN NEW;
END
"#,
        summaries = seal_summaries(&n, "NEW.run_id"),
        details = details_head(&n, "NEW.run_id"),
        head = run_head(&n),
    )
}

/// The body of `sweep_run_row_detail_evidence_chain`: links a new row
/// detail to its run's details chain.
pub(super) fn detail_trigger_body(schema: &SchemaName) -> String {
    let n = names(schema);
    let hash = hash_sql(LinkKind::Detail, &row("NEW", &[]));
    format!(
        r#"
-- Cohort's evidence chain (migration 4): one chain of row details per run.
-- The head is looked up once per transaction and then kept in a
-- transaction-local setting (rolled back with the rows it describes).
DECLARE
    v_key pg_catalog.text := (NEW.run_id)::pg_catalog.text OPERATOR(pg_catalog.||) ' '
                             OPERATOR(pg_catalog.||) TG_TABLE_SCHEMA OPERATOR(pg_catalog.||) ' ';
    v_cache pg_catalog.text := pg_catalog.current_setting('{DETAIL_HEAD_SETTING}', true);
    v_seq bigint;
    v_head bytea;
BEGIN
    IF v_cache IS NOT NULL AND pg_catalog.starts_with(v_cache, v_key) THEN
        v_cache := pg_catalog.substr(v_cache, pg_catalog.length(v_key) OPERATOR(pg_catalog.+) 1);
        v_seq := pg_catalog.split_part(v_cache, ' ', 1)::bigint;
        v_head := pg_catalog.decode(pg_catalog.split_part(v_cache, ' ', 2), 'hex');
    ELSE
        SELECT d.chain_seq, d.chain_hash INTO v_seq, v_head FROM {details} AS d
         WHERE d.run_id OPERATOR(pg_catalog.=) NEW.run_id AND d.chain_seq IS NOT NULL
         ORDER BY d.chain_seq DESC LIMIT 1;
    END IF;
    NEW.chain_seq := COALESCE(v_seq, 0) OPERATOR(pg_catalog.+) 1;
    NEW.chain_prev := v_head;
    NEW.chain_payload := {payload};
    NEW.chain_hash := {hash};
    PERFORM pg_catalog.set_config('{DETAIL_HEAD_SETTING}',
        v_key OPERATOR(pg_catalog.||) (NEW.chain_seq)::pg_catalog.text OPERATOR(pg_catalog.||) ' '
              OPERATOR(pg_catalog.||) pg_catalog.encode(NEW.chain_hash, 'hex'), true);
    RETURN NEW;
END
"#,
        details = n.details,
        payload = payload_digest_sql("NEW.captured_payload"),
    )
}

/// The transaction-local setting where the row-detail trigger keeps the head
/// of the details chain it extends (`<run id> <schema> <seq> <hash hex>`).
const DETAIL_HEAD_SETTING: &str = "cohort.evidence_details_head";

/// The body of `retention_holds_evidence_chain`: a link at a hold's
/// creation and at every change of its `removed_at`, in the chain of its
/// retained entity. Fires after the entity fence trigger, so the fence is
/// held exclusively while the chain's head is read and extended.
pub(super) fn hold_trigger_body(schema: &SchemaName) -> String {
    let n = names(schema);
    let created = hash_sql(LinkKind::HoldCreated, &row("NEW", &[]));
    let removal = hash_sql(LinkKind::HoldRemoval, &row("NEW", &[]));
    let superseded = bridge(
        "OLD.removal_seq",
        "OLD.removal_prev",
        "OLD.removal_hash",
        "superseded",
        "OLD.hold_id",
        "NULL::pg_catalog.text",
    );
    format!(
        r#"
-- Cohort's evidence chain (migration 4): one chain of hold events per retained entity.
DECLARE
    v_seq bigint;
    v_head bytea;
BEGIN
    IF TG_OP OPERATOR(pg_catalog.=) 'UPDATE' THEN
        -- A hold's creation link never changes; a change of anything it
        -- covers shows as a changed row when the chain is verified.
        NEW.chain_seq := OLD.chain_seq;
        NEW.chain_prev := OLD.chain_prev;
        NEW.chain_hash := OLD.chain_hash;
        IF NEW.removed_at IS NOT DISTINCT FROM OLD.removed_at THEN
            NEW.removal_seq := OLD.removal_seq;
            NEW.removal_prev := OLD.removal_prev;
            NEW.removal_hash := OLD.removal_hash;
            RETURN NEW;
        END IF;
        IF OLD.removal_seq IS NOT NULL THEN
            NEW.chain_bridges := OLD.chain_bridges OPERATOR(pg_catalog.||)
                pg_catalog.jsonb_build_array({superseded});
        END IF;
        {head}
        NEW.removal_seq := v_seq OPERATOR(pg_catalog.+) 1;
        NEW.removal_prev := v_head;
        NEW.removal_hash := {removal};
        RETURN NEW;
    END IF;
    {head}
    NEW.chain_bridges := '[]'::pg_catalog.jsonb;
    NEW.chain_seq := v_seq OPERATOR(pg_catalog.+) 1;
    NEW.chain_prev := v_head;
    NEW.chain_hash := {created};
    IF NEW.removed_at IS NULL THEN
        NEW.removal_seq := NULL;
        NEW.removal_prev := NULL;
        NEW.removal_hash := NULL;
    ELSE
        NEW.removal_seq := NEW.chain_seq OPERATOR(pg_catalog.+) 1;
        NEW.removal_prev := NEW.chain_hash;
        NEW.removal_hash := {removal};
    END IF;
    RETURN NEW;
END
"#,
        head = hold_head(&n, "NEW.retained_entity_id"),
    )
}

/// The body of `retention_holds_evidence_delete`: a deleted hold's links
/// (and the bridges it carried) become bridges on a surviving hold of the
/// same entity, with the instant the hold stopped protecting, so
/// verification reports a prune as pruned and any other deletion as such.
pub(super) fn hold_delete_trigger_body(schema: &SchemaName) -> String {
    let n = names(schema);
    let inactive = format!(
        "CASE WHEN LEAST(OLD.expires_at, OLD.removed_at) IS NULL THEN NULL ELSE {} END",
        encode("LEAST(OLD.expires_at, OLD.removed_at)", Enc::Time)
    );
    let created = bridge(
        "OLD.chain_seq",
        "OLD.chain_prev",
        "OLD.chain_hash",
        "deleted",
        "OLD.hold_id",
        &inactive,
    );
    let removal = bridge(
        "OLD.removal_seq",
        "OLD.removal_prev",
        "OLD.removal_hash",
        "deleted",
        "OLD.hold_id",
        &inactive,
    );
    format!(
        r#"
-- Cohort's evidence chain (migration 4): a deleted hold leaves its links as bridges.
DECLARE
    v_entries pg_catalog.jsonb;
BEGIN
    IF OLD.chain_seq IS NULL THEN
        RETURN NULL;
    END IF;
    v_entries := OLD.chain_bridges OPERATOR(pg_catalog.||) pg_catalog.jsonb_build_array({created});
    IF OLD.removal_seq IS NOT NULL THEN
        v_entries := v_entries OPERATOR(pg_catalog.||) pg_catalog.jsonb_build_array({removal});
    END IF;
    UPDATE {holds} AS h SET chain_bridges = h.chain_bridges OPERATOR(pg_catalog.||) v_entries
     WHERE h.hold_id OPERATOR(pg_catalog.=) (
        SELECT x.hold_id FROM {holds} AS x
         WHERE x.retained_entity_id OPERATOR(pg_catalog.=) OLD.retained_entity_id
           AND x.chain_seq IS NOT NULL
         ORDER BY x.chain_seq DESC LIMIT 1);
    RETURN NULL;
END
"#,
        holds = n.holds,
    )
}

/// Migration 4's data step (the body of a `DO` block), run before its
/// triggers exist: seals the rows
/// already there. Row details are chained per run in `detail_id` order;
/// settled runs (summaries, then the run) in settle order; holds per entity,
/// creations in (`created_at`, `hold_id`) order and then removals in
/// (`removed_at`, `hold_id`) order. Only unsealed rows are touched, so
/// re-running it is harmless.
pub(super) fn seal_existing(schema: &SchemaName) -> String {
    let n = names(schema);
    let payload = payload_digest_sql("x.captured_payload");
    let detail_hash = hash_sql(
        LinkKind::Detail,
        &row(
            "x",
            &[
                ("chain_seq", "v_seq"),
                ("chain_prev", "v_head"),
                ("chain_payload", &payload),
            ],
        ),
    );
    let run_hash = hash_sql(
        LinkKind::Run,
        &row(
            "x",
            &[
                ("chain_seq", "v_seq"),
                ("chain_prev", "v_head"),
                ("chain_summaries", "v_n"),
                ("chain_summaries_head", "v_prev"),
                ("chain_details", "v_dn"),
                ("chain_details_head", "v_dhead"),
            ],
        ),
    );
    let created_hash = hash_sql(
        LinkKind::HoldCreated,
        &row("x", &[("chain_seq", "v_seq"), ("chain_prev", "v_head")]),
    );
    let removal_hash = hash_sql(
        LinkKind::HoldRemoval,
        &row("x", &[("removal_seq", "v_seq"), ("removal_prev", "v_head")]),
    );
    // The run chain's lock is taken as the trigger takes it; TG_TABLE_SCHEMA
    // does not exist in a DO block, so the lock statement is written here.
    let lock = run_head(&n).replace(
        "TG_TABLE_SCHEMA::pg_catalog.text",
        &format!("{}::pg_catalog.text", literal(schema.as_str())),
    );
    format!(
        r#"
DECLARE
    v_run record;
    v_row record;
    v_n bigint;
    v_prev bytea;
    v_dn bigint;
    v_dhead bytea;
    v_seq bigint;
    v_head bytea;
BEGIN
    -- Row details: one chain per run.
    FOR v_run IN SELECT DISTINCT d.run_id FROM {details} AS d WHERE d.chain_hash IS NULL LOOP
        v_seq := NULL;
        v_head := NULL;
        SELECT d.chain_seq, d.chain_hash INTO v_seq, v_head FROM {details} AS d
         WHERE d.run_id OPERATOR(pg_catalog.=) v_run.run_id AND d.chain_seq IS NOT NULL
         ORDER BY d.chain_seq DESC LIMIT 1;
        v_seq := COALESCE(v_seq, 0);
        FOR v_row IN SELECT d.detail_id FROM {details} AS d
                      WHERE d.run_id OPERATOR(pg_catalog.=) v_run.run_id AND d.chain_hash IS NULL
                      ORDER BY d.detail_id LOOP
            v_seq := v_seq OPERATOR(pg_catalog.+) 1;
            UPDATE {details} AS x SET chain_seq = v_seq, chain_prev = v_head, chain_payload = {payload},
                   chain_hash = {detail_hash}
             WHERE x.detail_id OPERATOR(pg_catalog.=) v_row.detail_id
            RETURNING x.chain_hash INTO v_head;
        END LOOP;
    END LOOP;
    -- Settled runs, in settle order: their summaries, then the run link.
    FOR v_run IN SELECT r.run_id FROM {runs} AS r
                  WHERE r.chain_hash IS NULL AND r.status OPERATOR(pg_catalog.<>) 'Started'
                  ORDER BY r.settled_at, r.started_at, r.run_id LOOP
        {summaries}
        {dhead}
        {head}
        v_seq := v_seq OPERATOR(pg_catalog.+) 1;
        UPDATE {runs} AS x SET chain_summaries = v_n, chain_summaries_head = v_prev,
               chain_details = v_dn, chain_details_head = v_dhead,
               chain_seq = v_seq, chain_prev = v_head,
               chain_hash = {run_hash}
         WHERE x.run_id OPERATOR(pg_catalog.=) v_run.run_id;
    END LOOP;
    -- Holds: one chain per retained entity, creations then removals.
    FOR v_run IN SELECT DISTINCT h.retained_entity_id AS entity FROM {holds} AS h
                  WHERE h.chain_hash IS NULL OR (h.removed_at IS NOT NULL AND h.removal_hash IS NULL) LOOP
        FOR v_row IN SELECT h.hold_id FROM {holds} AS h
                      WHERE h.retained_entity_id OPERATOR(pg_catalog.=) v_run.entity AND h.chain_hash IS NULL
                      ORDER BY h.created_at, h.hold_id LOOP
            {hold_head}
            v_seq := v_seq OPERATOR(pg_catalog.+) 1;
            UPDATE {holds} AS x SET chain_seq = v_seq, chain_prev = v_head, chain_hash = {created_hash}
             WHERE x.hold_id OPERATOR(pg_catalog.=) v_row.hold_id;
        END LOOP;
        FOR v_row IN SELECT h.hold_id FROM {holds} AS h
                      WHERE h.retained_entity_id OPERATOR(pg_catalog.=) v_run.entity
                        AND h.removed_at IS NOT NULL AND h.removal_hash IS NULL
                      ORDER BY h.removed_at, h.hold_id LOOP
            {hold_head}
            v_seq := v_seq OPERATOR(pg_catalog.+) 1;
            UPDATE {holds} AS x SET removal_seq = v_seq, removal_prev = v_head, removal_hash = {removal_hash}
             WHERE x.hold_id OPERATOR(pg_catalog.=) v_row.hold_id;
        END LOOP;
    END LOOP;
END
"#,
        details = n.details,
        runs = n.runs,
        holds = n.holds,
        summaries = seal_summaries(&n, "v_run.run_id"),
        dhead = details_head(&n, "v_run.run_id"),
        head = lock,
        hold_head = hold_head(&n, "v_run.entity"),
    )
}

/// A string literal (quotes doubled); only for the schema's raw name in the
/// upgrade step, where a bind parameter cannot be used.
fn literal(s: &str) -> String {
    format!("'{}'", s.replace('\'', "''"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_field_is_a_column_of_its_table() {
        use crate::schema::spec::TABLES;
        let table = |k: LinkKind| match k {
            LinkKind::Run => "sweep_run",
            LinkKind::Summary => "sweep_run_entity_summary",
            LinkKind::Detail => "sweep_run_row_detail",
            LinkKind::HoldCreated | LinkKind::HoldRemoval => "retention_holds",
            LinkKind::Matter => "retention_matter_events",
            LinkKind::Disposition => "retention_disposition_decisions",
            LinkKind::Event => "retention_event_log",
        };
        for k in [
            LinkKind::Run,
            LinkKind::Summary,
            LinkKind::Detail,
            LinkKind::HoldCreated,
            LinkKind::HoldRemoval,
            LinkKind::Matter,
            LinkKind::Disposition,
            LinkKind::Event,
        ] {
            let t = TABLES
                .iter()
                .find(|t| t.name == table(k))
                .expect("known table");
            for (name, _) in k.fields() {
                assert!(
                    t.columns.iter().any(|c| c.name == *name),
                    "{}.{name}",
                    t.name
                );
            }
        }
    }

    #[test]
    fn the_seal_step_names_the_schema_only_quoted() {
        let schema = SchemaName::new("it's \"odd\"").expect("valid");
        let sql = seal_existing(&schema);
        assert!(
            sql.contains(r#""it's ""odd""".sweep_run"#)
                || sql.contains(r#""it's ""odd"""."sweep_run""#)
        );
        assert!(sql.contains("'it''s \"odd\"'::pg_catalog.text"));
    }
}
