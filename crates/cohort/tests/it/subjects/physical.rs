//! What "erased" means on disk (contract SA3): the certificate says whether
//! the erased rows' old versions may still be in the table's files, and an
//! erasure can vacuum the tables it changed.

use chrono::Utc;
use cohort::evidence::{Certificate, CertificateOptions, certificate};
use cohort::schema::SchemaName;
use cohort::{
    Cohort, ErasureRequest, Period, Rule, RunResult, Scope, Strategy, TenantContext, VacuumOutcome,
};
use sqlx::Connection;
use uuid::Uuid;

use crate::support::fixtures::user_data_rules;
use crate::support::models::*;
use crate::support::{TestDb, db_with_cohort};

const KEY: &[u8] = b"physical erasure test key";

fn tenant() -> Uuid {
    Uuid::from_u128(0x5a3)
}

fn scope() -> Scope {
    Scope::Tenant(TenantContext::new(tenant()))
}

fn subject(n: u128) -> Uuid {
    Uuid::from_u128(0xa000 + n)
}

async fn setup() -> (TestDb, Cohort) {
    let (db, _) = db_with_cohort("public").await;
    db.exec(TABLES).await;
    // No autovacuum: whether the table was vacuumed is this test's doing.
    db.exec("ALTER TABLE user_records SET (autovacuum_enabled = false)")
        .await;
    for (id, who) in [(1, 1), (2, 1), (3, 2), (4, 2), (5, 3), (6, 3), (7, 9)] {
        sqlx::query(
            "INSERT INTO user_records (id, tenant_id, created_at, user_id, notes) \
             VALUES ($1, $2, now() - interval '3 years', $3, 'private')",
        )
        .bind(id)
        .bind(tenant())
        .bind(subject(who))
        .execute(db.pool())
        .await
        .expect("record");
    }
    // The administrative pool: VACUUM needs the table's owner.
    let cohort = Cohort::builder(db.pool().clone())
        .rules(user_data_rules(Rule::new(
            Period::days(30),
            Strategy::Purge,
        )))
        .entity::<UserRecord>()
        .entity::<Message>()
        .subject_key(KEY)
        .build()
        .await
        .expect("model");
    (db, cohort)
}

async fn certify(db: &TestDb, run: &RunResult, who: Uuid) -> Certificate {
    let mut conn = db.pool().acquire().await.expect("conn");
    let subject = who.to_string();
    certificate(
        &mut conn,
        &SchemaName::public(),
        run.run_id,
        &CertificateOptions {
            subject: &subject,
            subject_key: KEY,
            subject_in_clear: false,
        },
    )
    .await
    .expect("certificate")
}

fn user_records(cert: &Certificate) -> &cohort::evidence::CertificateType {
    cert.types
        .iter()
        .find(|t| t.entity_type == "UserRecord")
        .expect("UserRecord in the certificate")
}

// contract: SA3
#[tokio::test]
async fn a_certificate_says_whether_the_erased_rows_may_still_be_on_disk_and_erase_can_vacuum() {
    let (db, cohort) = setup().await;

    // 1. No vacuum: the two deleted versions are dead tuples in the heap.
    let first = cohort
        .erase(&scope(), Utc::now(), ErasureRequest::new(subject(1)))
        .await
        .expect("erase");
    assert_eq!(first.affected(), 2);
    assert_eq!(first.tables.len(), 1, "{:?}", first.tables);
    assert_eq!(first.tables[0].table, "public.user_records");
    assert_eq!(first.tables[0].vacuum, VacuumOutcome::NotRequested);
    let cert = certify(&db, &first, subject(1)).await;
    assert_eq!(cert.replay_of, None, "an ordinary erasure is no replay");
    let physical = user_records(&cert)
        .physical
        .as_ref()
        .expect("physical state");
    assert_eq!(physical.table, "public.user_records");
    assert!(!physical.vacuumed_since_erasure, "{physical:?}");
    assert_eq!(physical.vacuumed_at, None, "never vacuumed");
    assert!(physical.dead_tuples.is_some_and(|d| d >= 2), "{physical:?}");
    assert!(physical.dead_tuples_may_remain, "{physical:?}");
    assert!(
        cert.to_string()
            .contains("may still be in the table's files"),
        "{cert}"
    );
    // A type that erased nothing has nothing on disk to report.
    let messages = cert.types.iter().find(|t| t.entity_type == "Message");
    assert!(
        messages.is_some_and(|t| t.erased == 0 && t.physical.is_none()),
        "{cert:?}"
    );

    // 2. Vacuumed, but an older snapshot can still see the erased rows:
    //    VACUUM keeps their versions, and the certificate says so.
    let mut reader = db.pool().acquire().await.expect("conn").detach();
    let mut snapshot = reader.begin().await.expect("begin");
    sqlx::query("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        .execute(&mut *snapshot)
        .await
        .expect("isolation");
    let seen: i64 = sqlx::query_scalar("SELECT count(*) FROM user_records")
        .fetch_one(&mut *snapshot)
        .await
        .expect("snapshot taken");
    assert_eq!(seen, 5);
    let second = cohort
        .erase(
            &scope(),
            Utc::now(),
            ErasureRequest::new(subject(2)).vacuum(),
        )
        .await
        .expect("erase");
    assert_eq!(second.affected(), 2);
    assert!(
        matches!(second.tables[0].vacuum, VacuumOutcome::Vacuumed { .. }),
        "{:?}",
        second.tables
    );
    let cert = certify(&db, &second, subject(2)).await;
    let physical = user_records(&cert)
        .physical
        .clone()
        .expect("physical state");
    assert!(physical.vacuumed_since_erasure, "{physical:?}");
    assert!(physical.dead_tuples.is_some_and(|d| d >= 2), "{physical:?}");
    assert!(physical.dead_tuples_may_remain, "{physical:?}");
    snapshot.rollback().await.expect("end the snapshot");
    reader.close().await.expect("close");

    // 3. Vacuumed with no older snapshot: every dead version is reclaimed.
    let third = cohort
        .erase(
            &scope(),
            Utc::now(),
            ErasureRequest::new(subject(3)).vacuum(),
        )
        .await
        .expect("erase");
    assert_eq!(third.affected(), 2);
    assert!(matches!(
        third.tables[0].vacuum,
        VacuumOutcome::Vacuumed { .. }
    ));
    let cert = certify(&db, &third, subject(3)).await;
    let physical = user_records(&cert)
        .physical
        .clone()
        .expect("physical state");
    assert!(physical.vacuumed_since_erasure, "{physical:?}");
    assert_eq!(physical.dead_tuples, Some(0), "{physical:?}");
    assert!(!physical.dead_tuples_may_remain, "{physical:?}");
    let settled = cert.settled_at.clone().expect("settled");
    assert!(
        physical
            .vacuumed_at
            .as_deref()
            .is_some_and(|v| v > settled.as_str()),
        "vacuumed at {:?}, settled at {settled}",
        physical.vacuumed_at
    );
    assert!(
        cert.to_string().contains("vacuumed since the erasure"),
        "{cert}"
    );
    // The first erasure's certificate, built again now, reads the table as
    // it is now: vacuumed since then.
    let again = certify(&db, &first, subject(1)).await;
    let physical = user_records(&again)
        .physical
        .clone()
        .expect("physical state");
    assert!(!physical.dead_tuples_may_remain, "{physical:?}");

    // A dry run changes nothing and reports nothing on disk.
    let dry = cohort
        .erase(
            &scope(),
            Utc::now(),
            ErasureRequest::new(subject(9)).dry_run().vacuum(),
        )
        .await
        .expect("dry run");
    assert_eq!(dry.affected(), 1);
    assert!(dry.tables.is_empty());
    let cert = certify(&db, &dry, subject(9)).await;
    assert!(user_records(&cert).physical.is_none(), "{cert:?}");
}
