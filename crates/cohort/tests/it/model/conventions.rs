//! Global column conventions (contract M3): the soft-delete and anonymise
//! columns named once for every type, for soft deletion (S2) and
//! anonymisation (S3).

use crate::support::TestRules;
use crate::support::fixtures::{db_with_tables, entity_summary, fixed_now, scope_a, tenant_a};
use chrono::{DateTime, Duration, Utc};
use cohort::{Capabilities, Cohort, Conventions, Options, Period, Rule, RunStatus, Strategy};
use uuid::Uuid;

/// Soft-deleted through the global conventions: `gone` and `gone_at`; the
/// built-in names `is_deleted` and `deleted_at` are ordinary fields here.
#[allow(dead_code, reason = "mirrors a table; only its descriptor is read")]
#[derive(cohort::Retained)]
#[cohort(
    category = "parcels",
    anchor = "sent_at",
    id = "7a0d5c3e-1f2b-4c6d-8e9f-0a1b2c3d4e51",
    table = "parcels"
)]
struct Parcel {
    id: i64,
    tenant_id: Uuid,
    sent_at: DateTime<Utc>,
    gone: bool,
    gone_at: Option<DateTime<Utc>>,
    is_deleted: bool,
    deleted_at: Option<DateTime<Utc>>,
}

/// Anonymised through the global convention `scrubbed_at`; `anonymised_at`
/// is an ordinary field here.
#[allow(dead_code, reason = "mirrors a table; only its descriptor is read")]
#[derive(cohort::Retained)]
#[cohort(
    category = "calls",
    anchor = "called_at",
    id = "7a0d5c3e-1f2b-4c6d-8e9f-0a1b2c3d4e52",
    table = "calls"
)]
struct Call {
    id: i64,
    tenant_id: Uuid,
    called_at: DateTime<Utc>,
    scrubbed_at: Option<DateTime<Utc>>,
    anonymised_at: Option<DateTime<Utc>>,
    #[cohort(anonymise = "null")]
    phone: Option<String>,
}

// contract: M3, S2, S3
#[tokio::test]
async fn global_conventions_name_the_soft_delete_and_anonymise_columns() {
    let db = db_with_tables().await;
    db.exec(
        "CREATE TABLE public.parcels (id bigint PRIMARY KEY, tenant_id uuid NOT NULL, sent_at timestamptz NOT NULL, \
            gone boolean NOT NULL DEFAULT false, gone_at timestamptz, \
            is_deleted boolean NOT NULL DEFAULT false, deleted_at timestamptz); \
         CREATE TABLE public.calls (id bigint PRIMARY KEY, tenant_id uuid NOT NULL, called_at timestamptz NOT NULL, \
            scrubbed_at timestamptz, anonymised_at timestamptz, phone text);",
    )
    .await;
    let t = tenant_a();
    let old = fixed_now() - Duration::days(400);
    let young = fixed_now() - Duration::days(1);
    for (id, sent_at, gone) in [(1, old, false), (2, old, true), (3, young, false)] {
        sqlx::query("INSERT INTO parcels (id, tenant_id, sent_at, gone) VALUES ($1, $2, $3, $4)")
            .bind(id)
            .bind(t)
            .bind(sent_at)
            .bind(gone)
            .execute(db.pool())
            .await
            .expect("parcel");
    }
    // Row 2 carries the built-in anonymised-at, which is not this type's marker.
    for (id, called_at, builtin_stamp) in [(1, old, false), (2, old, true), (3, young, false)] {
        sqlx::query(
            "INSERT INTO calls (id, tenant_id, called_at, anonymised_at, phone) \
             VALUES ($1, $2, $3, CASE WHEN $4 THEN now() END, '+44 1234')",
        )
        .bind(id)
        .bind(t)
        .bind(called_at)
        .bind(builtin_stamp)
        .execute(db.pool())
        .await
        .expect("call");
    }
    let rules = TestRules::new()
        .with(
            "parcels",
            Capabilities::only(Strategy::SoftDelete),
            Rule::new(Period::days(30), Strategy::SoftDelete),
        )
        .with(
            "calls",
            Capabilities::only(Strategy::Anonymise),
            Rule::new(Period::days(30), Strategy::Anonymise),
        );
    let cohort = Cohort::builder(db.pool().clone())
        .options(Options {
            conventions: Conventions {
                soft_delete: "gone".into(),
                deleted_at: "gone_at".into(),
                anonymised_at: "scrubbed_at".into(),
                ..Conventions::default()
            },
            ..Options::default()
        })
        .rules(rules)
        .entity::<Parcel>()
        .entity::<Call>()
        .build()
        .await
        .expect("model through the global conventions");

    let result = cohort.sweep(&scope_a(), fixed_now()).await.expect("sweep");
    assert_eq!(result.status, RunStatus::Succeeded, "{result:#?}");
    assert_eq!(
        entity_summary(&result, "Parcel").affected,
        1,
        "an already gone parcel is not a candidate"
    );
    assert_eq!(
        entity_summary(&result, "Call").affected,
        2,
        "the built-in anonymised_at does not mark a call done"
    );
    let parcels: Vec<(i64, bool, bool, bool, bool)> = sqlx::query_as(
        "SELECT id, gone, gone_at IS NOT NULL, is_deleted, deleted_at IS NOT NULL FROM parcels ORDER BY id",
    )
    .fetch_all(db.pool())
    .await
    .expect("parcels");
    assert_eq!(
        parcels,
        vec![
            (1, true, true, false, false),
            (2, true, false, false, false),
            (3, false, false, false, false)
        ]
    );
    let calls: Vec<(i64, bool, Option<String>)> =
        sqlx::query_as("SELECT id, scrubbed_at IS NOT NULL, phone FROM calls ORDER BY id")
            .fetch_all(db.pool())
            .await
            .expect("calls");
    assert_eq!(
        calls,
        vec![
            (1, true, None),
            (2, true, None),
            (3, false, Some("+44 1234".into()))
        ]
    );
    let again = cohort.sweep(&scope_a(), fixed_now()).await.expect("again");
    assert_eq!(again.affected(), 0, "a second sweep changes nothing");
}
