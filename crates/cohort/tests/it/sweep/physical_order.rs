//! Range batches in physical order (`BatchOrder::Physical`, and what
//! `BatchOrder::Auto` chooses; contract X18): each batch is one page-range
//! statement of at most the batch size of rows, every unheld eligible row
//! changes once, held rows, other tenants' and young rows stay, and
//! cancellation and concurrent sweeps keep their promises. The hold races
//! in this order are in `holds::races`, locked rows and deadlocks in
//! `fence`.

use crate::support::fixtures::{db_with_tables, hold_sql, scope_a, tenant_a};
use crate::support::models::*;
use crate::support::{TestDb, TestRules, count};
use chrono::Utc;
use cohort::ledger::{AuditEvent, AuditObserver};
use cohort::policy::ProviderError;
use cohort::{
    BatchOrder, CancellationToken, Capabilities, Cohort, Options, Period, Rule, RunStatus,
    Strategy, SweepOptions,
};
use futures_util::future::BoxFuture;

fn rules() -> TestRules {
    TestRules::new()
        .with(
            "session-notes",
            Capabilities::only(Strategy::Purge),
            Rule::new(Period::days(30), Strategy::Purge),
        )
        .with(
            "tickets",
            Capabilities::only(Strategy::SoftDelete),
            Rule::new(Period::days(30), Strategy::SoftDelete),
        )
}

/// `expired` expired notes of tenant A in random physical order, with
/// `young` notes of tenant A too young to go and `expired / 10` expired
/// notes of tenant B among them; each note's body `body` bytes long (so a
/// page holds about 8,000 / body of them); the same mix of tickets.
async fn shuffled(db: &TestDb, expired: u32, young: u32, body: u32, shuffle: bool) {
    let order = if shuffle { "random()" } else { "at" };
    db.exec(&format!(
        "INSERT INTO session_notes (id, tenant_id, created_at, body) \
         SELECT gen_random_uuid(), tenant, at, repeat('x', {body}) FROM ( \
           SELECT '11111111-1111-1111-1111-111111111111'::uuid AS tenant, \
                  now() - interval '400 days' + g * interval '1 minute' AS at \
             FROM generate_series(1, {expired}) g \
           UNION ALL SELECT '11111111-1111-1111-1111-111111111111', now() - interval '1 day' + g * interval '1 second' \
             FROM generate_series(1, {young}) g \
           UNION ALL SELECT '22222222-2222-2222-2222-222222222222', now() - interval '400 days' + g * interval '1 minute' \
             FROM generate_series(1, {expired} / 10) g) AS r \
         ORDER BY {order}; \
         INSERT INTO tickets (id, tenant_id, opened_at) \
         SELECT row_number() OVER (ORDER BY {order}), tenant, at FROM ( \
           SELECT '11111111-1111-1111-1111-111111111111'::uuid AS tenant, \
                  now() - interval '400 days' + g * interval '1 minute' AS at \
             FROM generate_series(1, {expired}) g \
           UNION ALL SELECT '11111111-1111-1111-1111-111111111111', now() - interval '1 day' + g * interval '1 second' \
             FROM generate_series(1, {young}) g \
           UNION ALL SELECT '22222222-2222-2222-2222-222222222222', now() - interval '400 days' + g * interval '1 minute' \
             FROM generate_series(1, {expired} / 10) g) AS r \
         ORDER BY {order}; \
         ANALYZE session_notes; ANALYZE tickets;"
    ))
    .await;
}

/// Logs every `DELETE` on `session_notes` and `UPDATE` on `tickets`: the
/// rows it changed and the statement's text.
async fn log_statements(db: &TestDb) {
    db.exec(
        r#"
        CREATE TABLE public.stmt_log (tbl text, n bigint, query text);
        CREATE FUNCTION public.log_stmt() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
          INSERT INTO public.stmt_log SELECT TG_TABLE_NAME, (SELECT count(*) FROM changed), current_query();
          RETURN NULL;
        END $$;
        CREATE TRIGGER log_delete AFTER DELETE ON public.session_notes
          REFERENCING OLD TABLE AS changed FOR EACH STATEMENT EXECUTE FUNCTION public.log_stmt();
        CREATE TRIGGER log_update AFTER UPDATE ON public.tickets
          REFERENCING NEW TABLE AS changed FOR EACH STATEMENT EXECUTE FUNCTION public.log_stmt();
        "#,
    )
    .await;
}

async fn logged(db: &TestDb) -> Vec<(String, i64, String)> {
    sqlx::query_as("SELECT tbl, n, query FROM stmt_log")
        .fetch_all(db.pool())
        .await
        .expect("log")
}

fn is_page_range(query: &str) -> bool {
    query.contains("t.ctid OPERATOR(pg_catalog.>)")
}

async fn cohort(db: &TestDb, batch_size: u32, order: BatchOrder) -> Cohort {
    Cohort::builder(db.pool().clone())
        .options(Options {
            batch_size,
            batch_order: order,
            ..Options::default()
        })
        .rules(rules())
        .entity::<SessionNote>()
        .entity::<Ticket>()
        .build()
        .await
        .expect("model")
}

// contract: X18, X1, H1, S1, S2
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn physical_order_changes_every_unheld_expired_row_once_in_batches_of_at_most_the_batch_size()
{
    let db = db_with_tables().await;
    // About 30 notes a page, some 90 pages: windows of a few pages each.
    shuffled(&db, 2_500, 200, 200, true).await;
    log_statements(&db).await;
    // The handle registers the types, which plain-SQL holds need.
    let cohort = cohort(&db, 100, BatchOrder::Physical).await;
    let held_notes: Vec<String> = sqlx::query_scalar(
        "SELECT id::text FROM session_notes WHERE tenant_id = $1 AND created_at < now() - interval '30 days' \
         ORDER BY random() LIMIT 25",
    )
    .bind(tenant_a())
    .fetch_all(db.pool())
    .await
    .expect("ids");
    for id in &held_notes {
        hold_sql(&db, NOTE_ID, id, tenant_a()).await;
    }
    let held_tickets: Vec<i64> = sqlx::query_scalar(
        "SELECT id FROM tickets WHERE tenant_id = $1 AND opened_at < now() - interval '30 days' \
         ORDER BY random() LIMIT 25",
    )
    .bind(tenant_a())
    .fetch_all(db.pool())
    .await
    .expect("ids");
    for id in &held_tickets {
        hold_sql(&db, "5d1c1b8e-2f7a-4b7e-9d8a-0c2a44f0e001", id, tenant_a()).await;
    }
    let result = cohort.sweep(&scope_a(), Utc::now()).await.expect("sweep");
    assert_eq!(result.status, RunStatus::Succeeded, "{result:?}");
    for s in &result.summaries {
        assert_eq!((s.affected, s.held, s.skipped), (2_475, 25, 0), "{s:?}");
    }
    let log = logged(&db).await;
    assert!(log.len() >= 2 * 25, "batches of 100: {}", log.len());
    for (table, n, query) in &log {
        assert!(*n <= 100, "{table}: a batch changed {n} rows");
        assert!(is_page_range(query), "{table}: {query}");
    }
    let changed: i64 = log.iter().map(|(_, n, _)| n).sum();
    assert_eq!(changed, 2 * 2_475, "each row changed once");
    // What stays: tenant A's held and young notes, all of tenant B's.
    assert_eq!(
        count(
            &db,
            "SELECT count(*) FROM session_notes WHERE tenant_id = '11111111-1111-1111-1111-111111111111'"
        )
        .await,
        25 + 200
    );
    let kept: Vec<String> = sqlx::query_scalar(
        "SELECT id::text FROM session_notes WHERE tenant_id = $1 AND created_at < now() - interval '30 days'",
    )
    .bind(tenant_a())
    .fetch_all(db.pool())
    .await
    .expect("kept");
    let mut kept = kept;
    kept.sort();
    let mut want = held_notes.clone();
    want.sort();
    assert_eq!(kept, want, "exactly the held notes are kept");
    assert_eq!(
        count(
            &db,
            "SELECT count(*) FROM tickets WHERE is_deleted AND tenant_id = '11111111-1111-1111-1111-111111111111'"
        )
        .await,
        2_475
    );
    let unchanged_held: i64 =
        sqlx::query_scalar("SELECT count(*) FROM tickets WHERE id = ANY($1) AND NOT is_deleted")
            .bind(&held_tickets)
            .fetch_one(db.pool())
            .await
            .expect("held tickets");
    assert_eq!(unchanged_held, 25);
    assert_eq!(
        count(
            &db,
            "SELECT count(*) FROM session_notes WHERE tenant_id = '22222222-2222-2222-2222-222222222222'"
        )
        .await,
        250
    );
    assert_eq!(
        count(&db, "SELECT count(*) FROM tickets WHERE is_deleted AND tenant_id <> '11111111-1111-1111-1111-111111111111'").await,
        0
    );
    let again = cohort.sweep(&scope_a(), Utc::now()).await.expect("sweep");
    assert_eq!(again.affected(), 0, "nothing left to change");
}

// contract: X18
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_order_walks_the_pages_of_a_large_shuffled_mostly_expired_table_and_the_anchor_index_otherwise()
 {
    // Notes of 1,500 bytes: five to a page, so 6,000 of them fill more than
    // the 1,000 pages below which the order makes no difference.
    for (shuffle, expired, young, pages) in [
        (true, 6_000, 0, true),
        // In anchor order already (correlation near 1).
        (false, 6_000, 0, false),
        // Shuffled, but only a small share is eligible.
        (true, 300, 5_700, false),
    ] {
        let db = db_with_tables().await;
        shuffled(&db, expired, young, 1_500, shuffle).await;
        log_statements(&db).await;
        let cohort = cohort(&db, 1_000, BatchOrder::Auto).await;
        let result = cohort.sweep(&scope_a(), Utc::now()).await.expect("sweep");
        assert_eq!(result.status, RunStatus::Succeeded, "{result:?}");
        assert_eq!(result.summaries[0].affected, u64::from(expired));
        let notes: Vec<String> = logged(&db)
            .await
            .into_iter()
            .filter(|(t, _, _)| t == "session_notes")
            .map(|(_, _, q)| q)
            .collect();
        assert!(!notes.is_empty());
        assert!(
            notes.iter().all(|q| is_page_range(q) == pages),
            "shuffled {shuffle}, {expired} of {} expired: page ranges expected {pages}",
            expired + young
        );
    }
}

/// Cancels the run when the first batch of notes has committed.
struct CancelAfterFirstBatch(CancellationToken);

impl AuditObserver for CancelAfterFirstBatch {
    fn on_event<'a>(&'a self, event: &'a AuditEvent) -> BoxFuture<'a, Result<(), ProviderError>> {
        if matches!(event, AuditEvent::EntityProgress { .. }) {
            self.0.cancel();
        }
        Box::pin(async { Ok(()) })
    }
}

// contract: X10, X18
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_physical_order_cancellation_keeps_the_committed_batches_and_the_next_run_takes_the_rest()
 {
    let db = db_with_tables().await;
    shuffled(&db, 1_000, 0, 200, true).await;
    log_statements(&db).await;
    let token = CancellationToken::new();
    let cohort = Cohort::builder(db.pool().clone())
        .options(Options {
            batch_size: 100,
            batch_order: BatchOrder::Physical,
            ..Options::default()
        })
        .rules(rules())
        .entity::<SessionNote>()
        .observer(CancelAfterFirstBatch(token.clone()))
        .build()
        .await
        .expect("model");
    let result = cohort
        .sweep_with(
            &scope_a(),
            Utc::now(),
            SweepOptions::default().cancel_on(token),
        )
        .await
        .expect("sweep");
    assert_eq!(result.status, RunStatus::Cancelled);
    let first = logged(&db).await;
    assert_eq!(first.len(), 1, "one batch before the cancellation");
    let done = u64::try_from(first[0].1).expect("count");
    assert_eq!(result.affected(), done);
    assert!(done > 0 && done <= 100, "{done}");
    let rest = cohort.sweep(&scope_a(), Utc::now()).await.expect("sweep");
    assert_eq!(rest.affected() + done, 1_000);
}

// contract: X15, X18
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_sweeps_in_physical_order_change_and_count_each_row_once() {
    let db = db_with_tables().await;
    shuffled(&db, 3_000, 0, 200, true).await;
    let a = cohort(&db, 100, BatchOrder::Physical).await;
    let b = cohort(&db, 100, BatchOrder::Physical).await;
    let (sa, sb) = (scope_a(), scope_a());
    let (ra, rb) = tokio::join!(a.sweep(&sa, Utc::now()), b.sweep(&sb, Utc::now()));
    let (ra, rb) = (ra.expect("sweep a"), rb.expect("sweep b"));
    for entity in ["SessionNote", "Ticket"] {
        let affected = |r: &cohort::RunResult| {
            r.summaries
                .iter()
                .filter(|s| s.entity_type == entity)
                .map(|s| s.affected)
                .sum::<u64>()
        };
        assert_eq!(affected(&ra) + affected(&rb), 3_000, "{entity}");
    }
    assert_eq!(
        count(
            &db,
            "SELECT count(*) FROM session_notes WHERE tenant_id = '11111111-1111-1111-1111-111111111111'"
        )
        .await,
        0
    );
    assert_eq!(
        count(&db, "SELECT count(*) FROM tickets WHERE is_deleted").await,
        3_000
    );
}
