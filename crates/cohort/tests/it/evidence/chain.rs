//! The evidence chain (contract EV1): verification after every kind of
//! tampering with plain SQL, under concurrent sweeps and hold creation, and
//! after an upgrade from a database holding data.

use crate::support::fixtures::{db_with_tables, tenant_a, tenant_b};
use crate::support::models::*;
use crate::support::{TestDb, TestRules};
use chrono::{Duration, Utc};
use cohort::evidence::{ChainTable, ProblemKind, VerifyReport, verify};
use cohort::holds::HoldRequest;
use cohort::schema::{ReadinessProblem, SchemaName, check_readiness, migrations};
use cohort::{Capabilities, Cohort, Options, Period, Rule, Scope, Strategy, TenantContext};
use uuid::Uuid;

fn scope(t: Uuid) -> Scope {
    Scope::Tenant(TenantContext::new(t))
}

const TICKETS: &str = "5d1c1b8e-2f7a-4b7e-9d8a-0c2a44f0e001";

/// `n` expired tickets for each tenant, ids `offset + 1..`.
async fn tickets(db: &TestDb, t: Uuid, offset: i64, n: i64) {
    sqlx::query(
        "INSERT INTO tickets (id, tenant_id, opened_at) \
         SELECT $3 + g, $1, now() - interval '100 days' + g * interval '1 second' \
         FROM generate_series(1, $2) g",
    )
    .bind(t)
    .bind(n)
    .bind(offset)
    .execute(db.pool())
    .await
    .expect("tickets");
}

async fn cohort(db: &TestDb, batch: u32) -> Cohort {
    Cohort::builder(db.pool().clone())
        .options(Options {
            batch_size: batch,
            ..Options::default()
        })
        .rules(TestRules::new().with(
            "tickets",
            Capabilities::only(Strategy::Purge).and(Strategy::SoftDelete),
            Rule::new(Period::days(30), Strategy::Purge).with_per_row_audit(),
        ))
        .entity::<Ticket>()
        .build()
        .await
        .expect("model")
}

async fn check(db: &TestDb) -> VerifyReport {
    let mut conn = db.pool().acquire().await.expect("conn");
    verify(&mut conn, &SchemaName::public())
        .await
        .expect("verify")
}

async fn hold(c: &Cohort, db: &TestDb, record: &str, t: Uuid) -> Uuid {
    let mut conn = db.pool().acquire().await.expect("conn");
    let hold = c
        .holds()
        .create(
            &mut conn,
            HoldRequest::new(uuid(TICKETS), record, Some(t), "case #1", Utc::now()),
        )
        .await
        .expect("hold");
    hold.hold_id
}

/// A ledger with two sealed runs (row details, summaries), holds created
/// and removed: the base every tampering test changes.
async fn ledger() -> (TestDb, Cohort) {
    let db = db_with_tables().await;
    tickets(&db, tenant_a(), 0, 12).await;
    let c = cohort(&db, 5).await;
    let h1 = hold(&c, &db, "3", tenant_a()).await;
    let _h2 = hold(&c, &db, "4", tenant_a()).await;
    let mut conn = db.pool().acquire().await.expect("conn");
    c.holds()
        .remove(&mut conn, h1, Utc::now() + Duration::days(1))
        .await
        .expect("remove");
    let r = c
        .sweep(&scope(tenant_a()), Utc::now())
        .await
        .expect("sweep");
    assert_eq!(r.status, cohort::RunStatus::Succeeded);
    tickets(&db, tenant_a(), 100, 3).await;
    c.sweep(&scope(tenant_a()), Utc::now())
        .await
        .expect("sweep");
    (db, c)
}

fn kinds(report: &VerifyReport) -> Vec<(ChainTable, String, ProblemKind)> {
    report
        .problems
        .iter()
        .map(|p| (p.table, p.row.clone(), p.kind.clone()))
        .collect()
}

async fn detail_id(db: &TestDb, record: &str) -> i64 {
    sqlx::query_scalar("SELECT detail_id FROM sweep_run_row_detail WHERE record_id = $1")
        .bind(record)
        .fetch_one(db.pool())
        .await
        .expect("detail")
}

// contract: EV1
#[tokio::test]
async fn an_untouched_ledger_verifies_and_every_row_is_chained() {
    let (db, _c) = ledger().await;
    let report = check(&db).await;
    assert!(report.is_intact(), "{report}");
    assert_eq!(report.runs, 2, "{report}");
    assert_eq!(report.runs_in_progress, 0);
    assert_eq!(report.details, 13, "{report}"); // 10 + 3 purged, 2 held
    assert_eq!(report.summaries, 2);
    // Two creations and one removal.
    assert_eq!(report.hold_links, 3, "{report}");
    let head = report.head.clone().expect("head");
    assert_eq!(head.seq, 2);
    assert_eq!(head.hash.len(), 64);
    let unchained: i64 = sqlx::query_scalar(
        "SELECT (SELECT count(*) FROM sweep_run WHERE chain_hash IS NULL) \
              + (SELECT count(*) FROM sweep_run_entity_summary WHERE chain_hash IS NULL) \
              + (SELECT count(*) FROM sweep_run_row_detail WHERE chain_hash IS NULL) \
              + (SELECT count(*) FROM retention_holds WHERE chain_hash IS NULL)",
    )
    .fetch_one(db.pool())
    .await
    .expect("count");
    assert_eq!(unchained, 0);
    // The database's hash is SHA-256 over the canonical text, recomputed here
    // by hand for one row detail: a third implementation of the encoding.
    let (canon, stored): (String, Vec<u8>) = sqlx::query_as(
        "SELECT concat('17:cohort-ev1:detail', \
                length(run_id::text) || ':' || run_id::text, \
                length(chain_seq::text) || ':' || chain_seq::text, \
                CASE WHEN chain_prev IS NULL THEN '~' ELSE '64:' || encode(chain_prev, 'hex') END, \
                length(detail_id::text) || ':' || detail_id::text, \
                '36:' || retained_entity_id::text, \
                octet_length(entity_type) || ':' || entity_type, \
                octet_length(record_id) || ':' || record_id, \
                '36:' || tenant_id::text, \
                octet_length(action) || ':' || action, \
                '~', \
                length((extract(epoch from created_at) * 1000000)::numeric(30,0)::text) || ':' \
                  || (extract(epoch from created_at) * 1000000)::numeric(30,0)::text), chain_hash \
         FROM sweep_run_row_detail WHERE record_id = '7'",
    )
    .fetch_one(db.pool())
    .await
    .expect("canon");
    use sha2::Digest;
    assert_eq!(sha2::Sha256::digest(canon.as_bytes()).to_vec(), stored);
}

// contract: EV1
#[tokio::test]
async fn an_update_is_named_as_a_changed_row() {
    let (db, _c) = ledger().await;
    let id = detail_id(&db, "7").await;
    db.exec("UPDATE sweep_run_row_detail SET record_id = '70' WHERE record_id = '7'")
        .await;
    db.exec("UPDATE sweep_run_entity_summary SET affected_count = affected_count - 1 WHERE affected_count = 3")
        .await;
    let run: Uuid = sqlx::query_scalar("SELECT run_id FROM sweep_run WHERE chain_seq = 1")
        .fetch_one(db.pool())
        .await
        .expect("run");
    db.exec(&format!(
        "UPDATE sweep_run SET error = 'nothing happened' WHERE run_id = '{run}'"
    ))
    .await;
    db.exec("UPDATE retention_holds SET reason = 'no reason' WHERE record_id = '4'")
        .await;
    let report = check(&db).await;
    let summary: i64 = sqlx::query_scalar(
        "SELECT summary_id FROM sweep_run_entity_summary WHERE affected_count = 2",
    )
    .fetch_one(db.pool())
    .await
    .expect("summary");
    let hold: Uuid =
        sqlx::query_scalar("SELECT hold_id FROM retention_holds WHERE record_id = '4'")
            .fetch_one(db.pool())
            .await
            .expect("hold");
    let mut found = kinds(&report);
    found.sort_by_key(|(t, r, _)| (t.table(), r.clone()));
    let mut want = vec![
        (ChainTable::Run, run.to_string(), ProblemKind::Changed),
        (
            ChainTable::Summary,
            summary.to_string(),
            ProblemKind::Changed,
        ),
        (ChainTable::RowDetail, id.to_string(), ProblemKind::Changed),
        (ChainTable::Hold, hold.to_string(), ProblemKind::Changed),
    ];
    want.sort_by_key(|(t, r, _)| (t.table(), r.clone()));
    assert_eq!(found, want, "{report}");
    assert!(
        report
            .to_string()
            .contains("was changed after it was chained")
    );
}

// contract: EV1
#[tokio::test]
async fn a_delete_is_named_as_missing_links() {
    let (db, _c) = ledger().await;
    let after = detail_id(&db, "6").await;
    let seq: i64 =
        sqlx::query_scalar("SELECT chain_seq FROM sweep_run_row_detail WHERE record_id = '5'")
            .fetch_one(db.pool())
            .await
            .expect("seq");
    db.exec("DELETE FROM sweep_run_row_detail WHERE record_id = '5'")
        .await;
    // The last detail of the second run: the chain is shorter than sealed.
    let second: Uuid = sqlx::query_scalar("SELECT run_id FROM sweep_run WHERE chain_seq = 2")
        .fetch_one(db.pool())
        .await
        .expect("run");
    db.exec("DELETE FROM sweep_run_row_detail WHERE record_id = '103'")
        .await;
    let report = check(&db).await;
    let found = kinds(&report);
    assert!(
        found.contains(&(
            ChainTable::RowDetail,
            after.to_string(),
            ProblemKind::Missing { from: seq, to: seq }
        )),
        "{report}"
    );
    assert!(
        found.contains(&(
            ChainTable::RowDetail,
            format!("run {second}"),
            ProblemKind::Missing { from: 3, to: 3 }
        )),
        "{report}"
    );
    assert_eq!(found.len(), 2, "{report}");

    // A whole run: its rows go, and the run chain has a hole.
    db.exec(
        "DELETE FROM sweep_run_row_detail WHERE run_id = (SELECT run_id FROM sweep_run WHERE chain_seq = 1); \
         DELETE FROM sweep_run_entity_summary WHERE run_id = (SELECT run_id FROM sweep_run WHERE chain_seq = 1); \
         DELETE FROM sweep_run WHERE chain_seq = 1",
    )
    .await;
    let report = check(&db).await;
    assert!(
        kinds(&report).contains(&(
            ChainTable::Run,
            second.to_string(),
            ProblemKind::Missing { from: 1, to: 1 }
        )),
        "{report}"
    );
}

// contract: EV1
#[tokio::test]
async fn an_insert_is_named_as_out_of_order_or_unchained() {
    let (db, _c) = ledger().await;
    let first: Uuid = sqlx::query_scalar("SELECT run_id FROM sweep_run WHERE chain_seq = 1")
        .fetch_one(db.pool())
        .await
        .expect("run");
    // Through the trigger: it is chained, but after the run's seal.
    let forged: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
        "INSERT INTO sweep_run_row_detail (run_id, retained_entity_id, entity_type, record_id, tenant_id, action, created_at) \
         VALUES ('{first}', '{TICKETS}', 'Ticket', '999', '{}', 'Purge', now()) RETURNING detail_id",
        tenant_a()
    )))
    .fetch_one(db.pool())
    .await
    .expect("insert");
    // With Cohort's triggers off (a superuser can): not chained at all.
    let mut conn = db.connect().await;
    sqlx::query("SET session_replication_role = replica")
        .execute(&mut conn)
        .await
        .expect("replica");
    let unchained: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
        "INSERT INTO sweep_run_row_detail (run_id, retained_entity_id, entity_type, record_id, tenant_id, action, created_at) \
         VALUES ('{first}', '{TICKETS}', 'Ticket', '998', '{}', 'Purge', now()) RETURNING detail_id",
        tenant_a()
    )))
    .fetch_one(&mut conn)
    .await
    .expect("insert");
    // A forged link copied from a real one, inserted in the middle: its
    // position is taken, so the unique index refuses it; with a free position
    // past the end its predecessor does not match.
    let forged_copy: i64 = sqlx::query_scalar(
        "INSERT INTO sweep_run_row_detail (run_id, retained_entity_id, entity_type, record_id, tenant_id, action, \
             created_at, chain_seq, chain_prev, chain_hash) \
         SELECT run_id, retained_entity_id, entity_type, '997', tenant_id, action, created_at, 50, chain_prev, chain_hash \
         FROM sweep_run_row_detail WHERE record_id = '2' RETURNING detail_id",
    )
    .fetch_one(&mut conn)
    .await
    .expect("insert");
    let report = check(&db).await;
    let found = kinds(&report);
    assert!(
        found.contains(&(
            ChainTable::RowDetail,
            forged.to_string(),
            ProblemKind::InsertedAfterSeal
        )),
        "{report}"
    );
    assert!(
        found.contains(&(
            ChainTable::RowDetail,
            unchained.to_string(),
            ProblemKind::InsertedAfterSeal
        )),
        "{report}"
    );
    assert!(
        found.contains(&(
            ChainTable::RowDetail,
            forged_copy.to_string(),
            ProblemKind::Changed
        )),
        "{report}"
    );
    // A settled run inserted with the triggers off carries no link.
    sqlx::query(
        "INSERT INTO sweep_run (run_id, run_kind, trigger, dry_run, tenant_id, logical_now, status, started_at, settled_at) \
         VALUES ('00000000-0000-0000-0000-0000000000ff', 'Sweep', 'Manual', false, \
                 '00000000-0000-0000-0000-000000000000', now(), 'Succeeded', now(), now())",
    )
    .execute(&mut conn)
    .await
    .expect("run");
    let report = check(&db).await;
    assert!(
        kinds(&report).contains(&(
            ChainTable::Run,
            "00000000-0000-0000-0000-0000000000ff".to_owned(),
            ProblemKind::Unchained
        )),
        "{report}"
    );
}

// contract: EV1
#[tokio::test]
async fn reordering_is_named_as_out_of_order() {
    let (db, _c) = ledger().await;
    let (a, b): (i64, i64) = (detail_id(&db, "1").await, detail_id(&db, "2").await);
    // Swap the positions of two details (through a free position: the
    // chain's unique index refuses two rows at one position).
    db.exec(&format!(
        "UPDATE sweep_run_row_detail SET chain_seq = -1 WHERE detail_id = {a}; \
         UPDATE sweep_run_row_detail SET chain_seq = 1 WHERE detail_id = {b}; \
         UPDATE sweep_run_row_detail SET chain_seq = 2 WHERE detail_id = {a};"
    ))
    .await;
    let report = check(&db).await;
    let found = kinds(&report);
    assert!(
        found.contains(&(
            ChainTable::RowDetail,
            b.to_string(),
            ProblemKind::OutOfOrder
        )),
        "{report}"
    );
    assert!(
        found.contains(&(
            ChainTable::RowDetail,
            a.to_string(),
            ProblemKind::OutOfOrder
        )),
        "{report}"
    );

    // Runs swapped in the run chain, hashes and all.
    let db2 = ledger().await.0;
    db2.exec(
        "UPDATE sweep_run SET chain_seq = -1 WHERE chain_seq = 1; \
         UPDATE sweep_run SET chain_seq = 1 WHERE chain_seq = 2; \
         UPDATE sweep_run SET chain_seq = 2 WHERE chain_seq = -1;",
    )
    .await;
    let report = check(&db2).await;
    assert!(
        report
            .problems
            .iter()
            .any(|p| p.table == ChainTable::Run && p.kind == ProblemKind::OutOfOrder),
        "{report}"
    );
}

// contract: EV1, H13
#[tokio::test]
async fn a_prune_is_reported_as_pruned_and_a_deleted_active_hold_as_tampering() {
    let db = db_with_tables().await;
    tickets(&db, tenant_a(), 0, 6).await;
    let c = Cohort::builder(db.pool().clone())
        .options(Options {
            inactive_hold_retention: Some(std::time::Duration::from_secs(1)),
            ..Options::default()
        })
        .rules(TestRules::new().with(
            "tickets",
            Capabilities::only(Strategy::Purge),
            Rule::new(Period::days(30), Strategy::Purge),
        ))
        .entity::<Ticket>()
        .build()
        .await
        .expect("model");
    let h1 = hold(&c, &db, "1", tenant_a()).await;
    let h2 = hold(&c, &db, "2", tenant_a()).await;
    let h3 = hold(&c, &db, "3", tenant_a()).await;
    let mut conn = db.pool().acquire().await.expect("conn");
    let past = Utc::now() - Duration::hours(1);
    // Removed twice: the second removal, brought forward, supersedes the first.
    c.holds()
        .remove(&mut conn, h1, Utc::now() + Duration::days(1))
        .await
        .expect("remove");
    c.holds().remove(&mut conn, h1, past).await.expect("remove");
    c.holds().remove(&mut conn, h2, past).await.expect("remove");
    let report = check(&db).await;
    assert!(report.is_intact(), "{report}");
    assert_eq!(report.superseded, 1, "{report}");

    // The prune deletes h1 and h2 (inactive): their links are pruned, not missing.
    let pruned = c.holds().prune(&mut conn).await.expect("prune");
    assert_eq!(pruned, 2);
    let report = check(&db).await;
    assert!(report.is_intact(), "{report}");
    let mut holds: Vec<String> = report.pruned.iter().map(|p| p.hold_id.clone()).collect();
    holds.sort();
    holds.dedup();
    let mut want = vec![h1.to_string(), h2.to_string()];
    want.sort();
    assert_eq!(holds, want, "{report}");

    // A hold deleted while active (plain SQL) is tampering.
    let h4 = hold(&c, &db, "4", tenant_a()).await;
    db.exec(&format!(
        "DELETE FROM retention_holds WHERE hold_id = '{h3}'"
    ))
    .await;
    let report = check(&db).await;
    assert_eq!(
        kinds(&report),
        vec![(
            ChainTable::Hold,
            h3.to_string(),
            ProblemKind::DeletedWhileActive
        )],
        "{report}"
    );
    // Deleted with the triggers off: nothing records it, the hole shows.
    let mut raw = db.connect().await;
    sqlx::query("SET session_replication_role = replica")
        .execute(&mut raw)
        .await
        .expect("replica");
    let _h5 = hold(&c, &db, "5", tenant_a()).await;
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "DELETE FROM retention_holds WHERE hold_id = '{h4}'"
    )))
    .execute(&mut raw)
    .await
    .expect("delete");
    let report = check(&db).await;
    assert!(
        report
            .problems
            .iter()
            .any(|p| p.table == ChainTable::Hold && matches!(p.kind, ProblemKind::Missing { .. })),
        "{report}"
    );
}

// contract: EV1
#[tokio::test]
async fn a_replaced_trigger_function_cannot_forge_a_pass() {
    let (db, _c) = ledger().await;
    // An attacker rewrites the details trigger to store whatever hash the
    // row claims: verification recomputes every hash itself.
    db.exec(
        r#"CREATE OR REPLACE FUNCTION public.sweep_run_row_detail_evidence_chain() RETURNS trigger
           LANGUAGE plpgsql SET search_path = pg_catalog AS $f$
           BEGIN NEW.chain_seq := 1000; NEW.chain_hash := '\x00'; RETURN NEW; END $f$"#,
    )
    .await;
    let mut conn = db.pool().acquire().await.expect("conn");
    let readiness = check_readiness(&mut conn, &SchemaName::public())
        .await
        .expect("readiness");
    assert!(
        readiness
            .problems
            .contains(&ReadinessProblem::ChangedFunction {
                function: "sweep_run_row_detail_evidence_chain"
            }),
        "{readiness}"
    );
    // Verification refuses to run on a schema that is not ready.
    assert!(matches!(
        verify(&mut conn, &SchemaName::public()).await,
        Err(cohort::Error::SchemaNotReady(_))
    ));
    // Written with the forged function, the row is named when the function is put back.
    let first: Uuid = sqlx::query_scalar("SELECT run_id FROM sweep_run WHERE chain_seq = 1")
        .fetch_one(db.pool())
        .await
        .expect("run");
    let forged: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
        "INSERT INTO sweep_run_row_detail (run_id, retained_entity_id, entity_type, record_id, tenant_id, action, created_at) \
         VALUES ('{first}', '{TICKETS}', 'Ticket', '999', '{}', 'Purge', now()) RETURNING detail_id",
        tenant_a()
    )))
    .fetch_one(db.pool())
    .await
    .expect("insert");
    // Migration 4 puts its function back; the later migrations then bring
    // the recorded version back to the current one.
    for m in &migrations(&SchemaName::public())[3..] {
        db.exec(&m.up).await;
    }
    let report = check(&db).await;
    let found = kinds(&report);
    assert!(
        found.contains(&(
            ChainTable::RowDetail,
            forged.to_string(),
            ProblemKind::Changed
        )),
        "{report}"
    );
}

// contract: EV1
#[tokio::test]
async fn concurrent_sweeps_and_hold_creation_keep_every_chain_intact() {
    let db = db_with_tables().await;
    tickets(&db, tenant_a(), 0, 400).await;
    tickets(&db, tenant_b(), 1000, 400).await;
    let c = cohort(&db, 20).await;
    let holds_a = {
        let c = c.clone();
        let db_pool = db.pool().clone();
        tokio::spawn(async move {
            let mut ids = Vec::new();
            for i in (300..400).step_by(10) {
                let mut conn = db_pool.acquire().await.expect("conn");
                if let Ok(h) = c
                    .holds()
                    .create(
                        &mut conn,
                        HoldRequest::new(
                            uuid(TICKETS),
                            i.to_string(),
                            Some(tenant_a()),
                            "race",
                            Utc::now(),
                        ),
                    )
                    .await
                {
                    ids.push(h.hold_id);
                }
            }
            ids
        })
    };
    let holds_b = {
        let c = c.clone();
        let db_pool = db.pool().clone();
        tokio::spawn(async move {
            let mut n = 0;
            for i in (1300..1400).step_by(10) {
                let mut conn = db_pool.acquire().await.expect("conn");
                if c.holds()
                    .create(
                        &mut conn,
                        HoldRequest::new(
                            uuid(TICKETS),
                            i.to_string(),
                            Some(tenant_b()),
                            "race",
                            Utc::now(),
                        ),
                    )
                    .await
                    .is_ok()
                {
                    n += 1;
                }
            }
            n
        })
    };
    let (sa, sb) = (scope(tenant_a()), scope(tenant_b()));
    let (a, b) = tokio::join!(c.sweep(&sa, Utc::now()), c.sweep(&sb, Utc::now()));
    assert_eq!(a.expect("sweep a").status, cohort::RunStatus::Succeeded);
    assert_eq!(b.expect("sweep b").status, cohort::RunStatus::Succeeded);
    let _ = holds_a.await.expect("holds a");
    let _ = holds_b.await.expect("holds b");
    // Two more concurrent sweeps settle while holds are still being created.
    let (a, b) = tokio::join!(c.sweep(&sa, Utc::now()), c.sweep(&sb, Utc::now()));
    a.expect("sweep a");
    b.expect("sweep b");
    let report = check(&db).await;
    assert!(report.is_intact(), "{report}");
    assert_eq!(report.runs, 4);
    assert_eq!(report.head.as_ref().map(|h| h.seq), Some(4));
    let details: i64 = sqlx::query_scalar("SELECT count(*) FROM sweep_run_row_detail")
        .fetch_one(db.pool())
        .await
        .expect("count");
    assert_eq!(report.details as i64, details);
    let holds: i64 = sqlx::query_scalar("SELECT count(*) FROM retention_holds")
        .fetch_one(db.pool())
        .await
        .expect("count");
    assert_eq!(report.hold_links as i64, holds);
    // One hold chain for the entity, positions 1..=n without a gap.
    let seqs: Vec<i64> =
        sqlx::query_scalar("SELECT chain_seq FROM retention_holds ORDER BY chain_seq")
            .fetch_all(db.pool())
            .await
            .expect("seqs");
    assert_eq!(seqs, (1..=holds).collect::<Vec<_>>());
}

// contract: EV1, D3
#[tokio::test]
async fn upgrading_from_version_3_seals_the_rows_already_there() {
    let db = TestDb::new().await;
    let schema = SchemaName::public();
    let all = migrations(&schema);
    for m in &all[..3] {
        db.exec(&m.up).await;
    }
    db.exec(TABLES).await;
    // A ledger written at version 3 (by hand: this library needs version 4).
    let run1 = Uuid::new_v4();
    let run2 = Uuid::new_v4();
    let running = Uuid::new_v4();
    for (run, status, settled) in [
        (run1, "Succeeded", "now() - interval '2 hours'"),
        (run2, "PartiallyFailed", "now() - interval '1 hour'"),
        (running, "Started", "NULL"),
    ] {
        db.exec(&format!(
            "INSERT INTO sweep_run (run_id, run_kind, trigger, dry_run, tenant_id, logical_now, status, started_at, settled_at) \
             VALUES ('{run}', 'Sweep', 'Manual', false, '{t}', now(), '{status}', now() - interval '3 hours', {settled}); \
             INSERT INTO sweep_run_entity_summary (run_id, retained_entity_id, entity_type, category, tenant_id, strategy, \
                 status, affected_count, held_count, skipped_count, null_anchor_count, updated_at) \
             VALUES ('{run}', '{TICKETS}', 'Ticket', 'tickets', '{t}', 'Purge', 'Succeeded', 2, 0, 0, 0, now()); \
             INSERT INTO sweep_run_row_detail (run_id, retained_entity_id, entity_type, record_id, tenant_id, action, created_at) \
             VALUES ('{run}', '{TICKETS}', 'Ticket', '1', '{t}', 'Purge', now()), \
                    ('{run}', '{TICKETS}', 'Ticket', '2', '{t}', 'Purge', now());",
            t = tenant_a()
        ))
        .await;
    }
    tickets(&db, tenant_a(), 0, 3).await;
    db.exec(&format!(
        "INSERT INTO retention_holds (hold_id, retained_entity_id, record_id, tenant_id, reason, created_at, removed_at) \
         VALUES ('{}', '{TICKETS}', '1', '{t}', 'old', now() - interval '1 day', now()), \
                ('{}', '{TICKETS}', '2', '{t}', 'kept', now() - interval '1 day', NULL)",
        Uuid::new_v4(),
        Uuid::new_v4(),
        t = tenant_a()
    ))
    .await;

    let mut conn = db.pool().acquire().await.expect("conn");
    let before = check_readiness(&mut conn, &schema)
        .await
        .expect("readiness");
    assert_eq!(before.installed_version, Some(3));
    assert!(!before.is_ready());

    for m in &all[3..] {
        db.exec(&m.up).await;
    }
    let report = check(&db).await;
    assert!(report.is_intact(), "{report}");
    assert_eq!(report.runs, 2);
    assert_eq!(report.runs_in_progress, 1);
    assert_eq!(report.details, 6);
    assert_eq!(report.hold_links, 3);
    // Sealed in settle order.
    let order: Vec<Uuid> = sqlx::query_scalar(
        "SELECT run_id FROM sweep_run WHERE chain_seq IS NOT NULL ORDER BY chain_seq",
    )
    .fetch_all(db.pool())
    .await
    .expect("order");
    assert_eq!(order, vec![run1, run2]);
    // Re-applying the migration changes nothing.
    let hashes = || async {
        sqlx::query_scalar::<_, Vec<u8>>(
            "SELECT chain_hash FROM sweep_run_row_detail ORDER BY detail_id",
        )
        .fetch_all(db.pool())
        .await
        .expect("hashes")
    };
    let first = hashes().await;
    for m in &all[3..] {
        db.exec(&m.up).await;
    }
    assert_eq!(hashes().await, first);

    // The run still in progress settles through the trigger and joins the chain.
    let c = cohort(&db, 10).await;
    let _ = c;
    db.exec(&format!(
        "UPDATE sweep_run SET status = 'Failed', settled_at = now() WHERE run_id = '{running}'"
    ))
    .await;
    let report = check(&db).await;
    assert!(report.is_intact(), "{report}");
    assert_eq!(report.head.map(|h| h.seq), Some(3));
}

// contract: EV1, D3
#[tokio::test]
async fn readiness_requires_the_chain() {
    let db = TestDb::new().await;
    let schema = SchemaName::public();
    db.exec(&cohort::schema::ddl(&schema)).await;
    db.exec(
        "DROP TRIGGER sweep_run_row_detail_evidence_chain ON public.sweep_run_row_detail; \
         ALTER TABLE public.retention_holds DROP COLUMN chain_bridges; \
         DROP INDEX public.sweep_run_chain_key; \
         ALTER TABLE public.sweep_run DISABLE TRIGGER sweep_run_evidence_chain",
    )
    .await;
    let mut conn = db.pool().acquire().await.expect("conn");
    let report = check_readiness(&mut conn, &schema)
        .await
        .expect("readiness");
    for problem in [
        ReadinessProblem::MissingTrigger {
            table: "sweep_run_row_detail",
            trigger: "sweep_run_row_detail_evidence_chain",
        },
        ReadinessProblem::MissingColumn {
            table: "retention_holds",
            column: "chain_bridges",
        },
        ReadinessProblem::MissingUniqueIndex {
            table: "sweep_run",
            columns: &["chain_seq"],
        },
        ReadinessProblem::DisabledTrigger {
            table: "sweep_run",
            trigger: "sweep_run_evidence_chain".to_owned(),
        },
    ] {
        assert!(report.problems.contains(&problem), "{problem:?}\n{report}");
    }
}

// contract: EV1, A11
#[tokio::test]
async fn settling_an_abandoned_run_seals_it_with_its_summaries() {
    let db = db_with_tables().await;
    let c = Cohort::builder(db.pool().clone())
        .options(Options {
            settle_timeout: std::time::Duration::from_secs(1),
            run_lease: std::time::Duration::from_secs(1),
            ..Options::default()
        })
        .rules(TestRules::new().with(
            "tickets",
            Capabilities::only(Strategy::Purge),
            Rule::new(Period::days(30), Strategy::Purge),
        ))
        .entity::<Ticket>()
        .build()
        .await
        .expect("model");
    // A run whose owner died mid-entity: `Started`, a `Running` summary, details.
    let run = Uuid::new_v4();
    db.exec(&format!(
        "INSERT INTO sweep_run (run_id, run_kind, trigger, dry_run, tenant_id, logical_now, status, started_at) \
         VALUES ('{run}', 'Sweep', 'Scheduled', false, '{t}', now(), 'Started', now() - interval '1 hour'); \
         INSERT INTO sweep_run_entity_summary (run_id, retained_entity_id, entity_type, category, tenant_id, strategy, \
             status, affected_count, held_count, skipped_count, null_anchor_count, updated_at) \
         VALUES ('{run}', '{TICKETS}', 'Ticket', 'tickets', '{t}', 'Purge', 'Running', 2, 0, 0, 0, now()); \
         INSERT INTO sweep_run_row_detail (run_id, retained_entity_id, entity_type, record_id, tenant_id, action, created_at) \
         VALUES ('{run}', '{TICKETS}', 'Ticket', '1', '{t}', 'Purge', now()), \
                ('{run}', '{TICKETS}', 'Ticket', '2', '{t}', 'Purge', now())",
        t = tenant_a()
    ))
    .await;
    let report = check(&db).await;
    assert!(report.is_intact(), "{report}");
    assert_eq!(report.runs_in_progress, 1);
    assert_eq!(report.details, 2);

    assert_eq!(c.settle_abandoned_runs().await.expect("settle"), 1);
    let report = check(&db).await;
    assert!(report.is_intact(), "{report}");
    assert_eq!((report.runs, report.runs_in_progress), (1, 0));
    let (status, summaries, details): (String, i64, i64) = sqlx::query_as(
        "SELECT s.status, r.chain_summaries, r.chain_details FROM sweep_run r \
         JOIN sweep_run_entity_summary s USING (run_id)",
    )
    .fetch_one(db.pool())
    .await
    .expect("sealed");
    assert_eq!((status.as_str(), summaries, details), ("Failed", 1, 2));
}

// contract: EV1, EV2, D6, D8
#[tokio::test]
async fn verify_and_export_ignore_a_hostile_search_path_in_a_quoted_schema() {
    let db = TestDb::new().await;
    let schema = SchemaName::new("Evidence \"X\"").expect("valid");
    db.exec(&cohort::schema::ddl(&schema)).await;
    let run = Uuid::new_v4();
    db.exec(&format!(
        r#"INSERT INTO "Evidence ""X""".sweep_run (run_id, run_kind, trigger, dry_run, tenant_id, logical_now, status, started_at)
           VALUES ('{run}', 'Erasure', 'Manual', false, '{t}', now(), 'Started', now());
           INSERT INTO "Evidence ""X""".sweep_run_row_detail (run_id, retained_entity_id, entity_type, record_id, tenant_id, action, created_at)
           VALUES ('{run}', '{TICKETS}', 'Ticket', 'a,"b"', '{t}', 'Purge', now());
           UPDATE "Evidence ""X""".sweep_run SET status = 'Succeeded', settled_at = now();"#,
        t = tenant_a()
    ))
    .await;
    // Functions the encoding uses, shadowed by a schema searched first.
    db.exec(
        r#"CREATE SCHEMA evil;
           CREATE FUNCTION evil.concat(VARIADIC text[]) RETURNS text LANGUAGE sql AS $$ SELECT 'evil'::text $$;
           CREATE FUNCTION evil.encode(bytea, text) RETURNS text LANGUAGE sql AS $$ SELECT 'evil'::text $$;
           CREATE FUNCTION evil.octet_length(text) RETURNS integer LANGUAGE sql AS 'SELECT 1';
           CREATE FUNCTION evil.convert_to(text, name) RETURNS bytea LANGUAGE sql AS $$ SELECT '\x00'::bytea $$;
           CREATE FUNCTION evil.to_char(timestamp, text) RETURNS text LANGUAGE sql AS $$ SELECT 'evil'::text $$;
           CREATE TABLE evil.sweep_run (LIKE "Evidence ""X""".sweep_run);"#,
    )
    .await;
    let mut conn = db.connect().await;
    sqlx::query("SET search_path = evil, pg_catalog, public")
        .execute(&mut conn)
        .await
        .expect("path");
    let report = verify(&mut conn, &schema).await.expect("verify");
    assert!(report.is_intact(), "{report}");
    assert_eq!((report.runs, report.details), (1, 1));
    let mut out = Vec::new();
    cohort::evidence::export(
        &mut conn,
        &schema,
        cohort::evidence::ExportRecords::RowDetails,
        cohort::evidence::TimeRange::all(),
        cohort::evidence::ExportFormat::Csv,
        &mut out,
    )
    .await
    .expect("export");
    let csv = String::from_utf8(out).expect("utf-8");
    assert!(csv.contains(",\"a,\"\"b\"\"\","), "{csv}");
    assert!(!csv.contains("evil"), "{csv}");
    // A tampered row is still found through the hostile path.
    db.exec(r#"UPDATE "Evidence ""X""".sweep_run_row_detail SET action = 'SoftDelete'"#)
        .await;
    let report = verify(&mut conn, &schema).await.expect("verify");
    assert_eq!(report.problems.len(), 1, "{report}");
    assert_eq!(report.problems[0].kind, ProblemKind::Changed);
}

// contract: EV1
#[tokio::test]
async fn a_scrubbed_payload_is_not_tampering_and_a_changed_one_is() {
    let db = db_with_tables().await;
    let run = Uuid::new_v4();
    db.exec(&format!(
        "INSERT INTO sweep_run (run_id, run_kind, trigger, dry_run, tenant_id, logical_now, status, started_at) \
         VALUES ('{run}', 'Sweep', 'Manual', false, '{t}', now(), 'Started', now()); \
         INSERT INTO sweep_run_row_detail (run_id, retained_entity_id, entity_type, record_id, tenant_id, action, \
             captured_payload, created_at) \
         VALUES ('{run}', '{TICKETS}', 'Ticket', '1', '{t}', 'Purge', '{{\"audit\": {{\"body\": \"secret\"}}}}', now()), \
                ('{run}', '{TICKETS}', 'Ticket', '2', '{t}', 'Purge', '{{\"audit\": {{\"body\": \"other\"}}}}', now()); \
         UPDATE sweep_run SET status = 'Succeeded', settled_at = now() WHERE run_id = '{run}'",
        t = tenant_a()
    ))
    .await;
    assert!(check(&db).await.is_intact());
    // The row-handler queue clears delivered payloads: the link covers the
    // payload's digest, not the payload.
    db.exec("UPDATE sweep_run_row_detail SET captured_payload = NULL WHERE record_id = '1'")
        .await;
    let report = check(&db).await;
    assert!(report.is_intact(), "{report}");
    // A payload changed (or put back different) is tampering.
    let id = detail_id(&db, "2").await;
    db.exec(
        "UPDATE sweep_run_row_detail SET captured_payload = '{\"audit\": {\"body\": \"forged\"}}' \
         WHERE record_id = '2'",
    )
    .await;
    let report = check(&db).await;
    assert_eq!(
        kinds(&report),
        vec![(ChainTable::RowDetail, id.to_string(), ProblemKind::Changed)],
        "{report}"
    );
}
