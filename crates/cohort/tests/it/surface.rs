//! The public surface: build warnings, named anonymisers with state, typed
//! helpers for entity ids, per-type soft-delete erasure, and serializable
//! results.

use crate::support;
use crate::support::fixtures::{db_with_tables, scope_a, tenant_a};
use crate::support::models::*;
use crate::support::{TestRules, count, db_with_cohort};
use chrono::{DateTime, Duration, Utc};
use cohort::holds::{HoldRequest, Target};
use cohort::{Capabilities, Cohort, ErasureRequest, Error, Period, Rule, Strategy};
use uuid::Uuid;

#[allow(dead_code, reason = "mirrors the table; Cohort reads its descriptor")]
#[derive(cohort::Retained)]
#[cohort(
    category = "keyed",
    anchor = "created_at",
    id = "2f6b1c0e-4d3a-4b8e-9a7f-1c2d3e4f5a6b",
    table = "keyed_contacts"
)]
struct KeyedContact {
    id: i64,
    tenant_id: Uuid,
    created_at: DateTime<Utc>,
    anonymised_at: Option<DateTime<Utc>>,
    #[cohort(anonymise_with = "email-pseudonym")]
    email: String,
    #[cohort(erasure_subject)]
    owner: Uuid,
}

fn keyed_rules() -> TestRules {
    TestRules::new().with(
        "keyed",
        Capabilities::only(Strategy::Anonymise),
        Rule::new(Period::days(30), Strategy::Anonymise),
    )
}

async fn keyed_db(with_indexes: bool) -> support::TestDb {
    let (db, _) = db_with_cohort("public").await;
    db.exec(
        "CREATE TABLE public.keyed_contacts (id bigint PRIMARY KEY, tenant_id uuid NOT NULL, \
           created_at timestamptz NOT NULL, anonymised_at timestamptz, email text NOT NULL, owner uuid NOT NULL); \
         INSERT INTO public.keyed_contacts VALUES \
           (1, '11111111-1111-1111-1111-111111111111', now() - interval '90 days', NULL, 'ann@example.org', gen_random_uuid()), \
           (2, '11111111-1111-1111-1111-111111111111', now() - interval '1 day', NULL, 'bob@example.org', gen_random_uuid());",
    )
    .await;
    if with_indexes {
        db.exec(
            "CREATE INDEX ON public.keyed_contacts (tenant_id, created_at, id); \
             CREATE INDEX ON public.keyed_contacts (owner);",
        )
        .await;
    }
    db
}

// contract: S4, M6
#[tokio::test]
async fn a_named_anonymiser_with_state_is_registered_on_the_builder_and_used() {
    let db = keyed_db(true).await;
    let key = String::from("k3y");
    let cohort = Cohort::builder(db.pool().clone())
        .rules(keyed_rules())
        .entity::<KeyedContact>()
        .anonymiser("email-pseudonym", move |v: Option<&str>| {
            v.map(|v| format!("{key}:{}", v.len()))
        })
        .build()
        .await
        .expect("model");
    let result = cohort.sweep(&scope_a(), Utc::now()).await.expect("sweep");
    assert_eq!(result.affected(), 1, "{result:#?}");
    let emails: Vec<String> =
        sqlx::query_scalar("SELECT email FROM public.keyed_contacts ORDER BY id")
            .fetch_all(db.pool())
            .await
            .expect("emails");
    assert_eq!(
        emails,
        vec!["k3y:15".to_owned(), "bob@example.org".to_owned()]
    );
}

// contract: V9, M6
#[tokio::test]
async fn a_named_anonymiser_nobody_registered_is_a_build_problem_listed_with_the_others() {
    let db = keyed_db(true).await;
    let err = Cohort::builder(db.pool().clone())
        .options(cohort::Options {
            batch_size: 0,
            ..cohort::Options::default()
        })
        .rules(keyed_rules())
        .entity::<KeyedContact>()
        .build()
        .await
        .expect_err("unregistered anonymiser");
    let Error::Validation(report) = err else {
        panic!("{err:?}");
    };
    assert_eq!(report.problems.len(), 2, "{report}");
    assert_eq!(report.problems[0].option, Some("batch_size"));
    let missing = &report.problems[1];
    assert_eq!(missing.type_name.as_deref(), Some("KeyedContact"));
    assert!(missing.problem.contains("\"email-pseudonym\""), "{report}");
    assert!(
        missing.fix.contains(".anonymiser(\"email-pseudonym\""),
        "{report}"
    );
}

#[tokio::test]
async fn missing_indexes_are_build_warnings_naming_the_statement_that_fixes_them() {
    let db = keyed_db(false).await;
    let build = || {
        Cohort::builder(db.pool().clone())
            .rules(keyed_rules())
            .entity::<KeyedContact>()
            .anonymiser("email-pseudonym", |v: Option<&str>| v.map(str::to_owned))
            .build()
    };
    let cohort = build().await.expect("warnings do not fail the build");
    let warnings: Vec<String> = cohort.warnings().iter().map(|w| w.fix.clone()).collect();
    assert_eq!(
        warnings,
        vec![
            "CREATE INDEX CONCURRENTLY ON \"public\".\"keyed_contacts\" (\"tenant_id\", \"created_at\", \"id\")"
                .to_owned(),
            "CREATE INDEX CONCURRENTLY ON \"public\".\"keyed_contacts\" (\"owner\")".to_owned(),
        ]
    );
    // The statements work as given.
    for statement in &warnings {
        sqlx::raw_sql(sqlx::AssertSqlSafe(statement.clone()))
            .execute(db.pool())
            .await
            .expect("the fix applies");
    }
    let cohort = build().await.expect("model");
    assert!(cohort.warnings().is_empty(), "{:?}", cohort.warnings());
}

// contract: E4
#[tokio::test]
async fn soft_delete_can_be_accepted_as_erasure_for_one_type_only() {
    let db = db_with_tables().await;
    let subject = uuid("aaaaaaaa-0000-0000-0000-000000000001");
    sqlx::query(
        "INSERT INTO user_records (id, tenant_id, created_at, user_id) VALUES (1, $1, now(), $2); \
         ",
    )
    .bind(tenant_a())
    .bind(subject)
    .execute(db.pool())
    .await
    .expect("record");
    sqlx::query(
        "INSERT INTO messages (id, tenant_id, sent_at, sender_email) VALUES (1, $1, now(), $2)",
    )
    .bind(tenant_a())
    .bind(subject.to_string())
    .execute(db.pool())
    .await
    .expect("message");
    let rules = TestRules::new()
        .with(
            "user-data",
            Capabilities::only(Strategy::SoftDelete),
            Rule::new(Period::days(30), Strategy::SoftDelete),
        )
        .with(
            "messages",
            Capabilities::only(Strategy::SoftDelete),
            Rule::new(Period::days(30), Strategy::SoftDelete),
        );
    let cohort = Cohort::builder(db.pool().clone())
        .rules(rules)
        .entity::<UserRecord>()
        .entity::<Message>()
        .build()
        .await;
    // Message has no soft-delete flag: the model refuses the capability, so
    // build with UserRecord alone and check the per-type opt-in there.
    assert!(cohort.is_err());
    let rules = TestRules::new().with(
        "user-data",
        Capabilities::only(Strategy::SoftDelete),
        Rule::new(Period::days(30), Strategy::SoftDelete),
    );
    let cohort = Cohort::builder(db.pool().clone())
        .rules(rules)
        .entity::<UserRecord>()
        .build()
        .await
        .expect("model");
    let refused = cohort
        .erase(&scope_a(), Utc::now(), ErasureRequest::new(subject))
        .await
        .expect_err("refused without the opt-in");
    assert!(
        matches!(&refused, Error::SoftDeleteErasureRefused { entity_types } if entity_types == &vec!["UserRecord"]),
        "{refused:?}"
    );
    let result = cohort
        .erase(
            &scope_a(),
            Utc::now(),
            ErasureRequest::new(subject).allow_soft_delete_for::<UserRecord>(),
        )
        .await
        .expect("accepted for this type");
    assert_eq!(result.affected(), 1);
    assert_eq!(
        count(
            &db,
            "SELECT count(*) FROM user_records WHERE id = 1 AND is_deleted"
        )
        .await,
        1
    );
}

#[tokio::test]
async fn entity_ids_come_from_the_type_and_results_serialize() {
    let db = db_with_tables().await;
    let id = Uuid::new_v4();
    sqlx::query("INSERT INTO session_notes (id, tenant_id, created_at, body) VALUES ($1, $2, now() - interval '40 days', 'b')")
        .bind(id)
        .bind(tenant_a())
        .execute(db.pool())
        .await
        .expect("note");
    let cohort = Cohort::builder(db.pool().clone())
        .rules(TestRules::new().with(
            "session-notes",
            Capabilities::only(Strategy::Purge),
            Rule::new(Period::days(30), Strategy::Purge),
        ))
        .entity::<SessionNote>()
        .build()
        .await
        .expect("model");
    let mut conn = db.pool().acquire().await.expect("connection");
    let hold = cohort
        .holds()
        .create(
            &mut conn,
            HoldRequest::of::<SessionNote>(id.to_string(), Some(tenant_a()), "case", Utc::now())
                .expires_at(Utc::now() + Duration::days(1)),
        )
        .await
        .expect("hold");
    assert_eq!(hold.entity_id, SessionNote::ENTITY_ID);
    assert!(
        cohort
            .holds()
            .is_held(
                &mut conn,
                &Target::of::<SessionNote>(id.to_string(), Some(tenant_a())),
                Utc::now()
            )
            .await
            .expect("is_held")
    );
    let result = cohort.sweep(&scope_a(), Utc::now()).await.expect("sweep");
    let json = serde_json::to_value(&result).expect("serializable");
    assert_eq!(json["status"], "Succeeded");
    assert_eq!(json["summaries"][0]["entity_type"], "SessionNote");
    assert_eq!(json["summaries"][0]["held"], 1);
    assert_eq!(
        json["summaries"][0]["applied_period"]["calendar"]["days"],
        30
    );
    let hold_json = serde_json::to_value(&hold).expect("serializable");
    assert_eq!(hold_json["record_id"], id.to_string());
}
