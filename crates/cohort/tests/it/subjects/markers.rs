//! Change-stream markers (contract SA4), read back through a real logical
//! replication slot with `test_decoding` on a server with `wal_level =
//! logical` (`TestDb::logical`: the shared server when it has that level,
//! otherwise a private cluster started with it).

use std::collections::BTreeMap;

use chrono::{DateTime, TimeZone, Utc};
use cohort::schema::{SchemaName, ddl};
use cohort::{
    Capabilities, Cohort, ErasureRequest, MARKER_PREFIX, Options, Period, Rule, Scope, Strategy,
    TenantContext,
};
use uuid::Uuid;

use crate::support::{BuildEngine, TestDb, TestRules};

/// A tenant-scoped type purged after 30 days, erasable by its owner.
#[derive(cohort::Retained)]
#[cohort(
    category = "notes",
    anchor = "created_at",
    id = "5b0d3c2e-8f41-4a6b-9c7d-1e2f3a4b5c61",
    table = "marked_notes"
)]
#[allow(dead_code, reason = "mirrors the table; Cohort reads its descriptor")]
struct MarkedNote {
    id: i64,
    tenant_id: Uuid,
    created_at: DateTime<Utc>,
    #[cohort(erasure_subject)]
    owner_id: Uuid,
    body: String,
}

/// A tenantless type on a table partitioned by month on its anchor.
#[derive(cohort::Retained)]
#[cohort(
    category = "readings",
    anchor = "created_at",
    id = "6c1e4d3f-9a52-4b7c-8d8e-2f3a4b5c6d72",
    table = "marked_readings",
    tenantless
)]
#[allow(dead_code, reason = "mirrors the table; Cohort reads its descriptor")]
struct MarkedReading {
    id: i64,
    created_at: DateTime<Utc>,
}

const TABLES: &str = r#"
CREATE TABLE public.marked_notes (id bigint PRIMARY KEY, tenant_id uuid NOT NULL,
    created_at timestamptz NOT NULL, owner_id uuid NOT NULL, body text NOT NULL);
CREATE INDEX ON public.marked_notes (tenant_id, created_at, id);
CREATE TABLE public.marked_readings (id bigint NOT NULL, created_at timestamptz NOT NULL,
    PRIMARY KEY (id, created_at)) PARTITION BY RANGE (created_at);
CREATE TABLE public.marked_readings_2025_01 PARTITION OF public.marked_readings
    FOR VALUES FROM ('2025-01-01 00:00+00') TO ('2025-02-01 00:00+00');
CREATE TABLE public.marked_readings_2025_07 PARTITION OF public.marked_readings
    FOR VALUES FROM ('2025-07-01 00:00+00') TO ('2025-08-01 00:00+00');
CREATE INDEX ON public.marked_readings (created_at, id);
-- The host's own rule: a note whose body is 'poison' cannot be deleted,
-- checked at commit (a deferred constraint trigger), so the batch fails
-- after its statement and its marker, when it commits.
CREATE FUNCTION public.refuse_poison() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF OLD.body = 'poison' THEN RAISE EXCEPTION 'this note may not go'; END IF;
    RETURN NULL;
END $$;
CREATE CONSTRAINT TRIGGER refuse_poison AFTER DELETE ON public.marked_notes
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION public.refuse_poison();
"#;

fn now() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2025, 7, 15, 0, 0, 0).unwrap()
}

fn tenant() -> Uuid {
    Uuid::from_u128(0x11)
}

fn owner() -> Uuid {
    Uuid::from_u128(0x22)
}

fn rules() -> TestRules {
    TestRules::new()
        .with(
            "notes",
            Capabilities::only(Strategy::Purge),
            Rule::new(Period::days(30), Strategy::Purge),
        )
        .with(
            "readings",
            Capabilities::only(Strategy::Purge),
            Rule::new(Period::days(90), Strategy::Purge),
        )
}

async fn note(db: &TestDb, id: i64, owner: Uuid, days_old: i64, body: &str) {
    sqlx::query("INSERT INTO marked_notes VALUES ($1, $2, $3, $4, $5)")
        .bind(id)
        .bind(tenant())
        .bind(now() - chrono::Duration::days(days_old))
        .bind(owner)
        .bind(body)
        .execute(db.pool())
        .await
        .expect("note");
}

/// A database with `wal_level = logical`, Cohort's tables and the models'.
async fn setup() -> TestDb {
    let db = TestDb::logical().await;
    db.exec(&ddl(&SchemaName::public())).await;
    db.exec(TABLES).await;
    db
}

/// A `test_decoding` slot in `db` (slots are cluster-wide: named after it).
async fn create_slot(db: &TestDb) -> String {
    let slot = format!("s_{}", db.name());
    sqlx::query("SELECT pg_create_logical_replication_slot($1, 'test_decoding')")
        .bind(&slot)
        .execute(db.pool())
        .await
        .expect("create the slot");
    slot
}

/// [`decode`], then the slot is dropped (a database a slot belongs to
/// cannot be dropped).
async fn decode_and_drop(db: &TestDb, slot: &str) -> Vec<Decoded> {
    let decoded = decode(db, slot).await;
    sqlx::query("SELECT pg_drop_replication_slot($1)")
        .bind(slot)
        .execute(db.pool())
        .await
        .expect("drop the slot");
    decoded
}

/// One decoded transaction: its row changes per table and its messages.
#[derive(Debug, Default)]
struct Decoded {
    /// `"<table>: <kind>"` -> count (e.g. `"public.marked_notes: DELETE"`).
    changes: BTreeMap<String, u64>,
    /// Cohort's messages in it, parsed.
    markers: Vec<serde_json::Value>,
    /// Messages with another prefix, or not transactional.
    other_messages: Vec<String>,
}

/// Everything the slot decoded since it was made, per transaction, in
/// commit order.
async fn decode(db: &TestDb, slot: &str) -> Vec<Decoded> {
    // Decoding reads only WAL that is flushed, and the private cluster runs
    // with `synchronous_commit = off`: commit one transaction that waits
    // for its flush (and so for every record before it): it must write
    // WAL, or its commit is not flushed either.
    sqlx::raw_sql(
        "BEGIN; SET LOCAL synchronous_commit = on; \
         SELECT pg_logical_emit_message(true, 'test-flush', ''); COMMIT;",
    )
    .execute(db.pool())
    .await
    .expect("flush the WAL");
    let rows: Vec<(String, String)> = sqlx::query_as(
        "SELECT xid::text, data FROM pg_logical_slot_get_changes($1, NULL, NULL, \
             'include-xids', '1', 'skip-empty-xacts', '0')",
    )
    .bind(slot)
    .fetch_all(db.pool())
    .await
    .expect("decode the slot");
    let mut out = Vec::new();
    let mut current: Option<Decoded> = None;
    for (_, data) in rows {
        if data.starts_with("BEGIN") {
            current = Some(Decoded::default());
        } else if data.starts_with("COMMIT") {
            out.extend(current.take());
        } else if let Some(tx) = current.as_mut() {
            if let Some(rest) = data.strip_prefix("message: ") {
                let transactional = rest.starts_with("transactional: 1 ");
                let prefix_ok = rest.contains(&format!("prefix: {MARKER_PREFIX},"));
                match rest.split_once("content:") {
                    Some((_, content)) if transactional && prefix_ok => {
                        tx.markers
                            .push(serde_json::from_str(content).expect("a marker is JSON"));
                    }
                    _ => tx.other_messages.push(data.clone()),
                }
            } else if let Some(rest) = data.strip_prefix("table ") {
                // "table public.marked_notes: DELETE: id[bigint]:1 ..."
                let mut parts = rest.splitn(3, ": ");
                let table = parts.next().unwrap_or_default();
                let kind = parts.next().unwrap_or_default();
                *tx.changes.entry(format!("{table}: {kind}")).or_default() += 1;
            }
        } else {
            panic!("decoded data outside a transaction: {data}");
        }
    }
    out
}

// contract: SA4
#[tokio::test]
async fn each_committed_batch_carries_one_marker_in_its_transaction_and_a_rolled_back_batch_none() {
    let db = setup().await;
    let options = Options {
        batch_size: 10,
        change_stream_markers: true,
        ..Options::default()
    };
    let cohort: Cohort = Cohort::builder(db.engine_pool().clone())
        .options(options)
        .rules(rules())
        .subject_key(b"markers test key".to_vec())
        .entity::<MarkedNote>()
        .entity::<MarkedReading>()
        .build_engine(&db)
        .await
        .expect("model");
    // 25 old notes (three batches of 10, 10, 5), 3 young ones; two old
    // readings in a wholly expired partition, one young.
    for id in 1..=25 {
        note(&db, id, Uuid::from_u128(0x99), 40, "old").await;
    }
    for id in 26..=28 {
        note(&db, id, owner(), 2, "young").await;
    }
    db.exec(
        "INSERT INTO marked_readings VALUES (1, '2025-01-10 00:00+00'), (2, '2025-01-20 00:00+00'), (3, '2025-07-10 00:00+00')",
    )
    .await;

    let slot = create_slot(&db).await;

    // A host's own deletion: no marker.
    db.exec("DELETE FROM marked_notes WHERE id = 28").await;
    let scope = Scope::Tenant(TenantContext::new(tenant()));
    let sweep = cohort.sweep(&scope, now()).await.expect("sweep");
    assert_eq!(sweep.affected(), 25);
    let tenantless = cohort
        .sweep(&Scope::Tenantless, now())
        .await
        .expect("tenantless sweep");
    assert_eq!(tenantless.affected(), 2, "{tenantless:?}");
    // A batch the host's trigger fails at commit, after the batch wrote its
    // marker: its rows stay, and so must its marker stay out of the stream.
    for id in 30..=33 {
        note(&db, id, Uuid::from_u128(0x99), 40, "old").await;
    }
    note(&db, 34, Uuid::from_u128(0x99), 40, "poison").await;
    let failed = cohort.sweep(&scope, now()).await.expect("sweep");
    assert_eq!(failed.entity_failures.len(), 1, "{failed:?}");
    assert_eq!(failed.affected(), 0);
    let left: i64 = sqlx::query_scalar("SELECT count(*) FROM marked_notes WHERE id >= 30")
        .fetch_one(db.pool())
        .await
        .expect("count");
    assert_eq!(left, 5, "the failed batch rolled back");
    // An erasure: one batch of the owner's two young notes.
    let erasure = cohort
        .erase(&scope, now(), ErasureRequest::new(owner()))
        .await
        .expect("erase");
    assert_eq!(erasure.affected(), 2);

    let decoded = decode_and_drop(&db, &slot).await;

    let notes_deleted = "public.marked_notes: DELETE";
    // Every transaction that deleted notes, in commit order, with its markers.
    let deleting: Vec<&Decoded> = decoded
        .iter()
        .filter(|t| t.changes.contains_key(notes_deleted))
        .collect();
    assert_eq!(
        deleting.len(),
        5,
        "the host's delete, three sweep batches, one erasure batch"
    );
    // The host's own deletion carries none.
    assert!(deleting[0].markers.is_empty(), "{:?}", deleting[0]);
    assert_eq!(deleting[0].changes[notes_deleted], 1);
    // Each of Cohort's carries exactly one, naming its run, kind, type,
    // strategy, number and the rows it deleted, which the transaction holds.
    for (i, (tx, run, kind, batch, rows)) in [
        (deleting[1], sweep.run_id, "sweep", 1, 10),
        (deleting[2], sweep.run_id, "sweep", 2, 10),
        (deleting[3], sweep.run_id, "sweep", 3, 5),
        (deleting[4], erasure.run_id, "erasure", 1, 2),
    ]
    .into_iter()
    .enumerate()
    {
        assert_eq!(tx.markers.len(), 1, "transaction {i}: {tx:?}");
        let m = &tx.markers[0];
        assert_eq!(m["run"], run.to_string(), "{m}");
        assert_eq!(m["kind"], kind, "{m}");
        assert_eq!(m["type"], "MarkedNote", "{m}");
        assert_eq!(m["entity"], "5b0d3c2e-8f41-4a6b-9c7d-1e2f3a4b5c61", "{m}");
        assert_eq!(m["table"], "public.marked_notes", "{m}");
        assert_eq!(m["strategy"], "purge", "{m}");
        assert_eq!(m["batch"], batch, "{m}");
        assert_eq!(m["rows"], rows, "{m}");
        assert_eq!(tx.changes[notes_deleted], rows, "{tx:?}");
        assert!(tx.other_messages.is_empty(), "{tx:?}");
    }
    // The expired partition: dropped by the administrative role (no row
    // changes are decoded for a DROP, so the marker is what tells a
    // consumer the rows went); a least-privileged role may not drop it, and
    // its rows go through one batch instead.
    let readings: Vec<&serde_json::Value> = decoded
        .iter()
        .flat_map(|t| &t.markers)
        .filter(|m| m["type"] == "MarkedReading")
        .collect();
    assert_eq!(readings.len(), 1, "{decoded:?}");
    let m = readings[0];
    assert_eq!(m["run"], tenantless.run_id.to_string(), "{m}");
    assert_eq!(m["table"], "public.marked_readings", "{m}");
    assert_eq!(m["rows"], 2, "{m}");
    if db.engine_role().is_none() {
        assert_eq!(m["partition"], "public.marked_readings_2025_01", "{m}");
        assert!(m.get("batch").is_none(), "{m}");
    } else {
        assert_eq!(m["batch"], 1, "{m}");
        assert!(m.get("partition").is_none(), "{m}");
    }
    // Nothing else: no marker of the failed run, none outside Cohort's
    // batches (the ledger's own transactions carry none).
    let all: Vec<&serde_json::Value> = decoded.iter().flat_map(|t| &t.markers).collect();
    assert_eq!(all.len(), 5, "{all:?}");
    assert!(
        all.iter().all(|m| m["run"] != failed.run_id.to_string()),
        "a rolled-back batch left a marker: {all:?}"
    );
}

// contract: SA4
#[tokio::test]
async fn markers_are_off_by_default() {
    let db = setup().await;
    let cohort: Cohort = Cohort::builder(db.engine_pool().clone())
        .rules(rules())
        .entity::<MarkedNote>()
        .entity::<MarkedReading>()
        .build_engine(&db)
        .await
        .expect("model");
    for id in 1..=3 {
        note(&db, id, owner(), 40, "old").await;
    }
    let slot = create_slot(&db).await;
    let scope = Scope::Tenant(TenantContext::new(tenant()));
    assert_eq!(
        cohort.sweep(&scope, now()).await.expect("sweep").affected(),
        3
    );
    let decoded = decode_and_drop(&db, &slot).await;
    assert!(
        decoded
            .iter()
            .any(|t| t.changes.contains_key("public.marked_notes: DELETE")),
        "{decoded:?}"
    );
    assert!(decoded.iter().all(|t| t.markers.is_empty()), "{decoded:?}");
}
