//! Subject access (contract SA1): every row an erasure of the subject would
//! match, across types and subject columns, held rows marked, exported as
//! JSON Lines or CSV and recorded without the subject in clear.

use chrono::{DateTime, TimeZone, Utc};
use cohort::evidence::{ExportFormat, subject_hmac};
use cohort::holds::HoldRequest;
use cohort::{
    AccessRequest, Capabilities, Cohort, Error, Period, Rule, Scope, Strategy, TenantContext,
};
use uuid::Uuid;

use crate::support::models::*;
use crate::support::{TestDb, TestRules, db_with_cohort};

const KEY: &[u8] = b"subject access test key";

fn tenant() -> Uuid {
    Uuid::from_u128(0xacc)
}

fn other_tenant() -> Uuid {
    Uuid::from_u128(0xacd)
}

fn scope() -> Scope {
    Scope::Tenant(TenantContext::new(tenant()))
}

fn ann() -> Uuid {
    Uuid::from_u128(0xa11)
}

fn bob() -> Uuid {
    Uuid::from_u128(0xb0b)
}

fn now() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2025, 7, 15, 0, 0, 0).unwrap()
}

/// A tenant-scoped type on a table partitioned by month, erasable by owner.
#[derive(cohort::Retained)]
#[cohort(
    category = "visits",
    anchor = "created_at",
    id = "8d2f5e4a-0b63-4c8d-9e9f-3a4b5c6d7e83",
    table = "access_visits"
)]
#[allow(dead_code, reason = "mirrors the table; Cohort reads its descriptor")]
struct AccessVisit {
    id: i64,
    tenant_id: Uuid,
    created_at: DateTime<Utc>,
    #[cohort(erasure_subject)]
    visitor_id: Uuid,
    pages: Vec<String>,
}

const VISITS: &str = r#"
CREATE TABLE public.access_visits (id bigint NOT NULL, tenant_id uuid NOT NULL,
    created_at timestamptz NOT NULL, visitor_id uuid NOT NULL, pages text[],
    PRIMARY KEY (id, created_at)) PARTITION BY RANGE (created_at);
CREATE TABLE public.access_visits_2025_06 PARTITION OF public.access_visits
    FOR VALUES FROM ('2025-06-01 00:00+00') TO ('2025-07-01 00:00+00');
CREATE TABLE public.access_visits_2025_07 PARTITION OF public.access_visits
    FOR VALUES FROM ('2025-07-01 00:00+00') TO ('2025-08-01 00:00+00');
"#;

fn rules() -> TestRules {
    let purge = |days| Rule::new(Period::days(days), Strategy::Purge);
    TestRules::new()
        .with("user-data", Capabilities::only(Strategy::Purge), purge(30))
        .with("messages", Capabilities::only(Strategy::Purge), purge(30))
        .with("visits", Capabilities::only(Strategy::Purge), purge(30))
}

async fn handle(db: &TestDb, key: Option<&[u8]>) -> Cohort {
    let mut b = Cohort::builder(db.pool().clone())
        .rules(rules())
        .entity::<UserRecord>()
        .entity::<Message>()
        .entity::<AccessVisit>();
    if let Some(key) = key {
        b = b.subject_key(key);
    }
    b.build().await.expect("model")
}

async fn setup() -> TestDb {
    let (db, _) = db_with_cohort("public").await;
    db.exec(TABLES).await;
    db.exec(VISITS).await;
    let t = tenant();
    let o = other_tenant();
    let (a, b) = (ann(), bob());
    db.exec(&format!(
        "INSERT INTO user_records (id, tenant_id, created_at, user_id, delegate_user_id, notes) VALUES \
           (1, '{t}', '2020-01-01 00:00+00', '{a}', NULL, 'ann''s, \"quoted\" note'), \
           (2, '{t}', NULL, '{b}', '{a}', NULL), \
           (3, '{t}', '2025-07-01 00:00+00', '{b}', NULL, 'bob only'), \
           (4, '{o}', '2020-01-01 00:00+00', '{a}', NULL, 'another tenant'); \
         INSERT INTO messages (id, tenant_id, sent_at, sender_email) VALUES \
           (10, '{t}', '2025-07-02 00:00+00', '{a}'), \
           (11, '{t}', '2025-07-02 00:00+00', 'ann@example.com'); \
         INSERT INTO access_visits VALUES \
           (20, '{t}', '2025-06-10 00:00+00', '{a}', ARRAY['/home', '/a,b']), \
           (21, '{t}', '2025-07-10 00:00+00', '{a}', NULL), \
           (22, '{t}', '2025-07-11 00:00+00', '{b}', NULL);"
    ))
    .await;
    db
}

async fn recorded(db: &TestDb) -> Vec<serde_json::Value> {
    sqlx::query_scalar("SELECT row_to_json(a) FROM retention_subject_access a ORDER BY recorded_at")
        .fetch_all(db.pool())
        .await
        .expect("records")
}

// contract: SA1
#[tokio::test]
async fn an_export_holds_every_row_erasure_would_match_held_rows_marked_and_is_recorded_keyed() {
    let db = setup().await;
    let cohort = handle(&db, Some(KEY)).await;
    // Row 1 is held: exported all the same, and marked.
    let mut conn = db.pool().acquire().await.expect("conn");
    cohort
        .holds()
        .create(
            &mut conn,
            HoldRequest::of::<UserRecord>("1", Some(tenant()), "litigation", Utc::now()),
        )
        .await
        .expect("hold");
    drop(conn);

    let mut out = Vec::new();
    let export = cohort
        .subject_export(
            &scope(),
            now(),
            AccessRequest::new(ann(), "ticket DSAR-7"),
            &mut out,
        )
        .await
        .expect("export");
    let text = String::from_utf8(out).expect("utf-8");
    let lines: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).expect("one JSON object per line"))
        .collect();
    let keys: Vec<(String, String, bool)> = lines
        .iter()
        .map(|l| {
            (
                l["type"].as_str().expect("type").to_owned(),
                l["record_id"].as_str().expect("record id").to_owned(),
                l["held"].as_bool().expect("held"),
            )
        })
        .collect();
    // Both subject columns of user_records (user and delegate), the text
    // column of messages, both partitions of visits; not bob's rows, not
    // the other tenant's, not the message whose sender is not the subject.
    assert_eq!(
        keys,
        [
            ("UserRecord".to_owned(), "1".to_owned(), true),
            ("UserRecord".to_owned(), "2".to_owned(), false),
            ("Message".to_owned(), "10".to_owned(), false),
            ("AccessVisit".to_owned(), "20".to_owned(), false),
            ("AccessVisit".to_owned(), "21".to_owned(), false),
        ]
    );
    // Every column, with its name and value, in table order.
    let first = &lines[0];
    assert_eq!(first["table"], "public.user_records");
    assert_eq!(first["row"]["notes"], "ann's, \"quoted\" note");
    assert_eq!(first["row"]["user_id"], ann().to_string());
    assert_eq!(first["row"]["delegate_user_id"], serde_json::Value::Null);
    let columns: Vec<&String> = first["row"].as_object().expect("object").keys().collect();
    assert!(columns.contains(&&"is_deleted".to_owned()), "{columns:?}");
    assert_eq!(lines[3]["table"], "public.access_visits");
    assert_eq!(
        lines[3]["row"]["pages"],
        serde_json::json!(["/home", "/a,b"])
    );

    assert_eq!((export.rows, export.held), (5, 1));
    let per_type: Vec<(&str, u64, u64)> = export
        .types
        .iter()
        .map(|t| (t.entity_type, t.rows, t.held))
        .collect();
    assert_eq!(
        per_type,
        [
            ("UserRecord", 2, 1),
            ("Message", 1, 0),
            ("AccessVisit", 2, 0)
        ]
    );

    // Recorded: who asked, when, the counts, the subject only as its
    // keyed hash.
    let records = recorded(&db).await;
    assert_eq!(records.len(), 1);
    let r = &records[0];
    assert_eq!(r["access_id"], export.access_id.to_string());
    assert_eq!(r["requested_by"], "ticket DSAR-7");
    assert_eq!(r["tenant_id"], tenant().to_string());
    assert_eq!(r["format"], "jsonl");
    assert_eq!(r["row_count"], 5);
    assert_eq!(r["held_count"], 1);
    assert_eq!(
        r["subject_hmac"],
        format!("\\x{}", subject_hmac(KEY, &ann().to_string()))
    );
    assert_eq!(r["type_counts"][0]["entity_type"], "UserRecord");
    assert!(!r.to_string().contains(&ann().to_string()), "{r}");

    // Nothing changed: access is not erasure.
    let rows: i64 = sqlx::query_scalar("SELECT count(*) FROM user_records")
        .fetch_one(db.pool())
        .await
        .expect("count");
    assert_eq!(rows, 4);
}

// contract: SA1
#[tokio::test]
async fn a_csv_export_has_one_line_per_column_with_type_table_and_column_names() {
    let db = setup().await;
    let cohort = handle(&db, Some(KEY)).await;
    let mut out = Vec::new();
    let export = cohort
        .subject_export(
            &scope(),
            now(),
            AccessRequest::new(ann(), "dpo@example.com").format(ExportFormat::Csv),
            &mut out,
        )
        .await
        .expect("export");
    assert_eq!(export.rows, 5);
    let text = String::from_utf8(out).expect("utf-8");
    let mut lines = text.split("\r\n");
    assert_eq!(lines.next(), Some("type,table,record_id,held,column,value"));
    let body: Vec<&str> = lines.filter(|l| !l.is_empty()).collect();
    // user_records has 8 columns, messages 4, access_visits 5.
    assert_eq!(body.len(), 2 * 8 + 4 + 2 * 5, "{text}");
    assert_eq!(body[0], "UserRecord,public.user_records,1,false,id,1");
    assert!(
        body.contains(
            &"UserRecord,public.user_records,1,false,notes,\"ann's, \"\"quoted\"\" note\""
        ),
        "{text}"
    );
    assert!(
        body.contains(
            &"AccessVisit,public.access_visits,20,false,pages,\"[\"\"/home\"\",\"\"/a,b\"\"]\""
        ),
        "{text}"
    );
    assert_eq!(recorded(&db).await[0]["format"], "csv");
}

// contract: SA1
#[tokio::test]
async fn bad_requests_are_refused_with_typed_errors_and_record_nothing() {
    let db = setup().await;
    let keyed = handle(&db, Some(KEY)).await;
    let mut out = Vec::new();
    let too_long = "x".repeat(cohort::MAX_SUBJECT_BYTES + 1);
    for subject in ["", too_long.as_str(), "nul\0byte"] {
        let err = keyed
            .subject_export(
                &scope(),
                now(),
                AccessRequest::new(subject, "dpo"),
                &mut out,
            )
            .await
            .expect_err("bad subject");
        assert!(matches!(err, Error::InvalidSubject { .. }), "{err:?}");
    }
    let err = keyed
        .subject_export(&scope(), now(), AccessRequest::new(ann(), "  "), &mut out)
        .await
        .expect_err("no requester");
    assert!(matches!(err, Error::InvalidRequester), "{err:?}");
    let unkeyed = handle(&db, None).await;
    let err = unkeyed
        .subject_export(&scope(), now(), AccessRequest::new(ann(), "dpo"), &mut out)
        .await
        .expect_err("no key");
    assert!(matches!(err, Error::SubjectKeyMissing), "{err:?}");
    // A destination that fails: the export is not recorded.
    struct Broken;
    impl std::io::Write for Broken {
        fn write(&mut self, _: &[u8]) -> std::io::Result<usize> {
            Err(std::io::Error::other("disk full"))
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let err = keyed
        .subject_export(
            &scope(),
            now(),
            AccessRequest::new(ann(), "dpo"),
            &mut Broken,
        )
        .await
        .expect_err("broken writer");
    assert!(matches!(err, Error::ExportWrite(_)), "{err:?}");
    assert!(out.is_empty());
    assert!(recorded(&db).await.is_empty());
}
