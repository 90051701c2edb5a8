//! Hold creation racing every mutation path under the entity fence, forced
//! deterministically in both orders (contract H11), for purge, soft-delete,
//! built-in anonymisation (range batches), custom anonymisation (locked
//! batches) and erasure, with holds created through the API and with plain SQL
//! (whose trigger takes the fence):
//!
//! - **hold first**: the hold is written in a transaction left open; the
//!   mutation starts and waits for the fence; the hold commits; the
//!   mutation's statements, which start after the fence is granted, see it.
//! - **mutation first**: the mutation's statement is stopped mid-way by a
//!   row-level-security gate while it holds the fence; hold creation starts
//!   and waits for the fence; the gate opens; the mutation commits first, and
//!   the hold creator then finds the row gone (or already changed).
//!
//! The control in `sweep::execution` shows the same statement without the fence
//! deleting a row whose hold committed.

use crate::support;
use crate::support::fixtures::{db_with_tables, scope_a, subject, tenant_a};
use crate::support::models::*;
use crate::support::{TestDb, TestRules, app_pool, count};
use chrono::{DateTime, Utc};
use cohort::holds::{HoldError, HoldRequest, MatterRequest};
use cohort::{
    BatchOrder, Capabilities, Cohort, ErasureRequest, Error, MAX_LOCK_WAIT, Options, Period, Rule,
    RunResult, Strategy,
};
use sqlx::{Acquire, PgPool};
use uuid::Uuid;

/// A contact anonymised by built-in methods only: its sweeps take range batches.
#[derive(cohort::Retained)]
#[cohort(
    category = "plain-contacts",
    anchor = "created_at",
    id = "3c1e0f1a-8e9b-4c7d-a0b2-5f6e7d8c9b0a",
    table = "plain_contacts"
)]
#[allow(dead_code, reason = "mirrors the table; Cohort reads its descriptor")]
struct PlainContact {
    id: Uuid,
    tenant_id: Uuid,
    created_at: DateTime<Utc>,
    anonymised_at: Option<DateTime<Utc>>,
    #[cohort(anonymise = "null")]
    email: Option<String>,
    #[cohort(anonymise(literal = "[redacted]"))]
    phone: String,
}

const PLAIN_CONTACT_ID: &str = "3c1e0f1a-8e9b-4c7d-a0b2-5f6e7d8c9b0a";

/// The mutation path under test.
#[derive(Debug, Clone, Copy)]
enum Kind {
    /// `session_notes`: range batches.
    Purge,
    /// `tickets`: range batches.
    SoftDelete,
    /// `plain_contacts`: range batches.
    Anonymise,
    /// `case_contacts` (a custom anonymiser needs each row's value): locked batches.
    AnonymiseCustom,
    /// `user_records`: an erasure of one subject, locked batches that wait.
    Erasure,
}

/// How the hold is written.
#[derive(Debug, Clone, Copy)]
enum Creator {
    Api,
    PlainSql,
    /// A type matter whose anchor window holds row `n` alone (contract MH1).
    Matter,
    /// The same matter inserted with plain SQL.
    MatterSql,
}

impl Kind {
    fn entity(self) -> Uuid {
        uuid(match self {
            Kind::Purge => NOTE_ID,
            Kind::SoftDelete => "5d1c1b8e-2f7a-4b7e-9d8a-0c2a44f0e001",
            Kind::Anonymise => PLAIN_CONTACT_ID,
            Kind::AnonymiseCustom => CONTACT_ID,
            Kind::Erasure => "6b619c19-6e3c-44e8-a87f-975c68fd3988",
        })
    }

    fn table(self) -> &'static str {
        match self {
            Kind::Purge => "session_notes",
            Kind::SoftDelete => "tickets",
            Kind::Anonymise => "plain_contacts",
            Kind::AnonymiseCustom => "case_contacts",
            Kind::Erasure => "user_records",
        }
    }

    fn uuid_keys(self) -> bool {
        matches!(self, Kind::Purge | Kind::Anonymise | Kind::AnonymiseCustom)
    }

    /// Row `n`'s record id.
    fn row(self, n: u32) -> String {
        if self.uuid_keys() {
            format!("00000000-0000-0000-0000-{n:012}")
        } else {
            n.to_string()
        }
    }

    fn anchor(self) -> &'static str {
        match self {
            Kind::SoftDelete => "opened_at",
            _ => "created_at",
        }
    }

    fn type_name(self) -> &'static str {
        match self {
            Kind::Purge => "SessionNote",
            Kind::SoftDelete => "Ticket",
            Kind::Anonymise => "PlainContact",
            Kind::AnonymiseCustom => "CaseContact",
            Kind::Erasure => "UserRecord",
        }
    }

    /// Whether row `n` is as it was loaded.
    async fn untouched(self, db: &TestDb, n: u32) -> bool {
        let id = self.row(n);
        let sql = match self {
            Kind::Purge => format!("SELECT count(*) FROM session_notes WHERE id = '{id}'"),
            Kind::SoftDelete => {
                format!("SELECT count(*) FROM tickets WHERE id = {id} AND NOT is_deleted")
            }
            Kind::Anonymise => format!(
                "SELECT count(*) FROM plain_contacts WHERE id = '{id}' \
                 AND anonymised_at IS NULL AND email = 'e' AND phone = 'p'"
            ),
            Kind::AnonymiseCustom => format!(
                "SELECT count(*) FROM case_contacts WHERE id = '{id}' \
                 AND anonymised_at IS NULL AND external_ref = 'r'"
            ),
            Kind::Erasure => format!("SELECT count(*) FROM user_records WHERE id = {id}"),
        };
        count(db, &sql).await == 1
    }

    /// How many of the ten rows were changed.
    async fn mutated(self, db: &TestDb) -> i64 {
        let sql = match self {
            Kind::Purge => "SELECT 10 - count(*) FROM session_notes",
            Kind::SoftDelete => "SELECT count(*) FROM tickets WHERE is_deleted",
            Kind::Anonymise => {
                "SELECT count(*) FROM plain_contacts WHERE anonymised_at IS NOT NULL"
            }
            Kind::AnonymiseCustom => {
                "SELECT count(*) FROM case_contacts WHERE anonymised_at IS NOT NULL"
            }
            Kind::Erasure => "SELECT 10 - count(*) FROM user_records",
        };
        count(db, sql).await
    }

    /// Whether the mutation removes the row (then a hold arriving after it finds nothing).
    fn removes(self) -> bool {
        matches!(self, Kind::Purge | Kind::Erasure)
    }
}

fn rules() -> TestRules {
    let rule = |s: Strategy| Rule::new(Period::days(30), s);
    TestRules::new()
        .with(
            "session-notes",
            Capabilities::only(Strategy::Purge),
            rule(Strategy::Purge),
        )
        .with(
            "tickets",
            Capabilities::only(Strategy::SoftDelete),
            rule(Strategy::SoftDelete),
        )
        .with(
            "plain-contacts",
            Capabilities::only(Strategy::Anonymise),
            rule(Strategy::Anonymise),
        )
        .with(
            "case-contacts",
            Capabilities::only(Strategy::Anonymise),
            rule(Strategy::Anonymise),
        )
        .with(
            "user-data",
            Capabilities::only(Strategy::Purge),
            rule(Strategy::Purge),
        )
}

/// Ten expired rows of tenant A in each table (ids 1..10), one subject's.
/// With `isolation`, the database's default transaction isolation is set
/// first, so every connection opened afterwards has it.
async fn setup(isolation: Option<&str>) -> TestDb {
    let db = db_with_tables().await;
    db.exec(
        r#"
        CREATE TABLE public.plain_contacts (
            id uuid PRIMARY KEY, tenant_id uuid NOT NULL, created_at timestamptz NOT NULL,
            anonymised_at timestamptz, email text, phone text NOT NULL);
        INSERT INTO session_notes (id, tenant_id, created_at, body)
            SELECT ('00000000-0000-0000-0000-' || lpad(g::text, 12, '0'))::uuid, '11111111-1111-1111-1111-111111111111',
                   now() - interval '100 days' + g * interval '1 second', 'b'
            FROM generate_series(1, 10) g;
        INSERT INTO tickets (id, tenant_id, opened_at)
            SELECT g, '11111111-1111-1111-1111-111111111111', now() - interval '100 days' + g * interval '1 second'
            FROM generate_series(1, 10) g;
        INSERT INTO plain_contacts (id, tenant_id, created_at, email, phone)
            SELECT ('00000000-0000-0000-0000-' || lpad(g::text, 12, '0'))::uuid, '11111111-1111-1111-1111-111111111111',
                   now() - interval '100 days' + g * interval '1 second', 'e', 'p'
            FROM generate_series(1, 10) g;
        INSERT INTO case_contacts (id, tenant_id, created_at, email, full_name, phone, external_ref)
            SELECT ('00000000-0000-0000-0000-' || lpad(g::text, 12, '0'))::uuid, '11111111-1111-1111-1111-111111111111',
                   now() - interval '100 days' + g * interval '1 second', 'e', 'n', 'p', 'r'
            FROM generate_series(1, 10) g;
        INSERT INTO user_records (id, tenant_id, created_at, user_id)
            SELECT g, '11111111-1111-1111-1111-111111111111', now() - interval '100 days' + g * interval '1 second',
                   'aaaaaaaa-0000-0000-0000-000000000001'
            FROM generate_series(1, 10) g;
        "#,
    )
    .await;
    if let Some(level) = isolation {
        db.exec(&format!(
            "ALTER DATABASE \"{}\" SET default_transaction_isolation = '{level}'",
            db.name()
        ))
        .await;
    }
    db
}

/// A handle on `pool` that knows only the type under test.
async fn build(pool: PgPool, kind: Kind, options: Options) -> Cohort {
    let builder = Cohort::builder(pool).options(options).rules(rules());
    let builder = match kind {
        Kind::Purge => builder.entity::<SessionNote>(),
        Kind::SoftDelete => builder.entity::<Ticket>(),
        Kind::Anonymise => builder.entity::<PlainContact>(),
        Kind::AnonymiseCustom => builder.entity::<CaseContact>(),
        Kind::Erasure => builder.entity::<UserRecord>(),
    };
    builder.build().await.expect("model")
}

async fn mutate(cohort: Cohort, kind: Kind) -> Result<RunResult, Error> {
    match kind {
        Kind::Erasure => {
            cohort
                .erase(&scope_a(), Utc::now(), ErasureRequest::new(subject()))
                .await
        }
        _ => cohort.sweep(&scope_a(), Utc::now()).await,
    }
}

/// Writes a hold on row `n` on `conn` (the API, or plain SQL).
async fn write_hold(
    cohort: &Cohort,
    conn: &mut sqlx::PgConnection,
    kind: Kind,
    creator: Creator,
    n: u32,
) -> Result<(), Error> {
    match creator {
        Creator::Api => cohort
            .holds()
            .create(
                conn,
                HoldRequest::new(kind.entity(), kind.row(n), Some(tenant_a()), "race", Utc::now()),
            )
            .await
            .map(|_| ()),
        Creator::Matter | Creator::MatterSql => {
            // Row n's anchor, and a window of a millisecond from it (rows
            // are a second apart).
            let at: DateTime<Utc> = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
                "SELECT {} FROM {} WHERE id::text = $1",
                kind.anchor(),
                kind.table()
            )))
            .bind(kind.row(n))
            .fetch_one(&mut *conn)
            .await?;
            let to = at + chrono::Duration::milliseconds(1);
            if matches!(creator, Creator::Matter) {
                cohort
                    .matters()
                    .create(
                        conn,
                        MatterRequest::retained_type(kind.entity(), Some(tenant_a()), "race", "counsel")
                            .anchor_window(Some(at), Some(to)),
                    )
                    .await
                    .map(|_| ())
            } else {
                sqlx::query(
                    "INSERT INTO retention_matters (matter_id, tenant_id, scope_kind, retained_entity_id, \
                                                    anchor_from, anchor_to, reason, owner) \
                     VALUES (gen_random_uuid(), $1, 'Type', $2, $3, $4, 'race', 'counsel')",
                )
                .bind(tenant_a())
                .bind(kind.entity())
                .bind(at)
                .bind(to)
                .execute(conn)
                .await
                .map(|_| ())
                .map_err(Error::from)
            }
        }
        Creator::PlainSql => sqlx::query(
            "INSERT INTO retention_holds (hold_id, retained_entity_id, record_id, tenant_id, reason, created_at) \
             VALUES (gen_random_uuid(), $1, $2, $3, 'race', now())",
        )
        .bind(kind.entity())
        .bind(kind.row(n))
        .bind(tenant_a())
        .execute(conn)
        .await
        .map(|_| ())
        .map_err(Error::from),
    }
}

fn summary(result: &RunResult, kind: Kind) -> (u64, u64) {
    let s = result
        .summaries
        .iter()
        .find(|s| s.entity_type == kind.type_name())
        .expect("the type's summary");
    (s.affected, s.held)
}

/// The hold is written first, in a transaction left open; the mutation waits
/// for the fence; once the hold commits, the mutation leaves its row.
async fn hold_first(kind: Kind, creator: Creator, isolation: Option<&str>, order: BatchOrder) {
    let db = setup(isolation).await;
    // A pool opened after the database's default changed, so its connections have it.
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(4)
        .connect_with(db.options())
        .await
        .expect("pool");
    if let Some(level) = isolation {
        let seen: String = sqlx::query_scalar("SHOW default_transaction_isolation")
            .fetch_one(&pool)
            .await
            .expect("show");
        assert_eq!(seen, level);
    }
    let options = Options {
        batch_order: order,
        ..Options::default()
    };
    let cohort = build(pool, kind, options).await;
    let mut holder = db.connect().await;
    let mut tx = holder.begin().await.expect("begin");
    write_hold(&cohort, &mut tx, kind, creator, 5)
        .await
        .expect("hold written, not committed");
    let run = tokio::spawn(mutate(cohort.clone(), kind));
    let mut watcher = db.connect().await;
    support::wait_for_fence(&mut watcher).await;
    tx.commit().await.expect("commit the hold");
    let result = run.await.expect("join").expect("mutation");
    assert!(
        kind.untouched(&db, 5).await,
        "{kind:?}/{creator:?}: a row whose hold committed before the mutation's statement was changed"
    );
    assert_eq!(kind.mutated(&db).await, 9, "{kind:?}: every other row");
    assert_eq!(summary(&result, kind), (9, 1), "{kind:?}: committed counts");
}

/// The mutation's statement is stopped mid-way at row 1 while it holds the
/// fence; the hold's writer waits for the fence; the gate opens; the mutation
/// commits first and changes row 5; the hold comes after it.
async fn mutation_first(kind: Kind, creator: Creator, order: BatchOrder) {
    let db = setup(None).await;
    support::install_gate(&db, &[kind.table()], &[&kind.row(1)]).await;
    // The engine acts as an unprivileged role (superusers bypass the gate),
    // and may wait at the gate as long as a row lock.
    let options = Options {
        lock_wait: MAX_LOCK_WAIT,
        batch_order: order,
        ..Options::default()
    };
    let cohort = build(app_pool(&db).await, kind, options).await;
    let creator_handle = build(db.pool().clone(), kind, Options::default()).await;
    let mut gate = db.connect().await;
    sqlx::query("SELECT pg_advisory_lock(4242)")
        .execute(&mut gate)
        .await
        .expect("gate");
    let run = tokio::spawn(mutate(cohort.clone(), kind));
    support::wait_for_gate(&mut gate).await;
    let writer = tokio::spawn({
        let mut conn = db.connect().await;
        async move { write_hold(&creator_handle, &mut conn, kind, creator, 5).await }
    });
    support::wait_for_fence(&mut gate).await;
    sqlx::query("SELECT pg_advisory_unlock(4242)")
        .execute(&mut gate)
        .await
        .expect("open gate");
    let result = run.await.expect("join").expect("mutation");
    let written = writer.await.expect("join");
    assert!(
        !kind.untouched(&db, 5).await,
        "{kind:?}: the mutation that held the fence first changes the row"
    );
    assert_eq!(kind.mutated(&db).await, 10);
    assert_eq!(summary(&result, kind), (10, 0));
    match (creator, kind.removes()) {
        (Creator::Api, true) => assert!(
            matches!(written, Err(Error::Hold(HoldError::NoSuchRow { .. }))),
            "{kind:?}: the hold creator waited for the fence, then found no row: {written:?}"
        ),
        // The row is still there (changed): the hold protects it from now on;
        // a plain insert writes whatever it is given.
        _ => written.expect("the hold is written after the mutation"),
    }
}

// contract: H11, H1, S6
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hold_committed_while_a_purge_batch_waits_for_the_fence_protects_its_row() {
    hold_first(Kind::Purge, Creator::Api, None, BatchOrder::Anchor).await;
}

// contract: H11, H1, S6
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hold_committed_while_a_soft_delete_batch_waits_for_the_fence_protects_its_row() {
    hold_first(Kind::SoftDelete, Creator::Api, None, BatchOrder::Anchor).await;
}

// contract: H11, H1, S6
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hold_committed_while_an_anonymise_batch_waits_for_the_fence_protects_its_row() {
    hold_first(Kind::Anonymise, Creator::Api, None, BatchOrder::Anchor).await;
}

// contract: H11, H1, S6
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hold_committed_while_a_custom_anonymise_batch_waits_for_the_fence_protects_its_row() {
    hold_first(
        Kind::AnonymiseCustom,
        Creator::Api,
        None,
        BatchOrder::Anchor,
    )
    .await;
}

// contract: H11, H1, E1
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hold_committed_while_an_erasure_batch_waits_for_the_fence_protects_its_row() {
    hold_first(Kind::Erasure, Creator::Api, None, BatchOrder::Anchor).await;
}

// contract: H11
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hold_inserted_with_plain_sql_takes_the_fence_and_protects_its_row() {
    for kind in [Kind::Purge, Kind::Anonymise, Kind::Erasure] {
        hold_first(kind, Creator::PlainSql, None, BatchOrder::Anchor).await;
    }
}

// contract: X19, H11
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batches_run_read_committed_whatever_the_database_default() {
    // Under REPEATABLE READ or SERIALIZABLE the batch's snapshot would be
    // taken by its first statement, before the fence wait ended, and the hold
    // committed meanwhile would be invisible to it.
    for level in ["repeatable read", "serializable"] {
        hold_first(Kind::Purge, Creator::Api, Some(level), BatchOrder::Anchor).await;
        hold_first(Kind::Erasure, Creator::Api, Some(level), BatchOrder::Anchor).await;
    }
}

// contract: H11
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hold_creation_waits_for_a_purge_batch_under_way_then_finds_no_row() {
    mutation_first(Kind::Purge, Creator::Api, BatchOrder::Anchor).await;
}

// contract: H11
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hold_creation_waits_for_a_soft_delete_batch_under_way() {
    mutation_first(Kind::SoftDelete, Creator::Api, BatchOrder::Anchor).await;
}

// contract: H11
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hold_creation_waits_for_an_anonymise_batch_under_way() {
    mutation_first(Kind::Anonymise, Creator::Api, BatchOrder::Anchor).await;
    mutation_first(Kind::AnonymiseCustom, Creator::Api, BatchOrder::Anchor).await;
}

// contract: H11
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hold_creation_waits_for_an_erasure_batch_under_way_then_finds_no_row() {
    mutation_first(Kind::Erasure, Creator::Api, BatchOrder::Anchor).await;
}

// contract: H11
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plain_sql_hold_insert_waits_for_a_batch_under_way() {
    mutation_first(Kind::Purge, Creator::PlainSql, BatchOrder::Anchor).await;
    mutation_first(Kind::SoftDelete, Creator::PlainSql, BatchOrder::Anchor).await;
}

// contract: MH1, H11
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_matter_committed_while_a_batch_waits_for_the_fence_protects_its_rows() {
    for kind in [
        Kind::Purge,
        Kind::SoftDelete,
        Kind::Anonymise,
        Kind::AnonymiseCustom,
        Kind::Erasure,
    ] {
        hold_first(kind, Creator::Matter, None, BatchOrder::Anchor).await;
    }
    for kind in [Kind::Purge, Kind::Erasure] {
        hold_first(kind, Creator::MatterSql, None, BatchOrder::Anchor).await;
    }
}

// contract: MH1, H11
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_matter_waits_for_a_batch_under_way() {
    for kind in [Kind::Purge, Kind::AnonymiseCustom, Kind::Erasure] {
        mutation_first(kind, Creator::Matter, BatchOrder::Anchor).await;
    }
    mutation_first(Kind::SoftDelete, Creator::MatterSql, BatchOrder::Anchor).await;
}

// contract: H11, H1, X18
// The races above on the physical-order range path: a hold or matter
// (through the API and with plain SQL) committed while a batch waits for
// the fence protects its row; one written while a batch holds the fence
// waits for it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_physical_order_a_hold_or_matter_committed_while_a_batch_waits_for_the_fence_protects_its_row()
 {
    for kind in [Kind::Purge, Kind::SoftDelete, Kind::Anonymise] {
        for creator in [
            Creator::Api,
            Creator::PlainSql,
            Creator::Matter,
            Creator::MatterSql,
        ] {
            hold_first(kind, creator, None, BatchOrder::Physical).await;
        }
    }
}

// contract: H11, X18
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_physical_order_hold_creation_waits_for_a_batch_under_way() {
    for kind in [Kind::Purge, Kind::SoftDelete, Kind::Anonymise] {
        for creator in [Creator::Api, Creator::PlainSql] {
            mutation_first(kind, creator, BatchOrder::Physical).await;
        }
    }
}
