//! Erasure certificates bound to the subject erased (contract EV4): the run
//! records a keyed hash of its subject, and a certificate for any other
//! subject (or under another key) is refused.

use crate::support::models::*;
use crate::support::{TestDb, TestRules, db_with_cohort};
use chrono::Utc;
use cohort::evidence::{
    CertificateOptions, ChainTable, EvidenceError, SignedCertificate, certificate, subject_hmac,
    verify,
};
use cohort::schema::SchemaName;
use cohort::{Capabilities, Cohort, ErasureRequest, Period, Rule, Scope, Strategy, TenantContext};
use ed25519_dalek::SigningKey;
use uuid::Uuid;

const KEY: &[u8] = b"the host's subject key";

fn tenant() -> Uuid {
    uuid("11111111-1111-1111-1111-111111111111")
}

fn scope() -> Scope {
    Scope::Tenant(TenantContext::new(tenant()))
}

async fn handle(db: &TestDb, key: Option<&[u8]>) -> Cohort {
    let mut b = Cohort::builder(db.pool().clone())
        .rules(TestRules::new().with(
            "user-data",
            Capabilities::only(Strategy::Purge),
            Rule::new(Period::days(30), Strategy::Purge),
        ))
        .entity::<UserRecord>();
    if let Some(key) = key {
        b = b.subject_key(key);
    }
    b.build().await.expect("model")
}

async fn setup() -> TestDb {
    let (db, _) = db_with_cohort("public").await;
    db.exec(TABLES).await;
    db.exec(&format!(
        "INSERT INTO user_records (id, tenant_id, created_at, user_id) VALUES \
         (1, '{t}', now() - interval '3 years', 'aaaaaaaa-0000-0000-0000-000000000534'), \
         (2, '{t}', now() - interval '3 years', 'aaaaaaaa-0000-0000-0000-000000000999')",
        t = tenant()
    ))
    .await;
    db
}

fn options<'a>(subject: &'a str, key: &'a [u8]) -> CertificateOptions<'a> {
    CertificateOptions {
        subject,
        subject_key: key,
        subject_in_clear: false,
    }
}

async fn certify(
    db: &TestDb,
    run_id: Uuid,
    subject: &str,
    key: &[u8],
) -> Result<cohort::evidence::Certificate, cohort::Error> {
    let mut conn = db.pool().acquire().await.expect("conn");
    certificate(
        &mut conn,
        &SchemaName::public(),
        run_id,
        &options(subject, key),
    )
    .await
}

const ERASED: &str = "aaaaaaaa-0000-0000-0000-000000000534";
const OTHER: &str = "aaaaaaaa-0000-0000-0000-000000000999";

// contract: EV4
#[tokio::test]
async fn a_certificate_is_issued_only_for_the_subject_the_run_erased() {
    let db = setup().await;
    let cohort = handle(&db, Some(KEY)).await;
    let run = cohort
        .erase(&scope(), Utc::now(), ErasureRequest::new(uuid(ERASED)))
        .await
        .expect("erase");
    assert_eq!(run.affected(), 1);

    // The run stores the keyed hash, never the subject.
    let (stored, kind): (Vec<u8>, String) =
        sqlx::query_as("SELECT subject_hmac, run_kind FROM sweep_run WHERE run_id = $1")
            .bind(run.run_id)
            .fetch_one(db.pool())
            .await
            .expect("run");
    assert_eq!(kind, "Erasure");
    assert_eq!(hex::encode(&stored), subject_hmac(KEY, ERASED));
    let row: String =
        sqlx::query_scalar("SELECT row_to_json(r)::text FROM sweep_run r WHERE run_id = $1")
            .bind(run.run_id)
            .fetch_one(db.pool())
            .await
            .expect("row");
    assert!(!row.contains(ERASED), "{row}");

    let cert = certify(&db, run.run_id, ERASED, KEY)
        .await
        .expect("the erased subject is certified");
    assert_eq!(cert.types[0].erased, 1);

    // Another subject: refused, naming the run.
    let other = certify(&db, run.run_id, OTHER, KEY).await;
    assert!(
        matches!(
            other,
            Err(cohort::Error::Evidence(EvidenceError::SubjectMismatch { run_id })) if run_id == run.run_id
        ),
        "{other:?}"
    );
    // The right subject under another key: refused too.
    let wrong_key = certify(&db, run.run_id, ERASED, b"another key").await;
    assert!(matches!(
        wrong_key,
        Err(cohort::Error::Evidence(
            EvidenceError::SubjectMismatch { .. }
        ))
    ));
    // A sweep records no subject.
    let sweep = cohort.sweep(&scope(), Utc::now()).await.expect("sweep");
    let none: Option<Vec<u8>> =
        sqlx::query_scalar("SELECT subject_hmac FROM sweep_run WHERE run_id = $1")
            .bind(sweep.run_id)
            .fetch_one(db.pool())
            .await
            .expect("run");
    assert_eq!(none, None);
}

// contract: EV4
#[tokio::test]
async fn a_subject_erased_with_nothing_to_erase_still_gets_its_certificate() {
    let db = setup().await;
    let cohort = handle(&db, Some(KEY)).await;
    let nobody = "aaaaaaaa-0000-0000-0000-000000000777";
    let run = cohort
        .erase(&scope(), Utc::now(), ErasureRequest::new(uuid(nobody)))
        .await
        .expect("erase");
    assert_eq!(run.affected(), 0);
    let cert = certify(&db, run.run_id, nobody, KEY)
        .await
        .expect("certificate");
    assert_eq!(cert.types[0].erased, 0);
    assert!(certify(&db, run.run_id, ERASED, KEY).await.is_err());
}

// contract: EV4
#[tokio::test]
async fn an_erasure_without_a_subject_key_cannot_be_certified() {
    let db = setup().await;
    let cohort = handle(&db, None).await;
    let run = cohort
        .erase(&scope(), Utc::now(), ErasureRequest::new(uuid(ERASED)))
        .await
        .expect("erase");
    let refused = certify(&db, run.run_id, ERASED, KEY).await;
    assert!(
        matches!(
            refused,
            Err(cohort::Error::Evidence(
                EvidenceError::SubjectNotRecorded { .. }
            ))
        ),
        "{refused:?}"
    );
}

// contract: EV4, EV1
#[tokio::test]
async fn a_rewritten_subject_hash_breaks_the_runs_chain_link() {
    let db = setup().await;
    let cohort = handle(&db, Some(KEY)).await;
    let run = cohort
        .erase(&scope(), Utc::now(), ErasureRequest::new(uuid(ERASED)))
        .await
        .expect("erase");
    let mut conn = db.pool().acquire().await.expect("conn");
    let before = verify(&mut conn, &SchemaName::public())
        .await
        .expect("verify");
    assert!(before.is_intact(), "{before}");
    // Someone with write access points the run at another subject, so a
    // certificate for that subject would be issued: the chain names the run.
    sqlx::query("UPDATE sweep_run SET subject_hmac = decode($2, 'hex') WHERE run_id = $1")
        .bind(run.run_id)
        .bind(subject_hmac(KEY, OTHER))
        .execute(db.pool())
        .await
        .expect("tamper");
    let after = verify(&mut conn, &SchemaName::public())
        .await
        .expect("verify");
    assert!(!after.is_intact());
    assert!(
        after
            .problems
            .iter()
            .any(|p| p.table == ChainTable::Run && p.row == run.run_id.to_string()),
        "{after}"
    );
}

// contract: EV4
#[tokio::test]
async fn a_certificate_file_ending_in_a_newline_verifies_as_written() {
    let db = setup().await;
    let cohort = handle(&db, Some(KEY)).await;
    let run = cohort
        .erase(&scope(), Utc::now(), ErasureRequest::new(uuid(ERASED)))
        .await
        .expect("erase");
    let cert = certify(&db, run.run_id, ERASED, KEY)
        .await
        .expect("certificate");
    let signing = SigningKey::from_bytes(&[7u8; 32]);
    let document = cert.clone().sign(&signing).to_json();
    let dir = std::env::temp_dir().join(format!("cohort-cert-{}", Uuid::new_v4()));
    std::fs::create_dir_all(&dir).expect("dir");
    for (name, ending) in [("unix.json", "\n"), ("dos.json", "\r\n"), ("bare.json", "")] {
        let path = dir.join(name);
        std::fs::write(&path, format!("{document}{ending}")).expect("write");
        let read = std::fs::read_to_string(&path).expect("read");
        let verified = SignedCertificate::verify(&read, &signing.verifying_key())
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(verified, cert);
    }
    // Two line endings, or a space, are not the document.
    for changed in [format!("{document}\n\n"), format!("{document} ")] {
        assert!(SignedCertificate::verify(&changed, &signing.verifying_key()).is_err());
    }
    let _ = std::fs::remove_dir_all(&dir);
}
