//! Erasures that survive a restore (contract SA2): the register, written
//! outside the database, replays the erasures a restore from a real
//! `pg_dump` brought back; a second replay changes nothing.

use chrono::{DateTime, Utc};
use cohort::evidence::{
    CertificateOptions, certificate, read_erasure_register, subject_hmac, write_erasure_register,
};
use cohort::schema::SchemaName;
use cohort::{Cohort, ErasureRequest, Error, Period, Rule, Scope, Strategy, TenantContext};
use uuid::Uuid;

use crate::support::fixtures::user_data_rules;
use crate::support::models::*;
use crate::support::{TestDb, db_with_cohort};

const KEY: &[u8] = b"replay test key";

fn tenant() -> Uuid {
    Uuid::from_u128(0x7e5)
}

fn subject(n: u128) -> Uuid {
    Uuid::from_u128(0xe000 + n)
}

async fn handle(db: &TestDb, key: Option<&[u8]>) -> Cohort {
    let mut b = Cohort::builder(db.pool().clone())
        .rules(user_data_rules(Rule::new(
            Period::days(30),
            Strategy::Purge,
        )))
        .entity::<UserRecord>()
        .entity::<Message>();
    if let Some(key) = key {
        b = b.subject_key(key);
    }
    b.build().await.expect("model")
}

async fn rows_of(db: &TestDb, who: Uuid) -> i64 {
    sqlx::query_scalar(
        "SELECT (SELECT count(*) FROM user_records WHERE user_id = $1) \
              + (SELECT count(*) FROM messages WHERE sender_email = $1::text)",
    )
    .bind(who)
    .fetch_one(db.pool())
    .await
    .expect("count")
}

/// `db`'s URL for libpq's tools (sqlx's own query parameters dropped).
fn libpq_url(db: &TestDb) -> String {
    let url = db.url();
    url.split('?').next().unwrap_or(&url).to_owned()
}

fn run_tool(name: &str, args: &[&str]) {
    let program = cohort_testdb::postgres_binary(name).unwrap_or_else(|| {
        panic!("{name} is not installed (Debian: apt-get install postgresql-client)")
    });
    let out = std::process::Command::new(program)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{name}: {e}"));
    assert!(
        out.status.success(),
        "{name} {args:?}: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}

// contract: SA2
#[tokio::test]
async fn after_a_restore_the_register_replays_every_erasure_since_and_a_second_replay_changes_nothing()
 {
    let (db, _) = db_with_cohort("public").await;
    db.exec(TABLES).await;
    let t = tenant();
    for (id, who) in [(1, 1), (2, 1), (3, 2), (4, 3)] {
        sqlx::query(
            "INSERT INTO user_records (id, tenant_id, created_at, user_id, notes) \
             VALUES ($1, $2, now() - interval '1 day', $3, 'personal')",
        )
        .bind(id)
        .bind(t)
        .bind(subject(who))
        .execute(db.pool())
        .await
        .expect("record");
    }
    sqlx::query("INSERT INTO messages VALUES (10, $1, now(), $2)")
        .bind(t)
        .bind(subject(1).to_string())
        .execute(db.pool())
        .await
        .expect("message");

    // The backup, taken before the erasures (a real pg_dump).
    let dir = std::env::temp_dir().join(format!("cohort-sa2-{}", Uuid::new_v4().simple()));
    std::fs::create_dir_all(&dir).expect("dir");
    let dump = dir.join("backup.dump");
    let dump_path = dump.to_str().expect("utf-8 path").to_owned();
    run_tool(
        "pg_dump",
        &[
            "-Fc",
            "--no-owner",
            "--no-privileges",
            "-f",
            &dump_path,
            "-d",
            &libpq_url(&db),
        ],
    );
    let since: DateTime<Utc> = sqlx::query_scalar("SELECT now()")
        .fetch_one(db.pool())
        .await
        .expect("now");

    // Two erasures after it; the register goes outside the database.
    let cohort = handle(&db, Some(KEY)).await;
    let scope = Scope::Tenant(TenantContext::new(t));
    for who in [1, 2] {
        let run = cohort
            .erase(&scope, Utc::now(), ErasureRequest::new(subject(who)))
            .await
            .expect("erase");
        assert!(run.affected() > 0);
    }
    assert_eq!(rows_of(&db, subject(1)).await, 0);
    let mut register = Vec::new();
    let mut conn = db.pool().acquire().await.expect("conn");
    let written =
        write_erasure_register(&mut conn, &SchemaName::public(), Some(since), &mut register)
            .await
            .expect("register");
    drop(conn);
    assert_eq!(written, 2);
    let text = String::from_utf8(register.clone()).expect("utf-8");
    assert!(
        !text.contains(&subject(1).to_string()),
        "the register holds no subject: {text}"
    );
    assert!(
        text.contains(&subject_hmac(KEY, &subject(1).to_string())),
        "{text}"
    );
    let entries = read_erasure_register(std::io::Cursor::new(register)).expect("read back");

    // The restore brings the erased subjects back (and rolls the ledger back).
    let restored = TestDb::new().await;
    run_tool(
        "pg_restore",
        &[
            "--no-owner",
            "--no-privileges",
            "-d",
            &libpq_url(&restored),
            &dump_path,
        ],
    );
    std::fs::remove_dir_all(&dir).ok();
    assert_eq!(rows_of(&restored, subject(1)).await, 3);
    assert_eq!(rows_of(&restored, subject(2)).await, 1);
    let again = handle(&restored, Some(KEY)).await;

    // Nothing settled after a later time: nothing to replay.
    let later = Utc::now() + chrono::Duration::hours(1);
    let hosts_list = || {
        [1, 2, 3]
            .map(|n| (Some(t), subject(n).to_string()))
            .into_iter()
    };
    let none = again
        .replay_erasures(&entries, hosts_list(), later, Utc::now())
        .await
        .expect("replay");
    assert!(none.is_empty(), "{none:?}");

    // The replay erases both again, from the host's own list of requests
    // (subject 3 is in it but was never erased: left alone).
    let first = again
        .replay_erasures(&entries, hosts_list(), since, Utc::now())
        .await
        .expect("replay");
    assert_eq!(first.replayed.len(), 2, "{first:?}");
    assert!(
        first.unmatched.is_empty() && first.failed.is_empty(),
        "{first:?}"
    );
    assert_eq!(first.affected(), 4, "{first:?}");
    assert_eq!(rows_of(&restored, subject(1)).await, 0);
    assert_eq!(rows_of(&restored, subject(2)).await, 0);
    assert_eq!(rows_of(&restored, subject(3)).await, 1);
    // Each replay is certified for its subject.
    for (replayed, who) in first.replayed.iter().zip([1, 2]) {
        assert_eq!(replayed.original_run, entries[who as usize - 1].run_id);
        let mut conn = restored.pool().acquire().await.expect("conn");
        let subject_text = subject(who).to_string();
        let cert = certificate(
            &mut conn,
            &SchemaName::public(),
            replayed.run_id,
            &CertificateOptions {
                subject: &subject_text,
                subject_key: KEY,
                subject_in_clear: false,
            },
        )
        .await
        .expect("a replay's certificate");
        assert_eq!(
            cert.types.iter().map(|t| t.erased).sum::<i64>() as u64,
            replayed.affected
        );
        assert_eq!(
            cert.replay_of,
            Some(replayed.original_run),
            "the certificate says it is a replay"
        );
        assert!(cert.to_string().contains("Replay of:"), "{cert}");
    }

    // A second replay changes nothing.
    let second = again
        .replay_erasures(&entries, hosts_list(), since, Utc::now())
        .await
        .expect("replay");
    assert_eq!(second.replayed.len(), 2);
    assert_eq!(second.affected(), 0, "{second:?}");
    assert_eq!(rows_of(&restored, subject(3)).await, 1);

    // A subject missing from the host's list is reported, not guessed.
    let partial = again
        .replay_erasures(
            &entries,
            [(Some(t), subject(1).to_string())],
            since,
            Utc::now(),
        )
        .await
        .expect("replay");
    assert_eq!(partial.unmatched, vec![entries[1].run_id]);
    // A subject no erasure accepts is a mistake in the list: refused, and
    // nothing is replayed.
    let too_long = "x".repeat(cohort::MAX_SUBJECT_BYTES + 1);
    let runs_before: i64 = sqlx::query_scalar("SELECT count(*) FROM sweep_run")
        .fetch_one(restored.pool())
        .await
        .expect("runs");
    let err = again
        .replay_erasures(
            &entries,
            [(Some(t), subject(1).to_string()), (Some(t), too_long)],
            since,
            Utc::now(),
        )
        .await
        .expect_err("an over-long subject");
    assert!(matches!(err, Error::InvalidSubject { .. }), "{err:?}");
    let runs_after: i64 = sqlx::query_scalar("SELECT count(*) FROM sweep_run")
        .fetch_one(restored.pool())
        .await
        .expect("runs");
    assert_eq!(runs_after, runs_before, "nothing replayed");
    // No key, no replay.
    let unkeyed = handle(&restored, None).await;
    let err = unkeyed
        .replay_erasures(&entries, hosts_list(), since, Utc::now())
        .await
        .expect_err("no key");
    assert!(matches!(err, Error::SubjectKeyMissing), "{err:?}");
}
