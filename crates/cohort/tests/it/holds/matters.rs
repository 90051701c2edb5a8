//! Matter holds (contracts MH1-MH3): a data subject, or a retained type in a
//! tenant with an optional anchor window, protects every row in scope from
//! every strategy, erasure and host deletions, including rows written after
//! it; releasing it lets the next sweep proceed; bad requests are refused
//! with typed errors and nothing written; its creation, change and release
//! are links of the evidence chain, and a matter changed behind Cohort's
//! back is named by verification.

use crate::support::fixtures::{entity_summary, scope_a, subject, tenant_a, tenant_b};
use crate::support::{BuildEngine, TestDb, TestRules, count, db_with_cohort, grant_host};
use chrono::{DateTime, Duration, Utc};
use cohort::holds::{DeletionOutcome, HoldError, HoldRequest, MatterRequest, MatterScope, Target};
use cohort::{
    Capabilities, Cohort, CohortBuilder, ErasureRequest, Error, Period, Rule, Scope, Strategy,
};
use uuid::Uuid;

pub(crate) const NOTE: &str = "7d0e5a10-3b1c-4c7e-9a21-6f0b1c2d3e01";
pub(crate) const PROFILE: &str = "7d0e5a10-3b1c-4c7e-9a21-6f0b1c2d3e02";

const LOG: &str = "7d0e5a10-3b1c-4c7e-9a21-6f0b1c2d3e04";

fn id(s: &str) -> Uuid {
    Uuid::parse_str(s).expect("uuid")
}

/// Purged; its subject column is a uuid.
#[allow(dead_code, reason = "mirrors a table; only its descriptor is read")]
#[derive(cohort::Retained)]
#[cohort(
    category = "matter-notes",
    anchor = "created_at",
    id = "7d0e5a10-3b1c-4c7e-9a21-6f0b1c2d3e01",
    table = "matter_notes"
)]
pub(crate) struct MatterNote {
    id: i64,
    tenant_id: Uuid,
    created_at: DateTime<Utc>,
    #[cohort(erasure_subject)]
    author: Uuid,
}

/// Anonymised; its subject column is text.
#[allow(dead_code, reason = "mirrors a table; only its descriptor is read")]
#[derive(cohort::Retained)]
#[cohort(
    category = "matter-profiles",
    anchor = "created_at",
    id = "7d0e5a10-3b1c-4c7e-9a21-6f0b1c2d3e02",
    table = "matter_profiles"
)]
pub(crate) struct MatterProfile {
    id: i64,
    tenant_id: Uuid,
    created_at: DateTime<Utc>,
    anonymised_at: Option<DateTime<Utc>>,
    #[cohort(erasure_subject)]
    email: String,
    #[cohort(anonymise = "null")]
    phone: Option<String>,
}

/// Soft-deleted; its subject column is text.
#[allow(dead_code, reason = "mirrors a table; only its descriptor is read")]
#[derive(cohort::Retained)]
#[cohort(
    category = "matter-tickets",
    anchor = "created_at",
    id = "7d0e5a10-3b1c-4c7e-9a21-6f0b1c2d3e03",
    table = "matter_tickets"
)]
pub(crate) struct MatterTicket {
    id: i64,
    tenant_id: Uuid,
    created_at: DateTime<Utc>,
    is_deleted: bool,
    deleted_at: Option<DateTime<Utc>>,
    #[cohort(erasure_subject)]
    requester: String,
}

/// Tenantless, purged, without a subject column.
#[allow(dead_code, reason = "mirrors a table; only its descriptor is read")]
#[derive(cohort::Retained)]
#[cohort(
    category = "matter-log",
    anchor = "logged_at",
    id = "7d0e5a10-3b1c-4c7e-9a21-6f0b1c2d3e04",
    table = "matter_log",
    tenantless
)]
pub(crate) struct MatterLog {
    id: i64,
    logged_at: DateTime<Utc>,
}

pub(crate) const TABLES: &str = "\
    CREATE TABLE public.matter_notes (id bigint PRIMARY KEY, tenant_id uuid NOT NULL, \
        created_at timestamptz NOT NULL, author uuid NOT NULL); \
    CREATE TABLE public.matter_profiles (id bigint PRIMARY KEY, tenant_id uuid NOT NULL, \
        created_at timestamptz NOT NULL, anonymised_at timestamptz, email text NOT NULL, phone text); \
    CREATE TABLE public.matter_tickets (id bigint PRIMARY KEY, tenant_id uuid NOT NULL, \
        created_at timestamptz NOT NULL, is_deleted boolean NOT NULL DEFAULT false, deleted_at timestamptz, \
        requester text NOT NULL); \
    CREATE TABLE public.matter_log (id bigint PRIMARY KEY, logged_at timestamptz NOT NULL);";

pub(crate) fn rules() -> TestRules {
    let rule = |s: Strategy| Rule::new(Period::days(30), s);
    TestRules::new()
        .with(
            "matter-notes",
            Capabilities::only(Strategy::Purge),
            rule(Strategy::Purge),
        )
        .with(
            "matter-profiles",
            Capabilities::only(Strategy::Anonymise),
            rule(Strategy::Anonymise),
        )
        .with(
            "matter-tickets",
            Capabilities::only(Strategy::SoftDelete),
            rule(Strategy::SoftDelete),
        )
        .with(
            "matter-log",
            Capabilities::only(Strategy::Purge),
            rule(Strategy::Purge),
        )
}

pub(crate) fn builder(db: &TestDb) -> CohortBuilder {
    Cohort::builder(db.engine_pool().clone())
        .rules(rules())
        .entity::<MatterNote>()
        .entity::<MatterProfile>()
        .entity::<MatterTicket>()
        .entity::<MatterLog>()
}

/// Inserts row `n` of every tenant-scoped table for `tenant`, `age_days`
/// old, whose subject columns hold `who` (a uuid, as text in the text ones).
pub(crate) async fn rows(db: &TestDb, tenant: Uuid, ids: &[i64], age_days: i64, who: Uuid) {
    for n in ids {
        db.exec(&format!(
            "INSERT INTO matter_notes VALUES ({n}, '{tenant}', now() - interval '{age_days} days', '{who}'); \
             INSERT INTO matter_profiles VALUES ({n}, '{tenant}', now() - interval '{age_days} days', NULL, '{who}', 'p'); \
             INSERT INTO matter_tickets (id, tenant_id, created_at, requester) \
                 VALUES ({n}, '{tenant}', now() - interval '{age_days} days', '{who}');"
        ))
        .await;
    }
}

/// Rows 1-5 of tenant A, 40 days old: 1 and 2 of [`subject`], the rest of
/// others; rows 11-12 of tenant B of [`subject`].
pub(crate) async fn setup() -> (TestDb, Cohort) {
    let (db, _) = db_with_cohort("public").await;
    db.exec(TABLES).await;
    rows(&db, tenant_a(), &[1, 2], 40, subject()).await;
    for n in 3..=5 {
        rows(&db, tenant_a(), &[n], 40, Uuid::new_v4()).await;
    }
    rows(&db, tenant_b(), &[11, 12], 40, subject()).await;
    let cohort = builder(&db).build_engine(&db).await.expect("model");
    (db, cohort)
}

/// Which of the given ids of each table are untouched (present, not
/// anonymised, not soft-deleted).
async fn untouched(db: &TestDb, table: &str, ids: &[i64]) -> Vec<i64> {
    let changed = match table {
        "matter_profiles" => " AND anonymised_at IS NULL",
        "matter_tickets" => " AND NOT is_deleted",
        _ => "",
    };
    let list: Vec<String> = ids.iter().map(i64::to_string).collect();
    sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
        "SELECT id FROM {table} WHERE id IN ({}){changed} ORDER BY id",
        list.join(", ")
    )))
    .fetch_all(db.pool())
    .await
    .expect("ids")
}

const ALL: [&str; 3] = ["matter_notes", "matter_profiles", "matter_tickets"];

async fn conn(db: &TestDb) -> sqlx::pool::PoolConnection<sqlx::Postgres> {
    db.engine_pool().acquire().await.expect("conn")
}

// contract: MH1, MH2
#[tokio::test]
async fn a_subject_matter_protects_its_rows_before_and_after_it_from_every_strategy_until_released()
{
    let (db, cohort) = setup().await;
    let matter = cohort
        .matters()
        .create(
            &mut *conn(&db).await,
            MatterRequest::subject(
                subject().to_string(),
                Some(tenant_a()),
                "Litigation - case #12345",
                "legal@example.com",
            ),
        )
        .await
        .expect("matter");
    // A row of the subject written after the matter.
    rows(&db, tenant_a(), &[6], 40, subject()).await;
    // The preview counts the covered rows as held and names the matter;
    // a type it does not reach (the tenantless log) names none.
    let preview = cohort
        .preview(&scope_a(), Utc::now())
        .await
        .expect("preview");
    let notes = crate::support::fixtures::preview_entry(&preview, "MatterNote");
    assert_eq!((notes.eligible, notes.held), (3, 3), "{notes:?}");
    assert_eq!(notes.matters, vec![matter.matter_id]);
    let log = cohort
        .preview(&Scope::Tenantless, Utc::now())
        .await
        .expect("preview");
    assert!(
        crate::support::fixtures::preview_entry(&log, "MatterLog")
            .matters
            .is_empty()
    );

    let result = cohort.sweep(&scope_a(), Utc::now()).await.expect("sweep");
    for (table, name) in ALL
        .iter()
        .zip(["MatterNote", "MatterProfile", "MatterTicket"])
    {
        assert_eq!(
            untouched(&db, table, &[1, 2, 3, 4, 5, 6]).await,
            vec![1, 2, 6],
            "{table}: only the subject's rows stay"
        );
        let s = entity_summary(&result, name);
        assert_eq!((s.affected, s.held), (3, 3), "{name}: {s:?}");
    }
    // The matter covers tenant A only: tenant B's rows of the subject go.
    let b = Scope::Tenant(cohort::TenantContext::new(tenant_b()));
    cohort.sweep(&b, Utc::now()).await.expect("sweep B");
    assert!(untouched(&db, "matter_notes", &[11, 12]).await.is_empty());

    // Erasure of the subject leaves every covered row.
    let erased = cohort
        .erase(
            &scope_a(),
            Utc::now(),
            ErasureRequest::new(subject()).allow_soft_delete(),
        )
        .await
        .expect("erasure");
    assert_eq!(erased.affected(), 0, "{erased:?}");
    assert_eq!(
        untouched(&db, "matter_notes", &[1, 2, 6]).await,
        vec![1, 2, 6]
    );

    // Release: the next sweep takes them, all at once.
    let released = cohort
        .matters()
        .release(&mut *conn(&db).await, matter.matter_id)
        .await
        .expect("release");
    assert!(released.released_at.is_some());
    assert!(!released.is_active_at(Utc::now()));
    let result = cohort.sweep(&scope_a(), Utc::now()).await.expect("sweep");
    for table in ALL {
        assert!(
            untouched(&db, table, &[1, 2, 6]).await.is_empty(),
            "{table}: released rows are swept"
        );
    }
    assert_eq!(entity_summary(&result, "MatterNote").held, 0);
    let again = cohort
        .matters()
        .release(&mut *conn(&db).await, matter.matter_id)
        .await;
    assert!(
        matches!(again, Err(Error::Hold(HoldError::MatterReleased { .. }))),
        "{again:?}"
    );
}

// contract: MH1
#[tokio::test]
async fn a_type_matter_protects_the_rows_of_its_anchor_window_including_later_ones() {
    let (db, cohort) = setup().await;
    // Notes 1-5 are 40 days old; add 50-day-old ones (7, 8).
    rows(&db, tenant_a(), &[7, 8], 50, Uuid::new_v4()).await;
    let now = Utc::now();
    cohort
        .matters()
        .create(
            &mut *conn(&db).await,
            MatterRequest::retained_type(
                id(NOTE),
                Some(tenant_a()),
                "Audit FY25",
                "cfo@example.com",
            )
            .anchor_window(
                Some(now - Duration::days(45)),
                Some(now - Duration::days(35)),
            ),
        )
        .await
        .expect("window matter");
    // Tickets: the whole type of tenant A.
    cohort
        .matters()
        .create(
            &mut *conn(&db).await,
            MatterRequest::of::<MatterTicket>(
                Some(tenant_a()),
                "Regulator inquiry",
                "dpo@example.com",
            ),
        )
        .await
        .expect("type matter");
    // Written after both: a 38-day-old note (in the window), a 60-day-old one.
    rows(&db, tenant_a(), &[9], 38, Uuid::new_v4()).await;
    rows(&db, tenant_a(), &[10], 60, Uuid::new_v4()).await;

    let result = cohort.sweep(&scope_a(), Utc::now()).await.expect("sweep");
    assert_eq!(
        untouched(&db, "matter_notes", &[1, 2, 3, 4, 5, 7, 8, 9, 10]).await,
        vec![1, 2, 3, 4, 5, 9],
        "notes inside the window stay, those outside go"
    );
    assert_eq!(
        untouched(&db, "matter_tickets", &[1, 2, 3, 4, 5, 7, 8, 9, 10]).await,
        vec![1, 2, 3, 4, 5, 7, 8, 9, 10],
        "every ticket of the tenant stays"
    );
    assert_eq!(
        untouched(&db, "matter_profiles", &[1, 2, 3, 4, 5]).await,
        Vec::<i64>::new(),
        "profiles are not covered"
    );
    let tickets = entity_summary(&result, "MatterTicket");
    assert_eq!((tickets.affected, tickets.held), (0, 9), "{tickets:?}");
    // Tenant B's tickets are not covered.
    let b = Scope::Tenant(cohort::TenantContext::new(tenant_b()));
    cohort.sweep(&b, Utc::now()).await.expect("sweep B");
    assert!(untouched(&db, "matter_tickets", &[11, 12]).await.is_empty());
}

// contract: MH1, MH2
#[tokio::test]
async fn host_deletions_and_is_held_respect_matters_and_protection_names_them() {
    let (db, cohort) = setup().await;
    let mut c = conn(&db).await;
    let matter = cohort
        .matters()
        .create(
            &mut c,
            MatterRequest::subject(subject().to_string(), Some(tenant_a()), "case 9", "counsel")
                .entities([id(NOTE)]),
        )
        .await
        .expect("matter");
    let hold = cohort
        .holds()
        .create(
            &mut c,
            HoldRequest::new(id(NOTE), "1", Some(tenant_a()), "row hold", Utc::now()),
        )
        .await
        .expect("hold");
    let target = |n: i64| Target::new(id(NOTE), n.to_string(), Some(tenant_a()));
    let p = cohort
        .matters()
        .protection(&mut c, &target(1), Utc::now())
        .await
        .expect("protection");
    assert_eq!(
        (p.holds.clone(), p.matters.clone()),
        (vec![hold.hold_id], vec![matter.matter_id])
    );
    let p = cohort
        .matters()
        .protection(&mut c, &target(2), Utc::now())
        .await
        .expect("protection");
    assert_eq!(
        (p.holds.len(), p.matters.clone()),
        (0, vec![matter.matter_id])
    );
    assert!(
        cohort
            .holds()
            .is_held(&mut c, &target(2), Utc::now())
            .await
            .expect("is_held")
    );
    assert!(
        !cohort
            .holds()
            .is_held(&mut c, &target(3), Utc::now())
            .await
            .expect("is_held")
    );
    // Before the matter existed, row 2 was not held.
    assert!(
        !cohort
            .holds()
            .is_held(&mut c, &target(2), matter.created_at - Duration::seconds(1))
            .await
            .expect("is_held")
    );
    // Profiles are not named by the matter.
    let profile = Target::new(id(PROFILE), "2", Some(tenant_a()));
    assert!(
        !cohort
            .holds()
            .is_held(&mut c, &profile, Utc::now())
            .await
            .expect("is_held")
    );

    grant_host(&db, "DELETE ON public.matter_notes").await;
    let outcome = cohort
        .deletion()
        .execute(&mut c, &[target(3), target(2)], |tx| {
            Box::pin(async move {
                sqlx::query("DELETE FROM matter_notes WHERE id IN (2, 3)")
                    .execute(&mut *tx)
                    .await?;
                Ok::<_, sqlx::Error>(())
            })
        })
        .await
        .expect("deletion");
    assert_eq!(
        outcome,
        DeletionOutcome::Protected {
            held: vec![target(2)]
        }
    );
    assert_eq!(
        count(&db, "SELECT count(*) FROM matter_notes WHERE id IN (2, 3)").await,
        2
    );
    let outcome = cohort
        .deletion()
        .execute(&mut c, &[target(3)], |tx| {
            Box::pin(async move {
                sqlx::query("DELETE FROM matter_notes WHERE id = 3")
                    .execute(&mut *tx)
                    .await?;
                Ok::<_, sqlx::Error>(())
            })
        })
        .await
        .expect("deletion");
    assert_eq!(outcome, DeletionOutcome::Deleted(()));
}

// contract: MH2
#[tokio::test]
async fn bad_matter_requests_are_refused_with_typed_errors_and_nothing_is_written() {
    let (db, cohort) = setup().await;
    let mut c = conn(&db).await;
    let now = Utc::now();
    let note = id(NOTE);
    type Expect = fn(&HoldError) -> bool;
    let cases: Vec<(MatterRequest, Expect)> = vec![
        (
            MatterRequest::subject("x", Some(tenant_a()), " ", "owner"),
            |e| matches!(e, HoldError::EmptyReason),
        ),
        (
            MatterRequest::subject("x", Some(tenant_a()), "reason", ""),
            |e| matches!(e, HoldError::EmptyOwner),
        ),
        (
            MatterRequest::subject("", Some(tenant_a()), "reason", "owner"),
            |e| matches!(e, HoldError::InvalidMatterSubject),
        ),
        (
            MatterRequest::subject("a\0b", Some(tenant_a()), "reason", "owner"),
            |e| matches!(e, HoldError::InvalidMatterSubject),
        ),
        (
            MatterRequest::retained_type(note, Some(tenant_a()), "reason", "owner")
                .anchor_window(Some(now), Some(now - Duration::days(1))),
            |e| matches!(e, HoldError::WindowEndsBeforeStart { .. }),
        ),
        (
            MatterRequest::retained_type(note, None, "reason", "owner"),
            |e| matches!(e, HoldError::TenantRequired { .. }),
        ),
        (
            MatterRequest::retained_type(Uuid::new_v4(), Some(tenant_a()), "reason", "owner"),
            |e| matches!(e, HoldError::UnknownEntity { .. }),
        ),
        // Tenantless types have no subject column here: nothing to match.
        (MatterRequest::subject("x", None, "reason", "owner"), |e| {
            matches!(e, HoldError::NoSubjectColumn)
        }),
        (
            MatterRequest::subject("x", None, "reason", "owner").entities([id(LOG)]),
            |e| matches!(e, HoldError::NoSubjectColumn),
        ),
        (
            MatterRequest::subject("x", Some(tenant_a()), "reason", "owner").entities([id(LOG)]),
            |e| matches!(e, HoldError::TenantNotAllowed { .. }),
        ),
    ];
    for (request, expected) in cases {
        let got = cohort.matters().create(&mut c, request.clone()).await;
        match &got {
            Err(Error::Hold(e)) if expected(e) => {}
            other => panic!("{request:?}: {other:?}"),
        }
    }
    assert_eq!(
        count(&db, "SELECT count(*) FROM retention_matters").await,
        0
    );
    assert_eq!(
        count(&db, "SELECT count(*) FROM retention_matter_events").await,
        0
    );

    // A duplicate id; an extension that would shorten it; unknown ids.
    let m = cohort
        .matters()
        .create(
            &mut c,
            MatterRequest::of::<MatterNote>(Some(tenant_a()), "reason", "owner")
                .expires_at(now + Duration::days(10)),
        )
        .await
        .expect("matter");
    let dup = cohort
        .matters()
        .create(
            &mut c,
            MatterRequest::of::<MatterNote>(Some(tenant_a()), "reason", "owner")
                .matter_id(m.matter_id),
        )
        .await;
    assert!(
        matches!(dup, Err(Error::Hold(HoldError::DuplicateMatterId { .. }))),
        "{dup:?}"
    );
    let shorter = cohort
        .matters()
        .extend(&mut c, m.matter_id, Some(now + Duration::days(5)))
        .await;
    assert!(
        matches!(
            shorter,
            Err(Error::Hold(HoldError::ExpiryNotExtended { .. }))
        ),
        "{shorter:?}"
    );
    let unknown = cohort.matters().release(&mut c, Uuid::new_v4()).await;
    assert!(
        matches!(unknown, Err(Error::Hold(HoldError::NoSuchMatter { .. }))),
        "{unknown:?}"
    );
    let unknown = cohort.matters().report(&mut c, Uuid::new_v4()).await;
    assert!(
        matches!(unknown, Err(Error::Hold(HoldError::NoSuchMatter { .. }))),
        "{unknown:?}"
    );
    assert_eq!(
        count(&db, "SELECT count(*) FROM retention_matters").await,
        1
    );
}

// contract: MH3, MH2
#[tokio::test]
async fn a_matters_report_counts_what_it_protects_now_per_type_and_says_when_a_subject_matches_nothing()
 {
    let (db, cohort) = setup().await;
    let mut c = conn(&db).await;
    let by_uuid = cohort
        .matters()
        .create(
            &mut c,
            MatterRequest::subject(subject().to_string(), Some(tenant_a()), "case 1", "counsel"),
        )
        .await
        .expect("matter");
    // An upper-case spelling of the same uuid: the uuid column matches it
    // in its own type; the text columns compare exactly and do not.
    let upper = cohort
        .matters()
        .create(
            &mut c,
            MatterRequest::subject(
                subject().to_string().to_uppercase(),
                Some(tenant_a()),
                "case 2",
                "counsel",
            ),
        )
        .await
        .expect("matter");
    let by_email = cohort
        .matters()
        .create(
            &mut c,
            MatterRequest::subject("alice@example.org", Some(tenant_a()), "case 3", "counsel"),
        )
        .await
        .expect("matter");
    rows(&db, tenant_a(), &[6], 40, subject()).await;

    let report = cohort
        .matters()
        .report(&mut c, by_uuid.matter_id)
        .await
        .expect("report");
    let per: Vec<(String, u64, bool)> = report
        .types
        .iter()
        .map(|t| (t.entity_type.clone(), t.protected_rows, t.note.is_some()))
        .collect();
    assert_eq!(
        per,
        vec![
            ("MatterNote".to_owned(), 3, false),
            ("MatterProfile".to_owned(), 3, false),
            ("MatterTicket".to_owned(), 3, false),
        ]
    );
    let report = cohort
        .matters()
        .report(&mut c, upper.matter_id)
        .await
        .expect("report");
    let rows_of = |r: &cohort::holds::MatterReport, t: &str| {
        r.types
            .iter()
            .find(|x| x.entity_type == t)
            .map(|x| x.protected_rows)
    };
    assert_eq!(rows_of(&report, "MatterNote"), Some(3));
    assert_eq!(rows_of(&report, "MatterProfile"), Some(0));
    let report = cohort
        .matters()
        .report(&mut c, by_email.matter_id)
        .await
        .expect("report");
    let note = report
        .types
        .iter()
        .find(|x| x.entity_type == "MatterNote")
        .expect("notes");
    assert_eq!(note.protected_rows, 0);
    assert!(
        note.note
            .as_deref()
            .is_some_and(|n| n.contains("can hold the subject")),
        "{note:?}"
    );
    // Released: protects nothing now.
    cohort
        .matters()
        .release(&mut c, by_uuid.matter_id)
        .await
        .expect("release");
    let report = cohort
        .matters()
        .report(&mut c, by_uuid.matter_id)
        .await
        .expect("report");
    assert!(
        report.types.iter().all(|t| t.protected_rows == 0),
        "{report:?}"
    );
    assert!(matches!(report.matter.scope, MatterScope::Subject { .. }));
    let listed = cohort.matters().list(&mut c).await.expect("list");
    assert_eq!(listed.len(), 3);
    assert_eq!(listed[0].owner, "counsel");
}

// contract: MH3, EV1
#[tokio::test]
async fn matter_creation_extension_and_release_are_chain_links_and_tampering_is_named() {
    let (db, cohort) = setup().await;
    let mut c = conn(&db).await;
    let now = Utc::now();
    let m = cohort
        .matters()
        .create(
            &mut c,
            MatterRequest::of::<MatterNote>(Some(tenant_a()), "case", "counsel")
                .expires_at(now + Duration::days(1)),
        )
        .await
        .expect("matter");
    let extended = cohort
        .matters()
        .extend(&mut c, m.matter_id, Some(now + Duration::days(30)))
        .await
        .expect("extend");
    assert!(extended.expires_at > m.expires_at);
    cohort
        .matters()
        .release(&mut c, m.matter_id)
        .await
        .expect("release");
    let events: Vec<String> =
        sqlx::query_scalar("SELECT event FROM retention_matter_events ORDER BY chain_seq")
            .fetch_all(db.pool())
            .await
            .expect("events");
    assert_eq!(events, ["Created", "Changed", "Released"]);
    let schema = cohort::schema::SchemaName::public();
    let mut admin = db.connect().await;
    let report = cohort::evidence::verify(&mut admin, &schema)
        .await
        .expect("verify");
    assert!(report.is_intact(), "{report}");
    assert_eq!(report.matter_links, 3);

    // A matter row rewritten with Cohort's triggers off: named as changed.
    db.exec(
        "SET session_replication_role = replica; \
         UPDATE retention_matters SET released_at = NULL, reason = 'other'; \
         SET session_replication_role = origin;",
    )
    .await;
    let report = cohort::evidence::verify(&mut admin, &schema)
        .await
        .expect("verify");
    assert!(
        report
            .problems
            .iter()
            .any(|p| p.table == cohort::evidence::ChainTable::Matter
                && p.row == m.matter_id.to_string()
                && p.kind == cohort::evidence::ProblemKind::Changed),
        "{report}"
    );
    // An event deleted: the chain has a gap.
    db.exec("DELETE FROM retention_matter_events WHERE chain_seq = 2")
        .await;
    let report = cohort::evidence::verify(&mut admin, &schema)
        .await
        .expect("verify");
    assert!(
        report
            .problems
            .iter()
            .any(|p| p.table == cohort::evidence::ChainTable::Matter
                && matches!(
                    p.kind,
                    cohort::evidence::ProblemKind::Missing { from: 2, to: 2 }
                )),
        "{report}"
    );
}

// contract: MH1, H16
#[tokio::test]
async fn a_matter_inserted_with_plain_sql_is_normalised_fenced_and_protects() {
    let (db, cohort) = setup().await;
    // Types named twice and out of order, a created-at in the future.
    db.exec(&format!(
        "INSERT INTO retention_matters (matter_id, tenant_id, scope_kind, subject, entity_ids, reason, owner, created_at) \
         VALUES ('00000000-0000-0000-0000-0000000000aa', '{t}', 'Subject', '{s}', \
                 ARRAY['{p}', '{n}', '{p}']::uuid[], 'sql', 'dba', now() + interval '1 day')",
        t = tenant_a(),
        s = subject(),
        p = PROFILE,
        n = NOTE
    ))
    .await;
    let (ids, future): (Vec<Uuid>, bool) =
        sqlx::query_as("SELECT entity_ids, created_at > now() FROM retention_matters")
            .fetch_one(db.pool())
            .await
            .expect("matter");
    let mut sorted = vec![id(PROFILE), id(NOTE)];
    sorted.sort();
    assert_eq!(ids, sorted);
    assert!(!future, "created-at is capped at the database clock");
    // It moved the covered types' holds version (what batch loops watch).
    assert_eq!(
        count(
            &db,
            &format!(
                "SELECT count(*) FROM retention_entities WHERE holds_version > 0 \
                 AND retained_entity_id IN ('{NOTE}', '{PROFILE}')"
            )
        )
        .await,
        2
    );
    let refused = sqlx::query(
        "INSERT INTO retention_matters (matter_id, tenant_id, scope_kind, retained_entity_id, reason, owner) \
         VALUES (gen_random_uuid(), gen_random_uuid(), 'Type', gen_random_uuid(), 'sql', 'dba')",
    )
    .execute(db.pool())
    .await;
    assert!(
        matches!(&refused, Err(sqlx::Error::Database(e)) if e.code().as_deref() == Some("23503")),
        "{refused:?}"
    );
    let refused = sqlx::query("UPDATE retention_matters SET subject = 'someone else'")
        .execute(db.pool())
        .await;
    assert!(refused.is_err(), "a matter's scope cannot change");

    cohort.sweep(&scope_a(), Utc::now()).await.expect("sweep");
    assert_eq!(untouched(&db, "matter_notes", &[1, 2, 3]).await, vec![1, 2]);
    assert_eq!(
        untouched(&db, "matter_profiles", &[1, 2, 3]).await,
        vec![1, 2]
    );
    assert!(untouched(&db, "matter_tickets", &[1, 2]).await.is_empty());
}

// contract: MH3
#[tokio::test]
async fn an_erasure_certificate_names_the_matters_that_kept_rows() {
    let (db, _) = db_with_cohort("public").await;
    db.exec(TABLES).await;
    rows(&db, tenant_a(), &[1, 2], 40, subject()).await;
    let key = b"certificate key".to_vec();
    let cohort = builder(&db)
        .subject_key(key.clone())
        .build_engine(&db)
        .await
        .expect("model");
    let mut c = conn(&db).await;
    let kept = cohort
        .matters()
        .create(
            &mut c,
            MatterRequest::subject(subject().to_string(), Some(tenant_a()), "case 7", "counsel")
                .entities([id(NOTE)]),
        )
        .await
        .expect("matter");
    // A matter of another tenant, and one over a type with nothing held:
    // neither kept a row of this erasure.
    cohort
        .matters()
        .create(
            &mut c,
            MatterRequest::subject(subject().to_string(), Some(tenant_b()), "other", "counsel"),
        )
        .await
        .expect("matter");
    let run = cohort
        .erase(
            &scope_a(),
            Utc::now(),
            ErasureRequest::new(subject()).allow_soft_delete(),
        )
        .await
        .expect("erasure");
    assert_eq!(entity_summary(&run, "MatterNote").held, 2);
    assert_eq!(entity_summary(&run, "MatterProfile").affected, 2);
    let mut admin = db.connect().await;
    let subject_text = subject().to_string();
    let cert = cohort::evidence::certificate(
        &mut admin,
        &cohort::schema::SchemaName::public(),
        run.run_id,
        &cohort::evidence::CertificateOptions {
            subject: &subject_text,
            subject_key: &key,
            subject_in_clear: false,
        },
    )
    .await
    .expect("certificate");
    let named: Vec<Uuid> = cert.matters.iter().map(|m| m.matter_id).collect();
    assert_eq!(named, vec![kept.matter_id], "{cert}");
    assert!(cert.to_string().contains(&kept.matter_id.to_string()));
    assert_eq!(cert.matters[0].owner, "counsel");

    // The auditor's report lists the active matters with owner, reason and
    // what they protect.
    let report = cohort::evidence::audit_report(
        &mut admin,
        &cohort::schema::SchemaName::public(),
        &cohort::evidence::ReportOptions::new(cohort::evidence::TimeRange::all()),
    )
    .await
    .expect("report");
    let listed = report
        .active_matters
        .items
        .iter()
        .find(|m| m.matter_id == kept.matter_id)
        .expect("the matter is listed");
    assert_eq!(
        (listed.owner.as_str(), listed.reason.as_str()),
        ("counsel", "case 7")
    );
    // The types it covers by name, not by retained-entity id.
    assert!(
        listed.scope.contains(&subject_text)
            && listed.scope.contains("MatterNote")
            && !listed.scope.contains(NOTE),
        "{listed:?}"
    );
    assert_eq!(report.active_matters.items.len(), 2);
    assert_eq!(report.active_matters.total, 2);
    let html = report.to_html().expect("html");
    assert!(html.contains(&kept.matter_id.to_string()) && html.contains("Active matter holds"));
}

// contract: MH4
// The ratio of MH4 is measured by `cohort-bench --bin matters`
// (docs/performance.md, "Matter holds"); this checks what a test can: a
// matter over every row of a large type writes one row, no hold per record,
// and a sweep beside it changes none of the covered rows.
#[tokio::test]
async fn a_matter_over_many_rows_writes_no_per_row_hold() {
    let (db, cohort) = setup().await;
    db.exec(&format!(
        "INSERT INTO matter_notes SELECT g, '{t}', now() - interval '40 days', '{s}' \
         FROM generate_series(100, 20099) g",
        t = tenant_a(),
        s = subject()
    ))
    .await;
    let mut c = conn(&db).await;
    let m = cohort
        .matters()
        .create(
            &mut c,
            MatterRequest::subject(subject().to_string(), Some(tenant_a()), "big", "counsel")
                .entities([id(NOTE)]),
        )
        .await
        .expect("matter");
    assert_eq!(count(&db, "SELECT count(*) FROM retention_holds").await, 0);
    assert_eq!(
        count(&db, "SELECT count(*) FROM retention_matters").await,
        1
    );
    let result = cohort.sweep(&scope_a(), Utc::now()).await.expect("sweep");
    let notes = entity_summary(&result, "MatterNote");
    assert_eq!((notes.affected, notes.held), (3, 20_002), "{notes:?}");
    assert_eq!(count(&db, "SELECT count(*) FROM retention_holds").await, 0);
    let report = cohort
        .matters()
        .report(&mut c, m.matter_id)
        .await
        .expect("report");
    assert_eq!(report.types[0].protected_rows, 20_002);
}
