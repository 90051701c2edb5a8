//! Fixtures several areas repeat, kept once: the two tenants, the erasure
//! subjects, the fixed logical clock, the README's rules, a database with the
//! shared models' tables, rows and holds written with plain SQL, and readers
//! of results and of the ledger.
#![allow(dead_code, unreachable_pub)]

use chrono::{DateTime, Duration, DurationRound, NaiveDate, TimeZone, Utc};
use cohort::ledger::EntitySummary;
use cohort::{
    Capabilities, Cohort, Options, Period, Preview, PreviewEntry, Rule, RuleProvider, RunResult,
    Scope, Strategy, TenantContext,
};
use uuid::Uuid;

use super::models::{CaseContact, SessionNote, TABLES, uuid};
use super::{TestDb, TestRules, count, db_with_cohort};

/// The tenant most tests act for.
pub fn tenant_a() -> Uuid {
    uuid("11111111-1111-1111-1111-111111111111")
}

/// Another tenant, whose rows a pass for [`tenant_a`] must leave alone.
pub fn tenant_b() -> Uuid {
    uuid("22222222-2222-2222-2222-222222222222")
}

/// A pass for [`tenant_a`].
pub fn scope_a() -> Scope {
    Scope::Tenant(TenantContext::new(tenant_a()))
}

/// The data subject of an erasure.
pub fn subject() -> Uuid {
    uuid("aaaaaaaa-0000-0000-0000-000000000001")
}

/// A data subject whose rows an erasure of [`subject`] must leave alone.
pub fn someone_else() -> Uuid {
    uuid("bbbbbbbb-0000-0000-0000-000000000002")
}

/// The fixed logical time of the tests that pass their own: 2026-06-01 12:00 UTC.
pub fn fixed_now() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 6, 1, 12, 0, 0)
        .single()
        .expect("valid")
}

/// Now, to the second (stored times compare exactly).
pub fn now_s() -> DateTime<Utc> {
    Utc::now()
        .duration_trunc(Duration::seconds(1))
        .expect("truncate")
}

/// PostgreSQL's earliest `timestamptz`: 4714-11-24 00:00 UTC BC (year -4713
/// in chrono's astronomical numbering).
pub fn pg_earliest() -> DateTime<Utc> {
    NaiveDate::from_ymd_opt(-4713, 11, 24)
        .and_then(|d| d.and_hms_opt(0, 0, 0))
        .expect("valid")
        .and_utc()
}

/// Session notes purged after 30 days, case contacts anonymised after 365.
pub fn readme_rules() -> TestRules {
    TestRules::new()
        .with(
            "session-notes",
            Capabilities::only(Strategy::Purge),
            Rule::new(Period::days(30), Strategy::Purge),
        )
        .with(
            "case-contacts",
            Capabilities::only(Strategy::Anonymise),
            Rule::new(Period::days(365), Strategy::Anonymise),
        )
}

/// A fresh database with Cohort's tables in `public` and the shared models'
/// tables ([`TABLES`]).
pub async fn db_with_tables() -> TestDb {
    let (db, _) = db_with_cohort("public").await;
    db.exec(TABLES).await;
    db
}

/// Session notes, then case contacts, on the administrative pool.
pub async fn build_notes_and_contacts(
    db: &TestDb,
    rules: impl RuleProvider,
    options: Options,
) -> Cohort {
    Cohort::builder(db.pool().clone())
        .options(options)
        .rules(rules)
        .entity::<SessionNote>()
        .entity::<CaseContact>()
        .build()
        .await
        .expect("valid model")
}

/// The id of numbered note `n`: `00000000-0000-0000-0000-<n, 12 digits>`.
pub fn note_id(n: u32) -> Uuid {
    uuid(&format!("00000000-0000-0000-0000-{n:012}"))
}

/// A note anchored at `anchor` (a `timestamptz` literal: `-infinity`, ...).
pub async fn note_at(db: &TestDb, tenant: Uuid, anchor: &str) -> Uuid {
    let id = Uuid::new_v4();
    sqlx::query(
        "INSERT INTO session_notes (id, tenant_id, created_at, body) VALUES ($1, $2, $3::timestamptz, 'private')",
    )
    .bind(id)
    .bind(tenant)
    .bind(anchor)
    .execute(db.pool())
    .await
    .expect("insert note");
    id
}

/// A note anchored at `at`.
pub async fn note_when(db: &TestDb, tenant: Uuid, at: DateTime<Utc>) -> Uuid {
    let id = Uuid::new_v4();
    sqlx::query(
        "INSERT INTO session_notes (id, tenant_id, created_at, body) VALUES ($1, $2, $3, 'private')",
    )
    .bind(id)
    .bind(tenant)
    .bind(at)
    .execute(db.pool())
    .await
    .expect("insert note");
    id
}

/// A note `age_days` before [`fixed_now`].
pub async fn note_days_old(db: &TestDb, tenant: Uuid, age_days: i64) -> Uuid {
    note_when(db, tenant, fixed_now() - Duration::days(age_days)).await
}

/// A case contact `age_days` before [`fixed_now`].
pub async fn contact_days_old(db: &TestDb, tenant: Uuid, age_days: i64) -> Uuid {
    let id = Uuid::new_v4();
    sqlx::query(
        "INSERT INTO case_contacts (id, tenant_id, created_at, email, full_name, phone, external_ref) \
         VALUES ($1, $2, $3, 'ann@example.org', 'Ann Example', '+44 1234', 'REF-12345')",
    )
    .bind(id)
    .bind(tenant)
    .bind(fixed_now() - Duration::days(age_days))
    .execute(db.pool())
    .await
    .expect("insert contact");
    id
}

/// A hold on `record` of type `entity` written with plain SQL, active since
/// yesterday by the database clock.
pub async fn hold_sql(db: &TestDb, entity: &str, record: impl ToString, tenant: Uuid) {
    sqlx::query(
        "INSERT INTO retention_holds (hold_id, retained_entity_id, record_id, tenant_id, reason, created_at) \
         VALUES ($1, $2, $3, $4, 'litigation', now() - interval '1 day')",
    )
    .bind(Uuid::new_v4())
    .bind(uuid(entity))
    .bind(record.to_string())
    .bind(tenant)
    .execute(db.pool())
    .await
    .expect("insert hold");
}

/// Whether note `id` is still there.
pub async fn note_exists(db: &TestDb, id: Uuid) -> bool {
    count(
        db,
        &format!("SELECT count(*) FROM session_notes WHERE id = '{id}'"),
    )
    .await
        == 1
}

/// Whether case contact `id` is anonymised (stamped, its email gone).
pub async fn contact_anonymised(db: &TestDb, id: Uuid) -> bool {
    count(
        db,
        &format!(
            "SELECT count(*) FROM case_contacts WHERE id = '{id}' AND anonymised_at IS NOT NULL AND email IS NULL"
        ),
    )
    .await
        == 1
}

/// The ids of the user records left, in order.
pub async fn user_record_ids(db: &TestDb) -> Vec<i64> {
    sqlx::query_scalar("SELECT id FROM user_records ORDER BY id")
        .fetch_all(db.pool())
        .await
        .expect("ids")
}

/// The summary of `entity_type` in `result`.
pub fn entity_summary<'r>(result: &'r RunResult, entity_type: &str) -> &'r EntitySummary {
    result
        .summaries
        .iter()
        .find(|s| s.entity_type == entity_type)
        .unwrap_or_else(|| panic!("no summary for {entity_type}: {result:#?}"))
}

/// The entry of `entity_type` in `preview`.
pub fn preview_entry<'p>(preview: &'p Preview, entity_type: &str) -> &'p PreviewEntry {
    preview
        .entries
        .iter()
        .find(|e| e.entity_type == entity_type)
        .unwrap_or_else(|| panic!("no preview entry for {entity_type}: {preview:#?}"))
}

/// The ledger's status of run `run_id`.
pub async fn run_status(db: &TestDb, run_id: Uuid) -> String {
    sqlx::query_scalar("SELECT status FROM sweep_run WHERE run_id = $1")
        .bind(run_id)
        .fetch_one(db.pool())
        .await
        .expect("run row")
}

/// The ledger summary of `entity_type` in `run_id`: status, affected, held,
/// skipped, applied period, rule source, rule reason, error.
pub type LedgerSummary = (
    String,
    i64,
    i64,
    i64,
    Option<String>,
    Option<String>,
    Option<String>,
    Option<String>,
);

/// The ledger summary of `entity_type` in `run_id` (see [`LedgerSummary`]).
pub async fn ledger_summary(db: &TestDb, run_id: Uuid, entity_type: &str) -> LedgerSummary {
    sqlx::query_as(
        "SELECT status, affected_count, held_count, skipped_count, applied_period, rule_source, rule_reason, error \
         FROM sweep_run_entity_summary WHERE run_id = $1 AND entity_type = $2",
    )
    .bind(run_id)
    .bind(entity_type)
    .fetch_one(db.pool())
    .await
    .unwrap_or_else(|e| panic!("no ledger summary for {entity_type}: {e}"))
}

/// The keys of a JSON object, sorted.
pub fn json_keys(value: &serde_json::Value) -> Vec<String> {
    let mut keys: Vec<String> = value
        .as_object()
        .unwrap_or_else(|| panic!("not a JSON object: {value}"))
        .keys()
        .cloned()
        .collect();
    keys.sort();
    keys
}

/// User records resolve to `user_data` (purge only), messages are purged
/// after 10 years.
pub fn user_data_rules(user_data: Rule) -> TestRules {
    TestRules::new()
        .with("user-data", Capabilities::only(Strategy::Purge), user_data)
        .with(
            "messages",
            Capabilities::only(Strategy::Purge),
            Rule::new(Period::years(10), Strategy::Purge),
        )
}

/// A user record anchored at `anchor` (a `timestamptz` literal, or NULL).
pub async fn user_record_at(db: &TestDb, id: i64, tenant: Uuid, user: Uuid, anchor: Option<&str>) {
    sqlx::query(
        "INSERT INTO user_records (id, tenant_id, created_at, user_id, notes) \
         VALUES ($1, $2, $3::timestamptz, $4, 'private')",
    )
    .bind(id)
    .bind(tenant)
    .bind(anchor)
    .bind(user)
    .execute(db.pool())
    .await
    .expect("record");
}

/// A user record `age_days` before [`fixed_now`] (negative: in the future).
pub async fn user_record_days_old(
    db: &TestDb,
    id: i64,
    tenant: Uuid,
    user: Uuid,
    age_days: Option<i64>,
) {
    let anchor = age_days.map(|d| (fixed_now() - Duration::days(d)).to_rfc3339());
    user_record_at(db, id, tenant, user, anchor.as_deref()).await;
}
