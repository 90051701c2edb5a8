//! Guarded types (contract H17): the database itself refuses a `DELETE` of
//! a held row, an `UPDATE` of a held row that changes a column the guard
//! does not allow, and a `TRUNCATE` while a hold of the type is active, for
//! any role and any statement; Cohort's own paths never trip it; a guarded
//! type whose guard is missing, disabled or out of date is refused at build.

use crate::support::fixtures::{scope_a, subject, tenant_a};
use crate::support::{BuildEngine, TestDb, TestRules, count, db_with_cohort, grant_host};
use chrono::{DateTime, Duration, Utc};
use cohort::holds::{DeletionOutcome, HoldRequest, Target};
use cohort::{Capabilities, Cohort, CohortBuilder, ErasureRequest, Error, Period, Rule, Strategy};
use uuid::Uuid;

const NOTE_TYPE: &str = "4a7c2e10-9f3b-4d1a-8e55-0c6b7d2f1a01";

#[allow(dead_code, reason = "mirrors a table; only its descriptor is read")]
#[derive(cohort::Retained)]
#[cohort(
    category = "guarded-notes",
    anchor = "created_at",
    id = "4a7c2e10-9f3b-4d1a-8e55-0c6b7d2f1a01",
    table = "guarded_notes",
    guard
)]
struct GuardedNote {
    id: i64,
    tenant_id: Uuid,
    created_at: DateTime<Utc>,
    #[cohort(erasure_subject)]
    author: Uuid,
    body: String,
    #[cohort(guard_allow)]
    last_viewed_at: Option<DateTime<Utc>>,
}

#[allow(dead_code, reason = "mirrors a table; only its descriptor is read")]
#[derive(cohort::Retained)]
#[cohort(
    category = "guarded-contacts",
    anchor = "created_at",
    id = "4a7c2e10-9f3b-4d1a-8e55-0c6b7d2f1a02",
    table = "guarded_contacts",
    guard
)]
struct GuardedContact {
    id: i64,
    tenant_id: Uuid,
    created_at: DateTime<Utc>,
    anonymised_at: Option<DateTime<Utc>>,
    #[cohort(anonymise = "null")]
    email: Option<String>,
}

const TABLES: &str = "CREATE TABLE public.guarded_notes (id bigint PRIMARY KEY, tenant_id uuid NOT NULL, \
     created_at timestamptz NOT NULL, author uuid NOT NULL, body text NOT NULL, last_viewed_at timestamptz); \
     CREATE TABLE public.guarded_contacts (id bigint PRIMARY KEY, tenant_id uuid NOT NULL, \
     created_at timestamptz NOT NULL, anonymised_at timestamptz, email text);";

fn rules() -> TestRules {
    TestRules::new()
        .with(
            "guarded-notes",
            Capabilities::only(Strategy::Purge),
            Rule::new(Period::days(30), Strategy::Purge),
        )
        .with(
            "guarded-contacts",
            Capabilities::only(Strategy::Anonymise),
            Rule::new(Period::days(30), Strategy::Anonymise),
        )
}

fn builder(db: &TestDb) -> CohortBuilder {
    Cohort::builder(db.engine_pool().clone())
        .rules(rules())
        .entity::<GuardedNote>()
        .entity::<GuardedContact>()
}

/// Ten old notes (ids 1-10, note 1 by [`subject`]) and five old contacts.
async fn setup() -> TestDb {
    let (db, _) = db_with_cohort("public").await;
    db.exec(TABLES).await;
    db.exec(&format!(
        "INSERT INTO guarded_notes SELECT g, '{t}', now() - interval '40 days', \
             CASE WHEN g = 1 THEN '{s}'::uuid ELSE gen_random_uuid() END, 'note ' || g, NULL \
         FROM generate_series(1, 10) g; \
         INSERT INTO guarded_contacts SELECT g, '{t}', now() - interval '40 days', NULL, 'c' || g || '@example.org' \
         FROM generate_series(1, 5) g;",
        t = tenant_a(),
        s = subject()
    ))
    .await;
    db
}

/// The model's guards applied as the tables' owner.
async fn install_guards(db: &TestDb) {
    let ddl = builder(db).guards().expect("the model's guards");
    assert!(!ddl.is_empty());
    db.exec(&ddl.sql()).await;
}

async fn hold(cohort: &Cohort, db: &TestDb, entity: &str, record: &str) -> Uuid {
    let mut conn = db.engine_pool().acquire().await.expect("conn");
    cohort
        .holds()
        .create(
            &mut conn,
            HoldRequest::new(
                Uuid::parse_str(entity).expect("uuid"),
                record,
                Some(tenant_a()),
                "litigation",
                Utc::now() - Duration::seconds(1),
            ),
        )
        .await
        .expect("hold")
        .hold_id
}

/// Runs `sql` as `role` (`None`: the administrative user, a superuser) in a
/// transaction of its own; the database error's SQLSTATE and message, if
/// it refused.
async fn as_role(db: &TestDb, role: Option<&str>, sql: &str) -> Result<u64, (String, String)> {
    let mut tx = db.pool().begin().await.expect("begin");
    if let Some(role) = role {
        sqlx::raw_sql(sqlx::AssertSqlSafe(format!("SET LOCAL ROLE \"{role}\"")))
            .execute(&mut *tx)
            .await
            .expect("set role");
    }
    match sqlx::raw_sql(sqlx::AssertSqlSafe(sql.to_owned()))
        .execute(&mut *tx)
        .await
    {
        Ok(done) => {
            tx.commit().await.expect("commit");
            Ok(done.rows_affected())
        }
        Err(sqlx::Error::Database(e)) => Err((
            e.code().map(|c| c.into_owned()).unwrap_or_default(),
            e.message().to_owned(),
        )),
        Err(e) => panic!("{sql}: {e}"),
    }
}

// contract: H17
#[tokio::test]
async fn a_guarded_type_is_refused_at_build_until_its_guard_is_installed_and_enabled() {
    let db = setup().await;
    let refused = builder(&db).build_engine(&db).await;
    let Err(Error::Validation(report)) = &refused else {
        panic!("a guarded type without its guard built: {refused:?}");
    };
    let text = report.to_string();
    assert!(
        text.contains("GuardedNote") && text.contains("cohort_guard_delete is missing"),
        "{text}"
    );
    assert!(text.contains("GuardedContact"), "{text}");

    install_guards(&db).await;
    builder(&db)
        .build_engine(&db)
        .await
        .expect("the guarded model builds once its guards are installed");

    // Disabled, or replaced by another function: refused again.
    db.exec("ALTER TABLE guarded_notes DISABLE TRIGGER cohort_guard_update")
        .await;
    let refused = builder(&db).build_engine(&db).await;
    let Err(Error::Validation(report)) = &refused else {
        panic!("a disabled guard built: {refused:?}");
    };
    assert!(
        report
            .to_string()
            .contains("cohort_guard_update is disabled"),
        "{report}"
    );
    db.exec(
        "ALTER TABLE guarded_notes ENABLE TRIGGER cohort_guard_update; \
         CREATE FUNCTION public.no_guard() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RETURN NULL; END $$; \
         DROP TRIGGER cohort_guard_delete ON guarded_notes; \
         CREATE TRIGGER cohort_guard_delete AFTER DELETE ON guarded_notes FOR EACH STATEMENT EXECUTE FUNCTION public.no_guard();",
    )
    .await;
    let refused = builder(&db).build_engine(&db).await;
    let Err(Error::Validation(report)) = &refused else {
        panic!("a guard running another function built: {refused:?}");
    };
    assert!(
        report
            .to_string()
            .contains("cohort_guard_delete runs another or an older guard function"),
        "{report}"
    );
}

// contract: H17
#[tokio::test]
async fn plain_sql_cannot_delete_update_or_truncate_a_held_row_as_any_role() {
    let db = setup().await;
    install_guards(&db).await;
    let cohort = builder(&db).build_engine(&db).await.expect("model");
    let held = hold(&cohort, &db, NOTE_TYPE, "3").await;
    // A host role with every privilege on the table, none on Cohort's.
    // Roles are the cluster's: one of this database's own name.
    let role = format!("{}_host", db.name());
    db.exec(&format!(
        "CREATE ROLE \"{role}\" NOLOGIN; GRANT ALL ON public.guarded_notes TO \"{role}\";"
    ))
    .await;
    let host = Some(role.as_str());

    let refused = as_role(&db, host, "DELETE FROM guarded_notes WHERE id IN (2, 3)").await;
    let Err((code, message)) = &refused else {
        panic!("a held row was deleted: {refused:?}");
    };
    assert_eq!(code, cohort::schema::GUARD_SQLSTATE);
    assert!(
        message.contains(&held.to_string()) && message.contains("row 3"),
        "{message}"
    );
    // The whole statement rolled back: row 2 is there too.
    assert_eq!(
        count(&db, "SELECT count(*) FROM guarded_notes WHERE id IN (2, 3)").await,
        2
    );
    assert_eq!(
        as_role(&db, host, "DELETE FROM guarded_notes WHERE id = 2").await,
        Ok(1)
    );

    // Updates: a column the guard does not allow, the key, the tenant are
    // refused; the allowed column passes.
    for sql in [
        "UPDATE guarded_notes SET body = 'edited' WHERE id = 3",
        "UPDATE guarded_notes SET id = 300 WHERE id = 3",
        "UPDATE guarded_notes SET tenant_id = gen_random_uuid() WHERE id = 3",
    ] {
        let refused = as_role(&db, host, sql).await;
        assert!(
            matches!(&refused, Err((code, m)) if code == cohort::schema::GUARD_SQLSTATE && m.contains(&held.to_string())),
            "{sql}: {refused:?}"
        );
    }
    assert_eq!(
        as_role(
            &db,
            host,
            "UPDATE guarded_notes SET last_viewed_at = now() WHERE id = 3"
        )
        .await,
        Ok(1)
    );
    assert_eq!(
        as_role(
            &db,
            host,
            "UPDATE guarded_notes SET body = 'edited' WHERE id = 4"
        )
        .await,
        Ok(1),
        "an unheld row changes freely"
    );
    let truncate = as_role(&db, host, "TRUNCATE guarded_notes").await;
    assert!(
        matches!(&truncate, Err((code, _)) if code == cohort::schema::GUARD_SQLSTATE),
        "{truncate:?}"
    );
    // The superuser is refused too.
    let refused = as_role(&db, None, "DELETE FROM guarded_notes WHERE id = 3").await;
    assert!(
        matches!(&refused, Err((code, _)) if code == cohort::schema::GUARD_SQLSTATE),
        "{refused:?}"
    );
    assert_eq!(
        count(
            &db,
            "SELECT count(*) FROM guarded_notes WHERE id = 3 AND body = 'note 3'"
        )
        .await,
        1
    );

    // Once the hold is removed, the row can go.
    let mut conn = db.engine_pool().acquire().await.expect("conn");
    cohort
        .holds()
        .remove(&mut conn, held, Utc::now() - Duration::milliseconds(1))
        .await
        .expect("remove");
    assert_eq!(
        as_role(&db, host, "DELETE FROM guarded_notes WHERE id = 3").await,
        Ok(1)
    );
    db.exec(&format!("DROP OWNED BY \"{role}\"; DROP ROLE \"{role}\""))
        .await;
}

// contract: H17
// The engine runs as the least-privileged role in the suite's second pass
// (COHORT_TEST_ROLE=least): the guard's function reads the holds as its
// owner, so the generated grants need nothing more for it.
#[tokio::test]
async fn cohorts_sweeps_erasure_and_host_deletions_work_on_guarded_tables() {
    let db = setup().await;
    install_guards(&db).await;
    let cohort = builder(&db).build_engine(&db).await.expect("model");
    hold(&cohort, &db, NOTE_TYPE, "5").await;
    hold(&cohort, &db, "4a7c2e10-9f3b-4d1a-8e55-0c6b7d2f1a02", "2").await;

    // A host deletion of an unheld row through Cohort; of the held one, refused.
    grant_host(&db, "DELETE ON public.guarded_notes").await;
    let mut conn = db.engine_pool().acquire().await.expect("conn");
    for (id, deleted) in [(10i64, true), (5, false)] {
        let outcome = cohort
            .deletion()
            .execute(
                &mut conn,
                &[Target::new(
                    Uuid::parse_str(NOTE_TYPE).expect("uuid"),
                    id.to_string(),
                    Some(tenant_a()),
                )],
                move |c| {
                    Box::pin(async move {
                        sqlx::query("DELETE FROM guarded_notes WHERE id = $1")
                            .bind(id)
                            .execute(&mut *c)
                            .await?;
                        Ok::<_, sqlx::Error>(())
                    })
                },
            )
            .await
            .unwrap_or_else(|e| panic!("deletion of {id}: {e:?}"));
        assert_eq!(
            matches!(outcome, DeletionOutcome::Deleted(())),
            deleted,
            "{id}: {outcome:?}"
        );
    }
    drop(conn);

    // The erasure of note 1's author, then a sweep: every unheld row goes.
    let erased = cohort
        .erase(&scope_a(), Utc::now(), ErasureRequest::new(subject()))
        .await
        .expect("erasure on a guarded table");
    assert_eq!(erased.affected(), 1);
    let result = cohort.sweep(&scope_a(), Utc::now()).await.expect("sweep");
    assert_eq!(result.status, cohort::RunStatus::Succeeded, "{result:?}");
    let notes = result
        .summaries
        .iter()
        .find(|s| s.entity_type == "GuardedNote")
        .expect("notes");
    assert_eq!((notes.affected, notes.held), (7, 1), "{notes:?}");
    let contacts = result
        .summaries
        .iter()
        .find(|s| s.entity_type == "GuardedContact")
        .expect("contacts");
    assert_eq!((contacts.affected, contacts.held), (4, 1), "{contacts:?}");
    let left: Vec<i64> = sqlx::query_scalar("SELECT id FROM guarded_notes ORDER BY id")
        .fetch_all(db.pool())
        .await
        .expect("notes");
    assert_eq!(left, vec![5]);
    assert_eq!(
        count(
            &db,
            "SELECT count(*) FROM guarded_contacts WHERE email IS NULL"
        )
        .await,
        4
    );
}

// contract: H17, MH1
#[tokio::test]
async fn plain_sql_cannot_delete_or_update_a_row_a_matter_covers() {
    let db = setup().await;
    install_guards(&db).await;
    let cohort = builder(&db).build_engine(&db).await.expect("model");
    let mut conn = db.engine_pool().acquire().await.expect("conn");
    let matter = cohort
        .matters()
        .create(
            &mut conn,
            cohort::holds::MatterRequest::subject(
                subject().to_string(),
                Some(tenant_a()),
                "litigation",
                "counsel",
            ),
        )
        .await
        .expect("matter");
    // A note by the subject written after the matter is covered too.
    db.exec(&format!(
        "INSERT INTO guarded_notes VALUES (11, '{t}', now(), '{s}', 'later', NULL)",
        t = tenant_a(),
        s = subject()
    ))
    .await;
    for sql in [
        "DELETE FROM guarded_notes WHERE id = 1",
        "DELETE FROM guarded_notes WHERE id = 11",
        "UPDATE guarded_notes SET body = 'edited' WHERE id = 1",
    ] {
        let refused = as_role(&db, None, sql).await;
        assert!(
            matches!(&refused, Err((code, m)) if code == cohort::schema::GUARD_SQLSTATE
                && m.contains(&matter.matter_id.to_string()) && m.contains("matter hold")),
            "{sql}: {refused:?}"
        );
    }
    assert_eq!(
        as_role(
            &db,
            None,
            "UPDATE guarded_notes SET last_viewed_at = now() WHERE id = 1"
        )
        .await,
        Ok(1)
    );
    assert_eq!(
        as_role(&db, None, "DELETE FROM guarded_notes WHERE id = 2").await,
        Ok(1),
        "another author's note goes"
    );
    // A type matter with a window over the contacts' anchors.
    let contacts = Uuid::parse_str("4a7c2e10-9f3b-4d1a-8e55-0c6b7d2f1a02").expect("uuid");
    let now = Utc::now();
    cohort
        .matters()
        .create(
            &mut conn,
            cohort::holds::MatterRequest::retained_type(contacts, Some(tenant_a()), "audit", "cfo")
                .anchor_window(
                    Some(now - Duration::days(41)),
                    Some(now - Duration::days(39)),
                ),
        )
        .await
        .expect("type matter");
    let refused = as_role(&db, None, "DELETE FROM guarded_contacts WHERE id = 3").await;
    assert!(
        matches!(&refused, Err((code, _)) if code == cohort::schema::GUARD_SQLSTATE),
        "{refused:?}"
    );
    // Cohort's own sweep leaves the covered rows and does not trip the guard.
    let result = cohort.sweep(&scope_a(), Utc::now()).await.expect("sweep");
    assert_eq!(result.status, cohort::RunStatus::Succeeded, "{result:?}");
    assert_eq!(
        count(
            &db,
            "SELECT count(*) FROM guarded_notes WHERE id IN (1, 11)"
        )
        .await,
        2
    );
    assert_eq!(
        count(
            &db,
            "SELECT count(*) FROM guarded_contacts WHERE email IS NULL"
        )
        .await,
        0
    );
    // Released: the row can go.
    cohort
        .matters()
        .release(&mut conn, matter.matter_id)
        .await
        .expect("release");
    assert_eq!(
        as_role(&db, None, "DELETE FROM guarded_notes WHERE id = 1").await,
        Ok(1)
    );
}
