//! Start-up validation through the public API: host types derived with
//! `#[derive(cohort::Retained)]`, their tables created in SQL, and
//! `Cohort::builder(..).build()` judged by the problems it reports.
#![allow(
    dead_code,
    reason = "the host row types exist for their descriptors; no test reads their fields"
)]

use crate::support::{TestDb, db_with_cohort};
use chrono::{DateTime, Utc};
use cohort::policy::ProviderError;
use cohort::{
    Capabilities, Cohort, CohortBuilder, Error, Options, ResolutionContext, Rule, RuleProvider,
    Strategy, ValidationProblem,
};
use futures_util::future::BoxFuture;
use uuid::Uuid;

// ---------------------------------------------------------------------------
// Harness

/// Categories used by these tests and what they may resolve to.
struct TestRules;

impl RuleProvider for TestRules {
    fn capabilities(&self, category: &str) -> Option<Capabilities> {
        match category {
            "purge" => Some(Capabilities::only(Strategy::Purge)),
            "soft" => Some(Capabilities::only(Strategy::SoftDelete)),
            "anon" => Some(Capabilities::only(Strategy::Anonymise)),
            "keep" => Some(Capabilities::only(Strategy::Exempt)),
            "soft_anon" => Some(Capabilities::only(Strategy::SoftDelete).and(Strategy::Anonymise)),
            _ => None,
        }
    }

    fn resolve<'a>(
        &'a self,
        _ctx: ResolutionContext<'a>,
    ) -> BoxFuture<'a, Result<Option<Rule>, ProviderError>> {
        Box::pin(async { Ok(None) })
    }
}

/// A provider that declares exactly one category.
struct Declares(&'static str, Strategy);

impl RuleProvider for Declares {
    fn capabilities(&self, category: &str) -> Option<Capabilities> {
        (category == self.0).then(|| Capabilities::only(self.1))
    }

    fn resolve<'a>(
        &'a self,
        _ctx: ResolutionContext<'a>,
    ) -> BoxFuture<'a, Result<Option<Rule>, ProviderError>> {
        Box::pin(async { Ok(None) })
    }
}

fn builder(db: &TestDb) -> CohortBuilder {
    Cohort::builder(db.pool().clone()).rules(TestRules)
}

fn with_options(db: &TestDb, options: Options) -> CohortBuilder {
    builder(db).options(options)
}

/// The problems of a build that must fail validation.
fn problems(result: Result<Cohort, Error>) -> Vec<ValidationProblem> {
    match result {
        Err(Error::Validation(report)) => report.problems,
        Ok(cohort) => panic!("expected validation problems, the build succeeded: {cohort:?}"),
        Err(e) => panic!("expected validation problems, got another error: {e}"),
    }
}

/// A build that must succeed.
fn built(result: Result<Cohort, Error>) -> Cohort {
    match result {
        Ok(cohort) => cohort,
        Err(e) => panic!("expected the build to succeed: {e}"),
    }
}

/// Asserts that `found` is exactly `expected`: one problem per entry, naming
/// the type, the column (`None`: no column) and containing the text; the
/// order does not matter. Every problem must also name a fix.
fn assert_problems(found: &[ValidationProblem], expected: &[(&str, Option<&str>, &str)]) {
    let listing = found.iter().map(|p| format!("  {p}\n")).collect::<String>();
    assert_eq!(
        found.len(),
        expected.len(),
        "expected {} problem(s), found:\n{listing}",
        expected.len()
    );
    let mut unmatched: Vec<&ValidationProblem> = found.iter().collect();
    for (type_name, column, text) in expected {
        let at = unmatched.iter().position(|p| {
            p.type_name.as_deref() == Some(*type_name)
                && p.column.as_deref() == *column
                && p.problem.contains(text)
        });
        match at {
            Some(i) => {
                let p = unmatched.remove(i);
                assert!(!p.fix.is_empty(), "no fix: {p}");
                assert!(p.table.is_some(), "no table: {p}");
            }
            None => {
                panic!("no problem for {type_name} / {column:?} containing {text:?} in:\n{listing}")
            }
        }
    }
}

// ---------------------------------------------------------------------------
// A well-formed model

/// Purged after a while; tenant-scoped by convention.
#[derive(cohort::Retained)]
#[cohort(
    category = "purge",
    anchor = "created_at",
    id = "10000000-0000-4000-8000-000000000001",
    table = "notes"
)]
struct Note {
    id: Uuid,
    tenant_id: Uuid,
    created_at: DateTime<Utc>,
    body: String,
}

struct KeepDomain;

impl cohort::Anonymiser for KeepDomain {
    fn anonymise(original: Option<&str>) -> Option<String> {
        let domain = original?.rsplit_once('@')?.1;
        Some(format!("redacted@{domain}"))
    }
}

/// Anonymised with every method; three erasure subjects.
#[derive(cohort::Retained)]
#[cohort(
    category = "anon",
    anchor = "created_at",
    id = "10000000-0000-4000-8000-000000000002",
    table = "contacts"
)]
struct Contact {
    id: i64,
    tenant_id: Uuid,
    created_at: DateTime<Utc>,
    anonymised_at: Option<DateTime<Utc>>,
    #[cohort(anonymise = "null", erasure_subject)]
    email: Option<String>,
    #[cohort(anonymise = "empty")]
    full_name: String,
    #[cohort(anonymise(literal = "[redacted]"))]
    phone: String,
    #[cohort(anonymise_with = KeepDomain)]
    work_email: String,
    #[cohort(erasure_subject)]
    subject_id: Uuid,
    #[cohort(erasure_subject)]
    legacy_ref: Option<i64>,
}

/// Soft-deleted; columns through domains.
#[derive(cohort::Retained)]
#[cohort(
    category = "soft",
    anchor = "created_at",
    id = "10000000-0000-4000-8000-000000000003",
    table = "tasks"
)]
struct Task {
    id: String,
    tenant_id: Uuid,
    created_at: DateTime<Utc>,
    is_deleted: bool,
    deleted_at: Option<DateTime<Utc>>,
    #[cohort(erasure_subject)]
    owner_id: i64,
}

/// Global rows, kept.
#[derive(cohort::Retained)]
#[cohort(
    category = "keep",
    anchor = "updated_at",
    id = "10000000-0000-4000-8000-000000000004",
    table = "settings",
    tenantless
)]
struct Setting {
    id: i32,
    updated_at: DateTime<Utc>,
}

/// Out of retention altogether.
#[derive(cohort::Retained)]
#[cohort(exempt = "kept for the lifetime of the account")]
struct Invoice {
    id: Uuid,
}

const WELL_FORMED: &str = r#"
    CREATE EXTENSION citext;
    CREATE DOMAIN stamp AS timestamptz;
    CREATE DOMAIN tenant AS uuid;
    CREATE TABLE notes (id uuid PRIMARY KEY, tenant_id uuid NOT NULL,
        created_at timestamptz NOT NULL, body text NOT NULL);
    CREATE TABLE contacts (id bigint PRIMARY KEY, tenant_id uuid NOT NULL,
        created_at timestamptz(3) NOT NULL, anonymised_at timestamptz,
        email citext, full_name varchar(100) NOT NULL, phone varchar(20) NOT NULL,
        work_email text NOT NULL, subject_id uuid NOT NULL, legacy_ref numeric);
    CREATE TABLE tasks (id text PRIMARY KEY, tenant_id tenant NOT NULL, created_at stamp NOT NULL,
        is_deleted boolean NOT NULL DEFAULT false, deleted_at timestamptz, owner_id bigint NOT NULL);
    CREATE TABLE settings (id integer PRIMARY KEY, updated_at timestamptz NOT NULL);
"#;

#[tokio::test]
async fn a_well_formed_model_builds_with_every_retained_type_resolved() {
    let (db, _) = db_with_cohort("public").await;
    db.exec(WELL_FORMED).await;
    let cohort = built(
        builder(&db)
            .entity::<Note>()
            .entity::<Contact>()
            .entity::<Task>()
            .entity::<Setting>()
            .entity::<Invoice>()
            .build()
            .await,
    );
    let shown = format!("{cohort:?}");
    assert!(shown.contains("entities: 4"), "{shown}");
}

#[tokio::test]
async fn a_registration_without_retained_types_is_one_clear_problem() {
    let (db, _) = db_with_cohort("public").await;
    for b in [builder(&db), builder(&db).entity::<Invoice>()] {
        let found = problems(b.build().await);
        assert_eq!(found.len(), 1, "{found:#?}");
        assert_eq!(found[0].problem, "no retained types registered");
        assert!(found[0].fix.contains(".entity::<T>()"), "{}", found[0]);
    }
}

// ---------------------------------------------------------------------------
// M3: conventions, overridden globally and by marker attributes

/// Its tenant field is not named by the built-in convention.
#[derive(cohort::Retained)]
#[cohort(
    category = "purge",
    anchor = "created_at",
    id = "20000000-0000-4000-8000-000000000001",
    table = "org_notes"
)]
struct OrgNote {
    id: Uuid,
    organisation_id: Uuid,
    created_at: DateTime<Utc>,
}

/// A tenant marker and a field named like the global convention, whose
/// column would not do as a tenant.
#[derive(cohort::Retained)]
#[cohort(
    category = "purge",
    anchor = "created_at",
    id = "20000000-0000-4000-8000-000000000002",
    table = "owned"
)]
struct Owned {
    id: Uuid,
    #[cohort(tenant)]
    owner: Uuid,
    organisation_id: String,
    created_at: DateTime<Utc>,
}

/// Convention fields mapped to other columns.
#[derive(cohort::Retained)]
#[cohort(
    category = "purge",
    anchor = "created_at",
    id = "20000000-0000-4000-8000-000000000003",
    table = "renamed"
)]
struct Renamed {
    #[cohort(column = "note_id")]
    id: Uuid,
    #[cohort(column = "org")]
    tenant_id: Uuid,
    created_at: DateTime<Utc>,
}

/// No field named `id`.
#[derive(cohort::Retained)]
#[cohort(
    category = "purge",
    anchor = "created_at",
    id = "20000000-0000-4000-8000-000000000004",
    table = "coded"
)]
struct Coded {
    code: String,
    tenant_id: Uuid,
    created_at: DateTime<Utc>,
}

// contract: M3
#[tokio::test]
async fn roles_come_from_the_marker_then_the_global_convention_and_name_fields_not_columns() {
    let (db, _) = db_with_cohort("public").await;
    db.exec(
        r#"
        CREATE TABLE org_notes (id uuid PRIMARY KEY, organisation_id uuid NOT NULL, created_at timestamptz);
        CREATE TABLE owned (id uuid PRIMARY KEY, owner uuid NOT NULL, organisation_id text, created_at timestamptz);
        CREATE TABLE renamed (note_id uuid PRIMARY KEY, org uuid NOT NULL, created_at timestamptz);
        CREATE TABLE coded (code text PRIMARY KEY, tenant_id uuid NOT NULL, created_at timestamptz);
        "#,
    )
    .await;

    // Built-in defaults: `tenant_id` and `id` are not there.
    let found = problems(
        builder(&db)
            .entity::<OrgNote>()
            .entity::<Renamed>()
            .entity::<Coded>()
            .build()
            .await,
    );
    assert_problems(
        &found,
        &[
            ("OrgNote", None, "no field is named `tenant_id`"),
            ("Coded", None, "no field is named `id`"),
        ],
    );

    // Global conventions replace the defaults; the marker still wins over
    // them (Owned.organisation_id is text: were it the tenant, it would fail).
    let mut options = Options::default();
    options.conventions.tenant = "organisation_id".into();
    built(
        with_options(&db, options.clone())
            .entity::<OrgNote>()
            .entity::<Owned>()
            .build()
            .await,
    );
    options.conventions.record_id = "code".into();
    options.conventions.tenant = "tenant_id".into();
    built(with_options(&db, options).entity::<Coded>().build().await);

    // A convention names the field; its column (org, note_id) is what is checked.
    built(builder(&db).entity::<Renamed>().build().await);
    db.exec("ALTER TABLE renamed ALTER COLUMN org TYPE text")
        .await;
    let found = problems(builder(&db).entity::<Renamed>().build().await);
    assert_problems(
        &found,
        &[("Renamed", Some("org"), "the tenant column is text")],
    );
}

// ---------------------------------------------------------------------------
// M5: tenant-scoped by default

#[derive(cohort::Retained)]
#[cohort(
    category = "purge",
    anchor = "created_at",
    id = "30000000-0000-4000-8000-000000000001",
    table = "no_tenant"
)]
struct NoTenant {
    id: Uuid,
    created_at: DateTime<Utc>,
}

#[derive(cohort::Retained)]
#[cohort(
    category = "purge",
    anchor = "created_at",
    id = "30000000-0000-4000-8000-000000000002",
    table = "global_rows",
    tenantless
)]
struct GlobalRow {
    id: Uuid,
    created_at: DateTime<Utc>,
}

#[derive(cohort::Retained)]
#[cohort(
    category = "purge",
    anchor = "created_at",
    id = "30000000-0000-4000-8000-000000000003",
    table = "half_global",
    tenantless
)]
struct HalfGlobal {
    id: Uuid,
    tenant_id: Uuid,
    created_at: DateTime<Utc>,
}

// contract: M5
#[tokio::test]
async fn types_need_a_tenant_unless_tenantless_and_tenantless_with_a_tenant_field_is_rejected() {
    let (db, _) = db_with_cohort("public").await;
    db.exec(
        r#"
        CREATE TABLE no_tenant (id uuid PRIMARY KEY, created_at timestamptz);
        CREATE TABLE global_rows (id uuid PRIMARY KEY, created_at timestamptz);
        CREATE TABLE half_global (id uuid PRIMARY KEY, tenant_id uuid, created_at timestamptz);
        "#,
    )
    .await;
    let found = problems(
        builder(&db)
            .entity::<NoTenant>()
            .entity::<GlobalRow>()
            .entity::<HalfGlobal>()
            .build()
            .await,
    );
    assert_problems(
        &found,
        &[
            (
                "NoTenant",
                None,
                "tenant-scoped (the default) but has no tenant field",
            ),
            (
                "HalfGlobal",
                Some("tenant_id"),
                "marked tenantless but has field `tenant_id`",
            ),
        ],
    );
    // Tenantless without a tenant field, and tenant-scoped with one, pass.
    db.exec(
        "CREATE TABLE notes (id uuid PRIMARY KEY, tenant_id uuid NOT NULL, created_at timestamptz)",
    )
    .await;
    built(
        builder(&db)
            .entity::<GlobalRow>()
            .entity::<Note>()
            .build()
            .await,
    );
}

// ---------------------------------------------------------------------------
// M2: duplicate identities; the same type twice

#[derive(cohort::Retained)]
#[cohort(
    category = "purge",
    anchor = "created_at",
    id = "40000000-0000-4000-8000-000000000001",
    table = "twin_a"
)]
struct TwinA {
    id: Uuid,
    tenant_id: Uuid,
    created_at: DateTime<Utc>,
}

#[derive(cohort::Retained)]
#[cohort(
    category = "purge",
    anchor = "created_at",
    id = "40000000-0000-4000-8000-000000000001",
    table = "twin_b"
)]
struct TwinB {
    id: Uuid,
    tenant_id: Uuid,
    created_at: DateTime<Utc>,
}

const TWINS: &str = r#"
    CREATE TABLE twin_a (id uuid PRIMARY KEY, tenant_id uuid NOT NULL, created_at timestamptz);
    CREATE TABLE twin_b (id uuid PRIMARY KEY, tenant_id uuid NOT NULL, created_at timestamptz);
"#;

// contract: M2
#[tokio::test]
async fn duplicate_retained_entity_ids_and_a_type_registered_twice_are_rejected() {
    let (db, _) = db_with_cohort("public").await;
    db.exec(TWINS).await;
    db.exec(WELL_FORMED).await;
    let found = problems(
        builder(&db)
            .entity::<TwinA>()
            .entity::<Note>()
            .entity::<TwinB>()
            .entity::<Note>()
            .build()
            .await,
    );
    assert_problems(
        &found,
        &[
            (
                "TwinB",
                None,
                "the retained-entity id 40000000-0000-4000-8000-000000000001 is also the id of TwinA",
            ),
            ("Note", None, "the type is registered twice"),
        ],
    );
    built(
        builder(&db)
            .entity::<TwinA>()
            .entity::<Note>()
            .build()
            .await,
    );
}

// ---------------------------------------------------------------------------
// V1: one retained type per table; D7: the default schema

#[derive(cohort::Retained)]
#[cohort(
    category = "purge",
    anchor = "created_at",
    id = "50000000-0000-4000-8000-000000000001",
    table = "shared"
)]
struct SharedA {
    id: Uuid,
    tenant_id: Uuid,
    created_at: DateTime<Utc>,
}

#[derive(cohort::Retained)]
#[cohort(
    category = "purge",
    anchor = "created_at",
    id = "50000000-0000-4000-8000-000000000002",
    table = "shared"
)]
struct SharedB {
    id: Uuid,
    tenant_id: Uuid,
    created_at: DateTime<Utc>,
}

#[derive(cohort::Retained)]
#[cohort(
    category = "purge",
    anchor = "created_at",
    id = "50000000-0000-4000-8000-000000000003",
    table = "shared",
    schema = "archive"
)]
struct ArchivedShared {
    id: Uuid,
    tenant_id: Uuid,
    created_at: DateTime<Utc>,
}

// contract: V1
#[tokio::test]
async fn two_types_on_one_table_are_rejected_but_same_names_in_two_schemas_are_two_tables() {
    let (db, _) = db_with_cohort("public").await;
    db.exec(
        r#"
        CREATE SCHEMA archive;
        CREATE TABLE public.shared (id uuid PRIMARY KEY, tenant_id uuid NOT NULL, created_at timestamptz);
        CREATE TABLE archive.shared (id uuid PRIMARY KEY, tenant_id uuid NOT NULL, created_at timestamptz);
        "#,
    )
    .await;
    let found = problems(
        builder(&db)
            .entity::<SharedA>()
            .entity::<SharedB>()
            .build()
            .await,
    );
    assert_problems(
        &found,
        &[("SharedB", None, "SharedA is registered on the same table")],
    );
    assert_eq!(found[0].table.as_deref(), Some("public.shared"));
    built(
        builder(&db)
            .entity::<SharedA>()
            .entity::<ArchivedShared>()
            .build()
            .await,
    );
}

/// Names no schema: the configured default applies.
#[derive(cohort::Retained)]
#[cohort(
    category = "purge",
    anchor = "created_at",
    id = "50000000-0000-4000-8000-000000000004",
    table = "placed"
)]
struct Placed {
    id: Uuid,
    tenant_id: Uuid,
    created_at: DateTime<Utc>,
}

/// Names its schema: the default does not apply.
#[derive(cohort::Retained)]
#[cohort(
    category = "purge",
    anchor = "created_at",
    id = "50000000-0000-4000-8000-000000000005",
    table = "pinned",
    schema = "public"
)]
struct Pinned {
    id: Uuid,
    tenant_id: Uuid,
    created_at: DateTime<Utc>,
}

// contract: D7
#[tokio::test]
async fn a_table_without_a_schema_uses_the_configured_default_then_public() {
    let (db, _) = db_with_cohort("public").await;
    db.exec(
        r#"
        CREATE SCHEMA app;
        CREATE TABLE public.placed (id uuid PRIMARY KEY, tenant_id uuid NOT NULL, created_at timestamptz);
        CREATE TABLE public.pinned (id uuid PRIMARY KEY, tenant_id uuid NOT NULL, created_at timestamptz);
        "#,
    )
    .await;
    // Default options: public.
    built(
        builder(&db)
            .entity::<Placed>()
            .entity::<Pinned>()
            .build()
            .await,
    );

    // A configured default schema: app.placed is looked for, never public.placed.
    let options = Options {
        default_table_schema: "app".into(),
        ..Options::default()
    };
    let found = problems(
        with_options(&db, options.clone())
            .entity::<Placed>()
            .entity::<Pinned>()
            .build()
            .await,
    );
    assert_problems(
        &found,
        &[("Placed", None, "table app.placed does not exist")],
    );
    assert_eq!(found[0].table.as_deref(), Some("app.placed"));

    db.exec("CREATE TABLE app.placed (id uuid PRIMARY KEY, tenant_id uuid NOT NULL, created_at timestamptz)")
        .await;
    built(
        with_options(&db, options)
            .entity::<Placed>()
            .entity::<Pinned>()
            .build()
            .await,
    );
}

// ---------------------------------------------------------------------------
// V2: inheritance and partitioning

#[derive(cohort::Retained)]
#[cohort(
    category = "purge",
    anchor = "created_at",
    id = "60000000-0000-4000-8000-000000000001",
    table = "base_rows"
)]
struct BaseRow {
    id: Uuid,
    tenant_id: Uuid,
    created_at: DateTime<Utc>,
}

#[derive(cohort::Retained)]
#[cohort(
    category = "purge",
    anchor = "created_at",
    id = "60000000-0000-4000-8000-000000000002",
    table = "derived_rows"
)]
struct DerivedRow {
    id: Uuid,
    tenant_id: Uuid,
    created_at: DateTime<Utc>,
}

/// A partitioned table.
#[derive(cohort::Retained)]
#[cohort(
    category = "purge",
    anchor = "created_at",
    id = "60000000-0000-4000-8000-000000000003",
    table = "events"
)]
struct Event {
    id: Uuid,
    tenant_id: Uuid,
    created_at: DateTime<Utc>,
}

/// One partition of it.
#[derive(cohort::Retained)]
#[cohort(
    category = "purge",
    anchor = "created_at",
    id = "60000000-0000-4000-8000-000000000004",
    table = "events_p0"
)]
struct EventPartition {
    id: Uuid,
    tenant_id: Uuid,
    created_at: DateTime<Utc>,
}

// contract: V2
#[tokio::test]
async fn inheritance_is_rejected_both_ways_partitioned_tables_are_accepted_and_partitions_are_not()
{
    let (db, _) = db_with_cohort("public").await;
    db.exec(
        r#"
        CREATE TABLE base_rows (id uuid PRIMARY KEY, tenant_id uuid NOT NULL, created_at timestamptz);
        CREATE TABLE derived_rows (extra text) INHERITS (base_rows);
        ALTER TABLE derived_rows ADD PRIMARY KEY (id);
        CREATE TABLE events (id uuid PRIMARY KEY, tenant_id uuid NOT NULL, created_at timestamptz)
            PARTITION BY HASH (id);
        CREATE TABLE events_p0 PARTITION OF events FOR VALUES WITH (MODULUS 2, REMAINDER 0);
        CREATE TABLE events_p1 PARTITION OF events FOR VALUES WITH (MODULUS 2, REMAINDER 1);
        "#,
    )
    .await;
    let found = problems(
        builder(&db)
            .entity::<BaseRow>()
            .entity::<DerivedRow>()
            .entity::<EventPartition>()
            .build()
            .await,
    );
    assert_problems(
        &found,
        &[
            (
                "BaseRow",
                None,
                "inherited by public.derived_rows (table inheritance)",
            ),
            (
                "DerivedRow",
                None,
                "inherits from public.base_rows (table inheritance)",
            ),
            ("EventPartition", None, "a partition of public.events"),
        ],
    );
    // The partitioned table itself is fine.
    built(builder(&db).entity::<Event>().build().await);
    // So are former parent and child once detached.
    db.exec("ALTER TABLE derived_rows NO INHERIT base_rows")
        .await;
    built(
        builder(&db)
            .entity::<BaseRow>()
            .entity::<DerivedRow>()
            .build()
            .await,
    );
}

// ---------------------------------------------------------------------------
// V3: ON DELETE CASCADE paths from purgeable tables into retained ones

#[derive(cohort::Retained)]
#[cohort(
    category = "purge",
    anchor = "created_at",
    id = "70000000-0000-4000-8000-000000000001",
    table = "orders"
)]
struct Order {
    id: Uuid,
    tenant_id: Uuid,
    created_at: DateTime<Utc>,
}

/// Kept (not purgeable) and retained: a cascade into it is the problem.
#[derive(cohort::Retained)]
#[cohort(
    category = "keep",
    anchor = "created_at",
    id = "70000000-0000-4000-8000-000000000002",
    table = "receipts"
)]
struct Receipt {
    id: Uuid,
    tenant_id: Uuid,
    created_at: DateTime<Utc>,
}

/// Purgeable, referencing itself.
#[derive(cohort::Retained)]
#[cohort(
    category = "purge",
    anchor = "created_at",
    id = "70000000-0000-4000-8000-000000000003",
    table = "threads"
)]
struct Thread {
    id: Uuid,
    tenant_id: Uuid,
    created_at: DateTime<Utc>,
}

/// Not purgeable: it may cascade wherever it likes.
#[derive(cohort::Retained)]
#[cohort(
    category = "keep",
    anchor = "created_at",
    id = "70000000-0000-4000-8000-000000000004",
    table = "ledgers"
)]
struct Ledger {
    id: Uuid,
    tenant_id: Uuid,
    created_at: DateTime<Utc>,
}

// contract: V3
#[tokio::test]
async fn cascade_paths_from_purgeable_tables_into_retained_tables_are_reported_with_their_path() {
    let (db, _) = db_with_cohort("public").await;
    db.exec(
        r#"
        CREATE TABLE orders (id uuid PRIMARY KEY, tenant_id uuid NOT NULL, created_at timestamptz);
        -- Two tables that are not retained, in a cascading cycle of their own.
        CREATE TABLE order_lines (id uuid PRIMARY KEY, loop_id uuid,
            order_id uuid CONSTRAINT lines_order_fk REFERENCES orders ON DELETE CASCADE);
        CREATE TABLE line_notes (id uuid PRIMARY KEY,
            line_id uuid CONSTRAINT notes_line_fk REFERENCES order_lines ON DELETE CASCADE);
        ALTER TABLE order_lines ADD CONSTRAINT lines_loop_fk FOREIGN KEY (loop_id)
            REFERENCES line_notes ON DELETE CASCADE;
        CREATE TABLE receipts (id uuid PRIMARY KEY, tenant_id uuid NOT NULL, created_at timestamptz,
            line_id uuid CONSTRAINT receipts_line_fk REFERENCES order_lines ON DELETE CASCADE);
        CREATE TABLE threads (id uuid PRIMARY KEY, tenant_id uuid NOT NULL, created_at timestamptz,
            parent_id uuid CONSTRAINT threads_parent_fk REFERENCES threads ON DELETE CASCADE);
        CREATE TABLE ledgers (id uuid PRIMARY KEY, tenant_id uuid NOT NULL, created_at timestamptz);
        ALTER TABLE receipts ADD COLUMN ledger_id uuid
            CONSTRAINT receipts_ledger_fk REFERENCES ledgers ON DELETE CASCADE;
        "#,
    )
    .await;
    let found = problems(
        builder(&db)
            .entity::<Order>()
            .entity::<Receipt>()
            .entity::<Thread>()
            .entity::<Ledger>()
            .build()
            .await,
    );
    assert_problems(
        &found,
        &[
            (
                "Order",
                None,
                "cascades into the table of retained type Receipt through ON DELETE CASCADE: \
                 public.orders → public.order_lines (lines_order_fk) → public.receipts (receipts_line_fk)",
            ),
            (
                "Thread",
                None,
                "cascades back into its own table through ON DELETE CASCADE: \
                 public.threads → public.threads (threads_parent_fk)",
            ),
        ],
    );

    // RESTRICT instead of CASCADE at one step of each path: no path is left.
    // The cascade from the kept Ledger into Receipt stays allowed.
    db.exec(
        r#"
        ALTER TABLE receipts DROP CONSTRAINT receipts_line_fk,
            ADD CONSTRAINT receipts_line_fk FOREIGN KEY (line_id) REFERENCES order_lines ON DELETE RESTRICT;
        ALTER TABLE threads DROP CONSTRAINT threads_parent_fk,
            ADD CONSTRAINT threads_parent_fk FOREIGN KEY (parent_id) REFERENCES threads;
        "#,
    )
    .await;
    built(
        builder(&db)
            .entity::<Order>()
            .entity::<Receipt>()
            .entity::<Thread>()
            .entity::<Ledger>()
            .build()
            .await,
    );
}

// ---------------------------------------------------------------------------
// V4: a record id that is not the primary key must be unique

#[derive(cohort::Retained)]
#[cohort(
    category = "purge",
    anchor = "created_at",
    id = "80000000-0000-4000-8000-000000000001",
    table = "coded_rows"
)]
struct CodedRow {
    id: Uuid,
    #[cohort(record_id)]
    code: String,
    tenant_id: Uuid,
    created_at: DateTime<Utc>,
}

// contract: V4
#[tokio::test]
async fn a_record_id_must_be_the_key_or_uniquely_indexed_without_filter_or_expression() {
    let (db, _) = db_with_cohort("public").await;
    db.exec(
        r#"
        CREATE TABLE coded_rows (id uuid PRIMARY KEY, code text NOT NULL, tenant_id uuid NOT NULL,
            created_at timestamptz);
        CREATE UNIQUE INDEX coded_rows_partial ON coded_rows (code) WHERE code <> '';
        CREATE UNIQUE INDEX coded_rows_lower ON coded_rows (lower(code));
        CREATE UNIQUE INDEX coded_rows_pair ON coded_rows (code, tenant_id);
        "#,
    )
    .await;
    let build = || builder(&db).entity::<CodedRow>().build();
    let found = problems(build().await);
    assert_problems(
        &found,
        &[(
            "CodedRow",
            Some("code"),
            "the record id column code is not unique",
        )],
    );
    let text = &found[0].problem;
    assert!(text.contains("coded_rows_partial is partial"), "{text}");
    assert!(
        text.contains("coded_rows_pair covers more than this column"),
        "{text}"
    );

    db.exec("ALTER TABLE coded_rows ADD CONSTRAINT coded_rows_code_key UNIQUE (code)")
        .await;
    built(build().await);

    // A plain unique index serves as well as a constraint...
    db.exec(
        "ALTER TABLE coded_rows DROP CONSTRAINT coded_rows_code_key; \
         CREATE UNIQUE INDEX coded_rows_code ON coded_rows (code);",
    )
    .await;
    built(build().await);

    // ...but a nullable record id does not identify every row.
    db.exec("ALTER TABLE coded_rows ALTER COLUMN code DROP NOT NULL")
        .await;
    let found = problems(build().await);
    assert_problems(&found, &[("CodedRow", Some("code"), "accepts NULL")]);

    // A primary key on more than the record id does not make it unique.
    db.exec(
        "DROP TABLE coded_rows; \
         CREATE TABLE coded_rows (id uuid, code text NOT NULL, tenant_id uuid, created_at timestamptz, \
             PRIMARY KEY (code, tenant_id));",
    )
    .await;
    let found = problems(build().await);
    assert_problems(
        &found,
        &[(
            "CodedRow",
            Some("code"),
            "primary key on more than this column",
        )],
    );
}

// ---------------------------------------------------------------------------
// V5, V6: column types fit their roles

/// Soft-deleted and anonymised: every timestamp role, every anonymise method.
#[derive(cohort::Retained)]
#[cohort(
    category = "soft_anon",
    anchor = "created_at",
    id = "90000000-0000-4000-8000-000000000001",
    table = "profiles"
)]
struct Profile {
    id: Uuid,
    tenant_id: Uuid,
    created_at: DateTime<Utc>,
    is_deleted: bool,
    deleted_at: Option<DateTime<Utc>>,
    anonymised_at: Option<DateTime<Utc>>,
    #[cohort(anonymise = "null")]
    email: Option<String>,
    #[cohort(anonymise = "empty")]
    full_name: String,
    #[cohort(anonymise(literal = "[redacted]"))]
    phone: String,
    #[cohort(anonymise_with = KeepDomain)]
    work_email: String,
    #[cohort(erasure_subject)]
    subject: String,
}

// contract: V5
#[tokio::test]
async fn anchor_deleted_at_and_anonymised_at_must_be_timestamptz_at_any_precision_or_through_a_domain()
 {
    let (db, _) = db_with_cohort("public").await;
    db.exec(
        r#"
        CREATE DOMAIN instant AS timestamptz(0);
        CREATE TABLE profiles (id uuid PRIMARY KEY, tenant_id uuid NOT NULL,
            created_at timestamp NOT NULL, is_deleted boolean NOT NULL, deleted_at date,
            anonymised_at timestamp(3), email text, full_name text NOT NULL, phone text NOT NULL,
            work_email text NOT NULL, subject uuid);
        "#,
    )
    .await;
    let build = || builder(&db).entity::<Profile>().build();
    let found = problems(build().await);
    assert_problems(
        &found,
        &[
            (
                "Profile",
                Some("created_at"),
                "the anchor column is timestamp without time zone",
            ),
            (
                "Profile",
                Some("deleted_at"),
                "the deleted-at column is date",
            ),
            (
                "Profile",
                Some("anonymised_at"),
                "the anonymised-at column is timestamp(3) without time zone",
            ),
        ],
    );
    db.exec(
        "ALTER TABLE profiles ALTER COLUMN created_at TYPE timestamptz(3), \
         ALTER COLUMN deleted_at TYPE instant, ALTER COLUMN anonymised_at TYPE timestamptz",
    )
    .await;
    built(build().await);
}

// contract: V6
#[tokio::test]
async fn each_role_column_type_must_fit_its_role() {
    let (db, _) = db_with_cohort("public").await;
    db.exec(
        r#"
        CREATE DOMAIN required_text AS text NOT NULL;
        CREATE TABLE profiles (id uuid PRIMARY KEY, tenant_id text NOT NULL,
            created_at timestamptz NOT NULL, is_deleted integer NOT NULL, deleted_at timestamptz,
            anonymised_at timestamptz NOT NULL, email required_text, full_name integer NOT NULL,
            phone varchar(5) NOT NULL, work_email bytea NOT NULL, subject jsonb);
        "#,
    )
    .await;
    let build = || builder(&db).entity::<Profile>().build();
    let found = problems(build().await);
    assert_problems(
        &found,
        &[
            ("Profile", Some("tenant_id"), "tenant ids are bound as uuid"),
            (
                "Profile",
                Some("is_deleted"),
                "the soft-delete flag column is integer, not boolean",
            ),
            ("Profile", Some("anonymised_at"), "does not accept NULL"),
            (
                "Profile",
                Some("email"),
                "anonymised to NULL but does not accept NULL",
            ),
            (
                "Profile",
                Some("full_name"),
                "anonymised to the empty string, which needs a text-like column",
            ),
            (
                "Profile",
                Some("phone"),
                "too short for the literal \"[redacted]\"",
            ),
            (
                "Profile",
                Some("work_email"),
                "by the custom anonymiser KeepDomain",
            ),
            (
                "Profile",
                Some("subject"),
                "the erasure-subject column is jsonb",
            ),
        ],
    );
    db.exec(
        r#"
        CREATE EXTENSION citext;
        CREATE DOMAIN tenant AS uuid;
        CREATE DOMAIN flag AS boolean;
        CREATE DOMAIN short_text AS varchar(10);
        ALTER TABLE profiles ALTER COLUMN tenant_id TYPE tenant USING gen_random_uuid(),
            ALTER COLUMN is_deleted TYPE flag USING is_deleted <> 0,
            ALTER COLUMN anonymised_at DROP NOT NULL,
            ALTER COLUMN email TYPE text,
            ALTER COLUMN full_name TYPE citext USING full_name::text,
            ALTER COLUMN phone TYPE short_text,
            ALTER COLUMN work_email TYPE varchar(200) USING '',
            ALTER COLUMN subject TYPE numeric USING 0;
        "#,
    )
    .await;
    built(build().await);
}

// ---------------------------------------------------------------------------
// V7: record ids whose text depends on session settings

/// One candidate record-id field per column type; the record-id convention
/// picks one per build.
#[derive(cohort::Retained)]
#[cohort(
    category = "purge",
    anchor = "created_at",
    id = "a0000000-0000-4000-8000-000000000001",
    table = "keyed"
)]
struct Keyed {
    tenant_id: Uuid,
    created_at: DateTime<Utc>,
    k_timestamp: String,
    k_timestamptz: String,
    k_date: String,
    k_time: String,
    k_timetz: String,
    k_interval: String,
    k_real: String,
    k_double: String,
    k_money: String,
    k_bytea: String,
    k_domain: String,
    k_array: String,
    k_range: String,
    k_custom_range: String,
    k_multirange: String,
    k_domain_array: String,
    k_uuid: String,
    k_bigint: String,
    k_numeric: String,
    k_text: String,
    k_int_range: String,
    k_text_domain: String,
}

// contract: V7
#[tokio::test]
async fn record_ids_whose_text_depends_on_session_settings_are_rejected_from_the_catalog_type() {
    let (db, _) = db_with_cohort("public").await;
    db.exec(
        r#"
        CREATE DOMAIN instant AS timestamptz;
        CREATE DOMAIN label AS text;
        CREATE TYPE floatrange AS RANGE (subtype = float8);
        CREATE TABLE keyed (tenant_id uuid NOT NULL, created_at timestamptz,
            k_timestamp timestamp NOT NULL UNIQUE, k_timestamptz timestamptz NOT NULL UNIQUE,
            k_date date NOT NULL UNIQUE, k_time time NOT NULL UNIQUE, k_timetz timetz NOT NULL UNIQUE,
            k_interval interval NOT NULL UNIQUE, k_real real NOT NULL UNIQUE,
            k_double double precision NOT NULL UNIQUE, k_money money NOT NULL UNIQUE,
            k_bytea bytea NOT NULL UNIQUE, k_domain instant NOT NULL UNIQUE,
            k_array date[] NOT NULL UNIQUE, k_range tsrange NOT NULL UNIQUE,
            k_custom_range floatrange NOT NULL UNIQUE, k_multirange datemultirange NOT NULL UNIQUE,
            k_domain_array instant[] NOT NULL UNIQUE,
            k_uuid uuid NOT NULL UNIQUE, k_bigint bigint NOT NULL UNIQUE, k_numeric numeric NOT NULL UNIQUE,
            k_text text NOT NULL UNIQUE, k_int_range int4range NOT NULL UNIQUE,
            k_text_domain label NOT NULL UNIQUE);
        "#,
    )
    .await;
    let with_record_id = |field: &str| {
        let mut options = Options::default();
        options.conventions.record_id = field.into();
        with_options(&db, options).entity::<Keyed>().build()
    };
    for (field, shown) in [
        ("k_timestamp", "timestamp without time zone"),
        ("k_timestamptz", "timestamp with time zone"),
        ("k_date", "date"),
        ("k_time", "time without time zone"),
        ("k_timetz", "time with time zone"),
        ("k_interval", "interval"),
        ("k_real", "real"),
        ("k_double", "double precision"),
        ("k_money", "money"),
        ("k_bytea", "bytea"),
        ("k_domain", "public.instant (built on timestamptz)"),
        ("k_array", "date[] (built on date)"),
        ("k_range", "tsrange (built on timestamp)"),
        ("k_custom_range", "public.floatrange (built on float8)"),
        ("k_multirange", "datemultirange (built on date)"),
        ("k_domain_array", "public.instant[] (built on timestamptz)"),
    ] {
        let found = problems(with_record_id(field).await);
        assert_problems(
            &found,
            &[(
                "Keyed",
                Some(field),
                &format!(
                    "the record id column is {shown}, whose text form depends on session settings"
                ),
            )],
        );
    }
    for field in [
        "k_uuid",
        "k_bigint",
        "k_numeric",
        "k_text",
        "k_int_range",
        "k_text_domain",
    ] {
        built(with_record_id(field).await);
    }
}

// ---------------------------------------------------------------------------
// V8: missing tables and columns, by name

#[derive(cohort::Retained)]
#[cohort(
    category = "purge",
    anchor = "created_at",
    id = "b0000000-0000-4000-8000-000000000001",
    table = "nowhere"
)]
struct Nowhere {
    id: Uuid,
    tenant_id: Uuid,
    created_at: DateTime<Utc>,
}

#[derive(cohort::Retained)]
#[cohort(
    category = "purge",
    anchor = "created_at",
    id = "b0000000-0000-4000-8000-000000000002",
    table = "rows",
    schema = "ghost"
)]
struct Ghost {
    id: Uuid,
    tenant_id: Uuid,
    created_at: DateTime<Utc>,
}

#[derive(cohort::Retained)]
#[cohort(
    category = "purge",
    anchor = "created_at",
    id = "b0000000-0000-4000-8000-000000000003",
    table = "thin"
)]
struct Thin {
    id: Uuid,
    #[cohort(column = "org_id")]
    tenant_id: Uuid,
    created_at: DateTime<Utc>,
}

#[derive(cohort::Retained)]
#[cohort(
    category = "purge",
    anchor = "created_at",
    id = "b0000000-0000-4000-8000-000000000004",
    table = "recent"
)]
struct Recent {
    id: Uuid,
    tenant_id: Uuid,
    created_at: DateTime<Utc>,
}

// contract: V8
#[tokio::test]
async fn missing_tables_schemas_and_columns_are_reported_by_name() {
    let (db, _) = db_with_cohort("public").await;
    db.exec(
        r#"
        CREATE TABLE thin (id uuid PRIMARY KEY, tenant_id uuid);
        CREATE TABLE base (id uuid PRIMARY KEY, tenant_id uuid NOT NULL, created_at timestamptz);
        CREATE VIEW recent AS SELECT * FROM base;
        "#,
    )
    .await;
    let build = || {
        builder(&db)
            .entity::<Nowhere>()
            .entity::<Ghost>()
            .entity::<Thin>()
            .entity::<Recent>()
            .build()
    };
    let found = problems(build().await);
    assert_problems(
        &found,
        &[
            ("Nowhere", None, "table public.nowhere does not exist"),
            (
                "Ghost",
                None,
                "table ghost.rows does not exist (schema ghost does not exist either)",
            ),
            (
                "Thin",
                Some("org_id"),
                "column org_id (field `tenant_id`, the tenant) does not exist in table public.thin",
            ),
            (
                "Thin",
                Some("created_at"),
                "column created_at (field `created_at`, the anchor) does not exist in table public.thin",
            ),
            ("Recent", None, "public.recent is a view, not a table"),
        ],
    );
    assert_eq!(found[0].table.as_deref(), Some("public.nowhere"));
    db.exec(
        r#"
        CREATE TABLE nowhere (id uuid PRIMARY KEY, tenant_id uuid NOT NULL, created_at timestamptz);
        CREATE SCHEMA ghost;
        CREATE TABLE ghost.rows (id uuid PRIMARY KEY, tenant_id uuid NOT NULL, created_at timestamptz);
        ALTER TABLE thin RENAME COLUMN tenant_id TO org_id;
        ALTER TABLE thin ADD COLUMN created_at timestamptz;
        DROP VIEW recent;
        CREATE TABLE recent (id uuid PRIMARY KEY, tenant_id uuid NOT NULL, created_at timestamptz);
        "#,
    )
    .await;
    built(build().await);
}

// ---------------------------------------------------------------------------
// P3 (start-up half), P5: declared strategies against the type

/// Anonymisable by its category, but nothing to anonymise and no marker column.
#[derive(cohort::Retained)]
#[cohort(
    category = "anon",
    anchor = "created_at",
    id = "c0000000-0000-4000-8000-000000000001",
    table = "bare"
)]
struct BareAnon {
    id: Uuid,
    tenant_id: Uuid,
    created_at: DateTime<Utc>,
}

/// Soft-deletable by its category, without a flag.
#[derive(cohort::Retained)]
#[cohort(
    category = "soft",
    anchor = "created_at",
    id = "c0000000-0000-4000-8000-000000000002",
    table = "flagless"
)]
struct Flagless {
    id: Uuid,
    tenant_id: Uuid,
    created_at: DateTime<Utc>,
    deleted_at: Option<DateTime<Utc>>,
}

/// Its category is one the test provider does not know.
#[derive(cohort::Retained)]
#[cohort(
    category = "mystery",
    anchor = "created_at",
    id = "c0000000-0000-4000-8000-000000000003",
    table = "mysteries"
)]
struct Mystery {
    id: Uuid,
    tenant_id: Uuid,
    created_at: DateTime<Utc>,
}

// contract: P3
#[tokio::test]
async fn declared_strategies_need_their_columns_at_start_up() {
    let (db, _) = db_with_cohort("public").await;
    db.exec(
        r#"
        CREATE TABLE bare (id uuid PRIMARY KEY, tenant_id uuid NOT NULL, created_at timestamptz);
        CREATE TABLE flagless (id uuid PRIMARY KEY, tenant_id uuid NOT NULL, created_at timestamptz,
            deleted_at timestamptz);
        "#,
    )
    .await;
    let found = problems(
        builder(&db)
            .entity::<BareAnon>()
            .entity::<Flagless>()
            .build()
            .await,
    );
    assert_problems(
        &found,
        &[
            (
                "BareAnon",
                None,
                "may resolve to Anonymise, which needs an anonymised-at column",
            ),
            (
                "BareAnon",
                None,
                "may resolve to Anonymise, but no field is marked to be anonymised",
            ),
            (
                "Flagless",
                None,
                "may resolve to SoftDelete, which needs a soft-delete flag column",
            ),
        ],
    );
    // The same types pass when their categories only purge.
    let purge =
        |category| Cohort::builder(db.pool().clone()).rules(Declares(category, Strategy::Purge));
    built(purge("anon").entity::<BareAnon>().build().await);
    built(purge("soft").entity::<Flagless>().build().await);
}

// contract: P5
#[tokio::test]
async fn a_category_without_capabilities_is_rejected() {
    let (db, _) = db_with_cohort("public").await;
    db.exec("CREATE TABLE mysteries (id uuid PRIMARY KEY, tenant_id uuid NOT NULL, created_at timestamptz)")
        .await;
    let found = problems(builder(&db).entity::<Mystery>().build().await);
    assert_problems(
        &found,
        &[(
            "Mystery",
            None,
            "the rule provider declares no capabilities for category \"mystery\"",
        )],
    );
    built(
        Cohort::builder(db.pool().clone())
            .rules(Declares("mystery", Strategy::Purge))
            .entity::<Mystery>()
            .build()
            .await,
    );
}

// ---------------------------------------------------------------------------
// V9: everything at once

/// Its anchor column has no time zone.
#[derive(cohort::Retained)]
#[cohort(
    category = "purge",
    anchor = "created_at",
    id = "d0000000-0000-4000-8000-000000000001",
    table = "naive"
)]
struct Naive {
    id: Uuid,
    tenant_id: Uuid,
    created_at: DateTime<Utc>,
}

// contract: V9
#[tokio::test]
async fn five_different_mistakes_come_back_as_one_error_naming_all_five() {
    let (db, _) = db_with_cohort("public").await;
    db.exec(TWINS).await;
    db.exec(
        r#"
        CREATE TABLE no_tenant (id uuid PRIMARY KEY, created_at timestamptz);
        CREATE TABLE mysteries (id uuid PRIMARY KEY, tenant_id uuid NOT NULL, created_at timestamptz);
        CREATE TABLE naive (id uuid PRIMARY KEY, tenant_id uuid NOT NULL, created_at timestamp);
        "#,
    )
    .await;
    let err = builder(&db)
        .entity::<NoTenant>() // M5
        .entity::<TwinA>()
        .entity::<TwinB>() // M2
        .entity::<Nowhere>() // V8
        .entity::<Mystery>() // P5
        .entity::<Naive>() // V5
        .build()
        .await
        .expect_err("five mistakes");
    let Error::Validation(report) = err else {
        panic!("expected a validation error: {err}")
    };
    // The report's Display lists every problem, one line each.
    let text = report.to_string();
    assert_problems(
        &report.problems,
        &[
            ("NoTenant", None, "has no tenant field"),
            ("TwinB", None, "is also the id of TwinA"),
            ("Nowhere", None, "table public.nowhere does not exist"),
            ("Mystery", None, "no capabilities for category \"mystery\""),
            (
                "Naive",
                Some("created_at"),
                "the anchor column is timestamp without time zone",
            ),
        ],
    );
    // In registration order, and all in the one message.
    let order: Vec<&str> = report
        .problems
        .iter()
        .filter_map(|p| p.type_name.as_deref())
        .collect();
    assert_eq!(order, ["NoTenant", "TwinB", "Nowhere", "Mystery", "Naive"]);
    assert!(text.contains("5 problem(s)"), "{text}");
    for name in order {
        assert!(text.contains(name), "{text}");
    }
}

// ---------------------------------------------------------------------------
// D8 for host tables: a hostile search_path and look-alike tables

// D8 for host tables (the tag stays with the readiness tests).
#[tokio::test]
async fn a_hostile_search_path_and_a_same_named_table_elsewhere_are_never_read() {
    let (db, _) = db_with_cohort("public").await;
    db.exec(&format!(
        r#"
        CREATE SCHEMA evil;
        -- A perfect look-alike first on the path, and a broken public.notes.
        CREATE TABLE evil.notes (id uuid PRIMARY KEY, tenant_id uuid NOT NULL, created_at timestamptz);
        CREATE TABLE public.notes (id uuid PRIMARY KEY, tenant_id uuid NOT NULL, created_at timestamp);
        CREATE FUNCTION evil.format_type(oid, integer) RETURNS text LANGUAGE sql AS $$ SELECT 'timestamp with time zone' $$;
        CREATE FUNCTION evil.always(name, name) RETURNS boolean LANGUAGE sql AS $$ SELECT true $$;
        CREATE OPERATOR evil.= (LEFTARG = name, RIGHTARG = name, FUNCTION = evil.always);
        ALTER DATABASE "{}" SET search_path = evil, pg_catalog, public;
        "#,
        db.name()
    ))
    .await;
    // A new pool: its connections start with the hostile search_path.
    let pool = sqlx::PgPool::connect_with(db.options())
        .await
        .expect("pool");
    let path: String = sqlx::query_scalar("SHOW search_path")
        .fetch_one(&pool)
        .await
        .expect("show");
    assert_eq!(path, "evil, pg_catalog, public");
    let build = || {
        Cohort::builder(pool.clone())
            .rules(TestRules)
            .entity::<Note>()
            .build()
    };

    let found = problems(build().await);
    assert_problems(
        &found,
        &[(
            "Note",
            Some("created_at"),
            "the anchor column is timestamp without time zone",
        )],
    );
    assert_eq!(found[0].table.as_deref(), Some("public.notes"));

    sqlx::raw_sql(
        "ALTER TABLE public.notes ALTER COLUMN created_at TYPE timestamptz; \
                   ALTER TABLE evil.notes ALTER COLUMN created_at TYPE date",
    )
    .execute(&pool)
    .await
    .expect("alter");
    built(build().await);
    pool.close().await;
}
