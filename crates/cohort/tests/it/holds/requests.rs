//! What hold requests and host deletions accept (contract H15): a row that
//! exists only in another tenant is answered exactly as one that exists
//! nowhere, reasons are bounded in bytes, times outside PostgreSQL's range
//! are refused; and a second removal moves a scheduled removal forward, never
//! back (H13).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::support::fixtures::{
    db_with_tables, note_days_old, note_exists, now_s, pg_earliest, readme_rules, scope_a,
    tenant_a, tenant_b,
};
use crate::support::models::*;
use crate::support::{TestDb, TestRules, count};
use chrono::{DateTime, Duration, Utc};
use cohort::holds::{
    DeletionError, DeletionOutcome, Hold, HoldError, HoldFilter, HoldRequest, MAX_REASON_BYTES,
    Target,
};
use cohort::{Capabilities, Cohort, ErasureRequest, Error, Period, Rule, Strategy, SweepOptions};
use uuid::Uuid;

async fn setup() -> (TestDb, Cohort) {
    let db = db_with_tables().await;
    let rules = TestRules::new().with(
        "session-notes",
        Capabilities::only(Strategy::Purge),
        Rule::new(Period::days(30), Strategy::Purge),
    );
    let cohort = Cohort::builder(db.pool().clone())
        .rules(rules)
        .entity::<SessionNote>()
        .build()
        .await
        .expect("model");
    (db, cohort)
}

async fn note(db: &TestDb, tenant: Uuid) -> Uuid {
    let id = Uuid::new_v4();
    sqlx::query(
        "INSERT INTO session_notes (id, tenant_id, created_at, body) VALUES ($1, $2, now() - interval '40 days', 'private')",
    )
    .bind(id)
    .bind(tenant)
    .execute(db.pool())
    .await
    .expect("insert note");
    id
}

async fn holds_count(db: &TestDb) -> i64 {
    count(db, "SELECT count(*) FROM retention_holds").await
}

fn request(record: impl Into<String>, tenant: Uuid, reason: &str) -> HoldRequest {
    HoldRequest::new(uuid(NOTE_ID), record, Some(tenant), reason, Utc::now())
}

async fn create(db: &TestDb, cohort: &Cohort, r: HoldRequest) -> Result<Hold, Error> {
    let mut conn = db.pool().acquire().await.expect("connection");
    cohort.holds().create(&mut conn, r).await
}

/// A host deletion of one note by `tenant`; returns the outcome and whether
/// the callback ran.
async fn delete(
    db: &TestDb,
    cohort: &Cohort,
    id: Uuid,
    tenant: Uuid,
) -> (
    Result<DeletionOutcome<()>, DeletionError<sqlx::Error>>,
    bool,
) {
    let called = Arc::new(AtomicBool::new(false));
    let flag = called.clone();
    let mut conn = db.pool().acquire().await.expect("connection");
    let outcome = cohort
        .deletion()
        .execute(
            &mut conn,
            &[Target::new(uuid(NOTE_ID), id.to_string(), Some(tenant))],
            move |c| {
                Box::pin(async move {
                    flag.store(true, Ordering::SeqCst);
                    sqlx::query("DELETE FROM session_notes WHERE id = $1")
                        .bind(id)
                        .execute(&mut *c)
                        .await?;
                    Ok::<_, sqlx::Error>(())
                })
            },
        )
        .await;
    (outcome, called.load(Ordering::SeqCst))
}

// contract: H15, H10
#[tokio::test]
async fn hold_creation_answers_another_tenants_row_exactly_as_a_row_that_does_not_exist() {
    let (db, cohort) = setup().await;
    let theirs = note(&db, tenant_b()).await;
    let nowhere = Uuid::new_v4();
    let mut answers: Vec<Error> = Vec::new();
    for id in [theirs, nowhere] {
        let r = request(id.to_string(), tenant_a(), "litigation");
        answers.push(create(&db, &cohort, r).await.expect_err("refused"));
    }
    for e in &answers {
        assert!(
            matches!(
                e,
                Error::Hold(HoldError::NoSuchRow { entity_id }) if *entity_id == uuid(NOTE_ID)
            ),
            "{e:?}"
        );
    }
    assert_eq!(
        answers[0].to_string(),
        answers[1].to_string(),
        "the same words for both"
    );
    assert_eq!(holds_count(&db).await, 0);
    // Control: the owner's tenant can hold it.
    create(
        &db,
        &cohort,
        request(theirs.to_string(), tenant_b(), "litigation"),
    )
    .await
    .expect("tenant B holds its own row");
}

// contract: H15, DL1
#[tokio::test]
async fn host_deletion_answers_another_tenants_row_exactly_as_a_row_that_does_not_exist() {
    let (db, cohort) = setup().await;
    let theirs = note(&db, tenant_b()).await;
    let theirs_held = note(&db, tenant_b()).await;
    create(
        &db,
        &cohort,
        request(theirs_held.to_string(), tenant_b(), "litigation"),
    )
    .await
    .expect("tenant B's hold");
    let nowhere = Uuid::new_v4();
    let mut texts = Vec::new();
    // A row of another tenant, held or not, is answered as a row that does
    // not exist: never Protected, which would tell tenant A about B's hold.
    for id in [theirs, theirs_held, nowhere] {
        let (outcome, called) = delete(&db, &cohort, id, tenant_a()).await;
        let err = outcome.expect_err("refused");
        assert!(
            matches!(
                &err,
                DeletionError::Cohort(Error::Hold(HoldError::NoSuchRow { entity_id }))
                    if *entity_id == uuid(NOTE_ID)
            ),
            "{err:?}"
        );
        assert!(!called, "the callback is not called");
        texts.push(err.to_string());
    }
    assert_eq!(texts[0], texts[2]);
    assert_eq!(texts[1], texts[2]);
    assert!(note_exists(&db, theirs).await);
    assert!(note_exists(&db, theirs_held).await);
    // Control: the owner's tenant deletes its free row.
    let (outcome, called) = delete(&db, &cohort, theirs, tenant_b()).await;
    assert!(matches!(outcome, Ok(DeletionOutcome::Deleted(()))));
    assert!(called);
    assert!(!note_exists(&db, theirs).await);
}

// contract: H15
#[tokio::test]
async fn hold_reasons_are_bounded_in_bytes() {
    let (db, cohort) = setup().await;
    let id = note(&db, tenant_a()).await;
    let ascii = "x".repeat(MAX_REASON_BYTES);
    let wide = "é".repeat(MAX_REASON_BYTES / 2);
    assert_eq!(wide.len(), MAX_REASON_BYTES);
    for reason in [&ascii, &wide] {
        let hold = create(&db, &cohort, request(id.to_string(), tenant_a(), reason))
            .await
            .expect("a reason at the limit is accepted");
        assert_eq!(&hold.reason, reason);
    }
    assert_eq!(holds_count(&db).await, 2);
    for reason in [
        format!("{ascii}x"),
        format!("{wide}x"),
        "x".repeat(10 << 20),
    ] {
        let err = create(&db, &cohort, request(id.to_string(), tenant_a(), &reason))
            .await
            .expect_err("too long");
        assert!(
            matches!(
                err,
                Error::Hold(HoldError::ReasonTooLong { bytes }) if bytes == reason.len()
            ),
            "{err:?}"
        );
        assert!(
            !err.to_string().contains("xxxx"),
            "the message does not echo the reason"
        );
    }
    assert_eq!(holds_count(&db).await, 2, "nothing written");
}

// contract: H13, H5, H6
#[tokio::test]
async fn a_second_removal_brings_a_scheduled_removal_forward_but_never_pushes_it_back() {
    let (db, cohort) = setup().await;
    let id = note(&db, tenant_a()).await;
    let hold = create(
        &db,
        &cohort,
        request(id.to_string(), tenant_a(), "litigation"),
    )
    .await
    .expect("hold");
    let t = now_s();
    let mut conn = db.pool().acquire().await.expect("connection");
    let stored = |db: &TestDb| {
        let pool = db.pool().clone();
        async move {
            sqlx::query_scalar::<_, Option<DateTime<Utc>>>(
                "SELECT removed_at FROM retention_holds WHERE hold_id = $1",
            )
            .bind(hold.hold_id)
            .fetch_one(&pool)
            .await
            .expect("removed_at")
        }
    };

    let removed = cohort
        .holds()
        .remove(&mut conn, hold.hold_id, t + Duration::days(10))
        .await
        .expect("scheduled removal");
    assert_eq!(removed.removed_at, Some(t + Duration::days(10)));
    let removed = cohort
        .holds()
        .remove(&mut conn, hold.hold_id, t + Duration::days(1))
        .await
        .expect("brought forward");
    assert_eq!(removed.removed_at, Some(t + Duration::days(1)));
    assert_eq!(stored(&db).await, Some(t + Duration::days(1)));
    let removed = cohort
        .holds()
        .remove(&mut conn, hold.hold_id, t + Duration::days(20))
        .await
        .expect("a later instant");
    assert_eq!(
        removed.removed_at,
        Some(t + Duration::days(1)),
        "never pushed back"
    );
    assert_eq!(stored(&db).await, Some(t + Duration::days(1)));
    let target = Target::new(uuid(NOTE_ID), id.to_string(), Some(tenant_a()));
    assert!(
        cohort
            .holds()
            .is_held(&mut conn, &target, t + Duration::hours(23))
            .await
            .expect("is_held")
    );
    assert!(
        !cohort
            .holds()
            .is_held(&mut conn, &target, t + Duration::days(2))
            .await
            .expect("is_held")
    );
}

// ---------------------------------------------------------------------------
// H15: times outside PostgreSQL's range.

// contract: H15
#[tokio::test]
async fn times_outside_postgres_range_are_refused_typed_and_write_nothing() {
    let db = db_with_tables().await;
    let rules = readme_rules().with(
        "user-data",
        Capabilities::only(Strategy::Purge),
        Rule::new(Period::days(30), Strategy::Purge),
    );
    let cohort = Cohort::builder(db.pool().clone())
        .rules(rules)
        .entity::<SessionNote>()
        .entity::<CaseContact>()
        .entity::<UserRecord>()
        .build()
        .await
        .expect("model");
    let id = note_days_old(&db, tenant_a(), 40).await;
    let subject = Uuid::new_v4();
    sqlx::query(
        "INSERT INTO user_records (id, tenant_id, created_at, user_id) VALUES (1, $1, now() - interval '400 days', $2)",
    )
    .bind(tenant_a())
    .bind(subject)
    .execute(db.pool())
    .await
    .expect("record");
    let mut conn = db.connect().await;
    let held = cohort
        .holds()
        .create(
            &mut conn,
            HoldRequest::new(
                uuid(NOTE_ID),
                id.to_string(),
                Some(tenant_a()),
                "litigation",
                Utc::now(),
            ),
        )
        .await
        .expect("hold");
    let out = DateTime::<Utc>::MIN_UTC;
    let just_out = pg_earliest() - Duration::microseconds(1);

    for created_at in [out, just_out] {
        let refused = cohort
            .holds()
            .create(
                &mut conn,
                HoldRequest::new(
                    uuid(NOTE_ID),
                    id.to_string(),
                    Some(tenant_a()),
                    "litigation",
                    created_at,
                )
                .expires_at(created_at + Duration::days(1)),
            )
            .await;
        assert!(
            matches!(refused, Err(Error::TimeOutOfRange { what: "created_at" })),
            "{created_at}: {refused:?}"
        );
    }
    // An expiry out of range needs a creation time before it, which is out of
    // range itself (chrono's latest instant is inside PostgreSQL's range):
    // the request is refused either way.
    let refused = cohort
        .holds()
        .create(
            &mut conn,
            HoldRequest::new(
                uuid(NOTE_ID),
                id.to_string(),
                Some(tenant_a()),
                "litigation",
                out,
            )
            .expires_at(just_out),
        )
        .await;
    assert!(
        matches!(refused, Err(Error::TimeOutOfRange { .. })),
        "{refused:?}"
    );
    let removed = cohort.holds().remove(&mut conn, held.hold_id, out).await;
    assert!(
        matches!(removed, Err(Error::TimeOutOfRange { what: "removed_at" })),
        "{removed:?}"
    );
    let listed = cohort
        .holds()
        .list_active(&mut conn, out, &HoldFilter::all())
        .await;
    assert!(
        matches!(listed, Err(Error::TimeOutOfRange { .. })),
        "{listed:?}"
    );
    let asked = cohort
        .holds()
        .is_held(
            &mut conn,
            &Target::new(uuid(NOTE_ID), id.to_string(), Some(tenant_a())),
            out,
        )
        .await;
    assert!(
        matches!(asked, Err(Error::TimeOutOfRange { .. })),
        "{asked:?}"
    );
    for t in [out, just_out] {
        let swept = cohort.sweep(&scope_a(), t).await;
        assert!(
            matches!(swept, Err(Error::TimeOutOfRange { what: "now" })),
            "{t}: {swept:?}"
        );
        let dry = cohort
            .sweep_with(&scope_a(), t, SweepOptions::default().dry_run())
            .await;
        assert!(
            matches!(dry, Err(Error::TimeOutOfRange { what: "now" })),
            "{t}: {dry:?}"
        );
        let previewed = cohort.preview(&scope_a(), t).await;
        assert!(
            matches!(previewed, Err(Error::TimeOutOfRange { what: "now" })),
            "{t}: {previewed:?}"
        );
        let erased = cohort
            .erase(&scope_a(), t, ErasureRequest::new(subject))
            .await;
        assert!(
            matches!(erased, Err(Error::TimeOutOfRange { what: "now" })),
            "{t}: {erased:?}"
        );
    }

    // Nothing was written: no run, one hold (not removed), every row there.
    assert_eq!(count(&db, "SELECT count(*) FROM sweep_run").await, 0);
    assert_eq!(
        count(
            &db,
            "SELECT count(*) FROM retention_holds WHERE removed_at IS NULL"
        )
        .await,
        1
    );
    assert_eq!(count(&db, "SELECT count(*) FROM retention_holds").await, 1);
    assert!(note_exists(&db, id).await);
    assert_eq!(count(&db, "SELECT count(*) FROM user_records").await, 1);
    // The connection is still usable.
    assert!(
        cohort
            .holds()
            .is_held(
                &mut conn,
                &Target::new(uuid(NOTE_ID), id.to_string(), Some(tenant_a())),
                Utc::now()
            )
            .await
            .expect("is_held")
    );
}
