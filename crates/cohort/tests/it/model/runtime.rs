//! Descriptors built at run time (`EntityDescriptor::builder`): the same
//! descriptor as the derive's for the same declarations, validated and swept
//! exactly like it against PostgreSQL, and every mistake the derive reports
//! at compile time (`tests/ui`) reported by the builder, all at once.
#![allow(
    dead_code,
    reason = "row types as a host declares them; only their descriptors are read"
)]

use chrono::{DateTime, Utc};
use cohort::model::{
    AnonymiseMethod, DescriptorError, DescriptorProblem, EntityDescriptor, FieldRole, FieldSpec,
    NameKind,
};
use cohort::{
    Capabilities, Cohort, ErasureRequest, Error, IdentProblem, Period, Retained, Rule, Scope,
    Strategy, TenantContext,
};
use uuid::Uuid;

use crate::support::{BuildEngine, TestDb, TestRules, db_with_cohort};

const CONTACT_ID: &str = "3c9d2a61-7e4b-4f1a-9b0c-5d6e7f8a9b10";

/// Keeps a value's first character.
pub(super) struct Initial;

impl cohort::Anonymiser for Initial {
    fn anonymise(original: Option<&str>) -> Option<String> {
        original
            .and_then(|v| v.chars().next())
            .map(|c| format!("{c}."))
    }
}

/// Every key the derive reads: renamed columns, every marker, every
/// anonymise method, two erasure subjects, a schema.
#[derive(cohort::Retained)]
#[cohort(
    category = "rt-contacts",
    anchor = "received",
    id = "3c9d2a61-7e4b-4f1a-9b0c-5d6e7f8a9b10"
)]
#[cohort(table = "rt_contacts", schema = "crm")]
pub(super) struct Contact {
    #[cohort(record_id, column = "contact_id")]
    key: i64,
    #[cohort(tenant, column = "org_id")]
    organisation: Uuid,
    #[cohort(column = "received_at")]
    received: DateTime<Utc>,
    #[cohort(soft_delete)]
    removed: bool,
    #[cohort(deleted_at)]
    removed_at: Option<DateTime<Utc>>,
    #[cohort(anonymised_at)]
    scrubbed_at: Option<DateTime<Utc>>,
    #[cohort(anonymise = "null", erasure_subject)]
    email: Option<String>,
    #[cohort(anonymise = "empty")]
    full_name: String,
    #[cohort(anonymise(literal = "[redacted]"))]
    phone: String,
    #[cohort(anonymise_with = Initial)]
    city: String,
    #[cohort(anonymise_with = "pseudonym")]
    handle: String,
    #[cohort(erasure_subject)]
    subject_id: Uuid,
}

/// `Contact`, declared at run time, key for key.
fn runtime_contact() -> &'static EntityDescriptor {
    EntityDescriptor::builder("Contact", "rt-contacts", "received")
        .id_str(CONTACT_ID)
        .table("rt_contacts")
        .schema("crm")
        .field(FieldSpec::new("key").column("contact_id").rust_type("i64"))
        .field(
            FieldSpec::new("organisation")
                .column("org_id")
                .rust_type("Uuid"),
        )
        .field(
            FieldSpec::new("received")
                .column("received_at")
                .rust_type("DateTime<Utc>"),
        )
        .field(FieldSpec::new("removed").rust_type("bool"))
        .field(
            FieldSpec::new("removed_at")
                .optional()
                .rust_type("Option<DateTime<Utc>>"),
        )
        .field(
            FieldSpec::new("scrubbed_at")
                .optional()
                .rust_type("Option<DateTime<Utc>>"),
        )
        .field(
            FieldSpec::new("email")
                .optional()
                .rust_type("Option<String>"),
        )
        .field(FieldSpec::new("full_name").rust_type("String"))
        .field(FieldSpec::new("phone").rust_type("String"))
        .field(FieldSpec::new("city").rust_type("String"))
        .field(FieldSpec::new("handle").rust_type("String"))
        .field(FieldSpec::new("subject_id").rust_type("Uuid"))
        .record_id("key")
        .tenant("organisation")
        .soft_delete("removed")
        .deleted_at("removed_at")
        .anonymised_at("scrubbed_at")
        .anonymise_null("email")
        .anonymise_empty("full_name")
        .anonymise_literal("phone", "[redacted]")
        .anonymise_with::<Initial>("city")
        .anonymise_named("handle", String::from("pseudonym"))
        .erasure_subject("email")
        .erasure_subject("subject_id")
        .build()
        .expect("a valid descriptor")
}

/// Everything a descriptor says, comparable (`AnonymiseMethod` has no
/// `PartialEq`: a custom method is compared by name and by what it returns).
fn summary(d: &EntityDescriptor) -> String {
    let fields: Vec<_> = d
        .fields()
        .iter()
        .map(|f| (f.field(), f.column(), f.optional(), f.rust_type()))
        .collect();
    let m = d.markers();
    let methods: Vec<(&str, String)> = d
        .anonymise()
        .iter()
        .map(|a| {
            let method = match a.method() {
                AnonymiseMethod::Null => "null".to_owned(),
                AnonymiseMethod::EmptyString => "empty".to_owned(),
                AnonymiseMethod::Literal(text) => format!("literal {text}"),
                AnonymiseMethod::Named(name) => format!("named {name}"),
                AnonymiseMethod::Custom(custom) => {
                    format!(
                        "custom {} {:?}",
                        custom.name(),
                        custom.anonymise(Some("Oslo"))
                    )
                }
                other => format!("{other:?}"),
            };
            (a.field(), method)
        })
        .collect();
    format!(
        "{} {:?} {:?} {} {:?} {} {fields:?} {:?} {methods:?} {:?}",
        d.type_name(),
        d.membership(),
        d.entity_id(),
        d.table(),
        d.schema(),
        d.tenantless(),
        [
            m.record_id(),
            m.tenant(),
            m.soft_delete(),
            m.deleted_at(),
            m.anonymised_at()
        ],
        d.erasure_subjects()
    )
}

// contract: M1, M3, M4, M6, M7
#[test]
fn a_runtime_descriptor_is_the_derived_one_key_for_key() {
    let derived = Contact::descriptor();
    let built = runtime_contact();
    assert_eq!(summary(built), summary(derived));
    assert!(summary(built).contains(r#"custom Initial Some(\"O.\")"#));
    assert_eq!(built.entity_id(), Some(Contact::ENTITY_ID));
    // A new descriptor, not the derive's static.
    assert!(!std::ptr::eq(built, derived));
}

// contract: M1
#[test]
fn an_exempt_runtime_descriptor_is_the_derived_one() {
    #[derive(cohort::Retained)]
    #[cohort(exempt = "reference data", id = "c0ffee00-0000-4000-8000-0000000000e1")]
    struct Country {
        code: String,
    }
    let built = EntityDescriptor::exempt_builder("Country", "reference data")
        .id(Uuid::from_u128(0xc0ffee00_0000_4000_8000_0000000000e1))
        .field(FieldSpec::new("code").rust_type("String"))
        .build()
        .expect("valid");
    assert_eq!(summary(built), summary(Country::descriptor()));
    assert_eq!(built.table(), "country");
}

fn rules() -> TestRules {
    TestRules::new().with(
        "rt-contacts",
        Capabilities::only(Strategy::Anonymise),
        Rule::new(Period::days(30), Strategy::Anonymise).with_per_row_audit(),
    )
}

const TENANT: Uuid = Uuid::from_u128(0x7e4a0000_0000_4000_8000_000000000001);
const OTHER_TENANT: Uuid = Uuid::from_u128(0x7e4a0000_0000_4000_8000_000000000002);
const SUBJECT: Uuid = Uuid::from_u128(0x5b0b0000_0000_4000_8000_000000000001);

fn now() -> DateTime<Utc> {
    DateTime::parse_from_rfc3339("2030-01-01T00:00:00Z")
        .expect("a time")
        .with_timezone(&Utc)
}

/// A database with `crm.rt_contacts`: per tenant, old and new rows, one row
/// of the subject (new, so only erasure reaches it).
async fn contacts_db() -> TestDb {
    let (db, _) = db_with_cohort("public").await;
    db.exec(&format!(
        "CREATE SCHEMA crm; \
         CREATE TABLE crm.rt_contacts (contact_id bigint PRIMARY KEY, org_id uuid NOT NULL, \
           received_at timestamptz NOT NULL, removed boolean NOT NULL DEFAULT false, \
           removed_at timestamptz, scrubbed_at timestamptz, email text, full_name text NOT NULL, \
           phone varchar(40) NOT NULL, city text NOT NULL, handle text NOT NULL, subject_id uuid NOT NULL); \
         CREATE INDEX ON crm.rt_contacts (org_id, received_at, contact_id); \
         CREATE INDEX ON crm.rt_contacts (email); CREATE INDEX ON crm.rt_contacts (subject_id); \
         INSERT INTO crm.rt_contacts (contact_id, org_id, received_at, email, full_name, phone, city, handle, subject_id) \
         SELECT g, CASE WHEN g % 2 = 0 THEN '{TENANT}'::uuid ELSE '{OTHER_TENANT}'::uuid END, \
                '{now}'::timestamptz - (CASE WHEN g <= 6 THEN 90 ELSE 1 END) * interval '1 day', \
                'person' || g || '@example.org', 'Person ' || g, '+47 ' || g, 'Oslo', 'h' || g, \
                CASE WHEN g = 8 THEN '{SUBJECT}'::uuid ELSE gen_random_uuid() END \
         FROM generate_series(1, 10) g;",
        now = now().to_rfc3339()
    ))
    .await;
    db
}

/// The derived type's or the runtime descriptor's builder, on `pool`.
fn builder(pool: &sqlx::PgPool, runtime: bool) -> cohort::CohortBuilder {
    let builder = Cohort::builder(pool.clone())
        .rules(rules())
        .anonymiser("pseudonym", |v: Option<&str>| {
            v.map(|v| format!("p-{}", v.len()))
        });
    if runtime {
        builder.entity_descriptor(runtime_contact())
    } else {
        builder.entity::<Contact>()
    }
}

/// The table's rows, with the stamps reduced to whether they are set.
async fn rows(db: &TestDb) -> Vec<String> {
    sqlx::query_scalar(
        "SELECT concat_ws(' | ', contact_id, org_id, received_at, removed, removed_at IS NOT NULL, \
                scrubbed_at IS NOT NULL, coalesce(email, '<null>'), full_name, phone, city, handle) \
         FROM crm.rt_contacts ORDER BY contact_id",
    )
    .fetch_all(db.pool())
    .await
    .expect("rows")
}

/// The ledger's summaries and row details, without run ids and times.
async fn ledger(db: &TestDb) -> Vec<String> {
    let mut out: Vec<String> = sqlx::query_scalar(
        "SELECT concat_ws(' | ', r.run_kind, r.status, s.retained_entity_id, s.entity_type, s.category, \
                s.tenant_id, s.strategy, s.status, s.affected_count, s.held_count, s.skipped_count) \
         FROM sweep_run_entity_summary s JOIN sweep_run r USING (run_id) \
         ORDER BY r.started_at, s.tenant_id",
    )
    .fetch_all(db.pool())
    .await
    .expect("summaries");
    let details: Vec<String> = sqlx::query_scalar(
        "SELECT concat_ws(' | ', d.retained_entity_id, d.entity_type, d.record_id, d.tenant_id, d.action) \
         FROM sweep_run_row_detail d JOIN sweep_run r USING (run_id) \
         ORDER BY r.started_at, d.record_id::bigint",
    )
    .fetch_all(db.pool())
    .await
    .expect("row details");
    out.extend(details);
    out
}

/// What one install does: a hold on an old row, then preview, sweep and
/// erasure in one tenant, then the table and the ledger.
async fn story(runtime: bool) -> Vec<String> {
    let db = contacts_db().await;
    let cohort = builder(db.engine_pool(), runtime)
        .build_engine(&db)
        .await
        .expect("a valid model");
    // A plain-SQL hold, read through the key the build registered (H16).
    db.exec(&format!(
        "INSERT INTO retention_holds (hold_id, retained_entity_id, record_id, tenant_id, reason, created_at) \
         VALUES (gen_random_uuid(), '{CONTACT_ID}', '2', '{TENANT}', 'litigation', now() - interval '1 day')"
    ))
    .await;
    let scope = Scope::Tenant(TenantContext::new(TENANT));
    let preview = cohort.preview(&scope, now()).await.expect("preview");
    let swept = cohort.sweep(&scope, now()).await.expect("sweep");
    let erased = cohort
        .erase(&scope, now(), ErasureRequest::new(SUBJECT))
        .await
        .expect("erasure");
    assert!(swept.entity_failures.is_empty() && erased.entity_failures.is_empty());
    let mut out = vec![
        format!("{:?}", preview.entries),
        format!("{:?} {:?}", swept.status, swept.summaries),
        format!("{:?} {:?}", erased.status, erased.summaries),
    ];
    out.extend(rows(&db).await);
    out.extend(ledger(&db).await);
    out
}

// contract: M1, M6, M7
#[tokio::test]
async fn a_runtime_descriptor_validates_and_sweeps_exactly_like_the_derived_one() {
    let derived = story(false).await;
    let runtime = story(true).await;
    assert_eq!(runtime, derived);
    // The story did something: old rows of the tenant anonymised (by every
    // method), the held row kept, the other tenant untouched, the subject's
    // new row erased.
    let joined = derived.join("\n");
    assert!(
        joined.contains("| t | <null> |  | [redacted] | O. | p-2"),
        "{joined}"
    );
    assert!(joined.contains("2 | 7e4a0000-0000-4000-8000-000000000001"));
    assert!(
        joined.contains("person2@example.org"),
        "the held row is kept"
    );
    assert!(
        joined.contains("person1@example.org"),
        "the other tenant is kept"
    );
    assert!(
        !joined.contains("person8@example.org"),
        "the subject is erased"
    );
    assert!(joined.contains("Sweep | Succeeded"));
    assert!(joined.contains("Erasure | Succeeded"));
}

// contract: V6, V8
#[tokio::test]
async fn live_validation_reports_a_runtime_descriptor_as_it_reports_the_derived_one() {
    let (db, _) = db_with_cohort("public").await;
    // A tenant of the wrong type, an anonymised-to-NULL column that is NOT
    // NULL, a missing column.
    db.exec(
        "CREATE SCHEMA crm; \
         CREATE TABLE crm.rt_contacts (contact_id bigint PRIMARY KEY, org_id text NOT NULL, \
           received_at timestamptz NOT NULL, removed boolean NOT NULL DEFAULT false, \
           removed_at timestamptz, scrubbed_at timestamptz, email text NOT NULL, full_name text NOT NULL, \
           city text NOT NULL, handle text NOT NULL, subject_id uuid NOT NULL);",
    )
    .await;
    let report = |e: Error| match e {
        Error::Validation(report) => report,
        other => panic!("expected validation problems, got {other:?}"),
    };
    let derived = report(
        builder(db.pool(), false)
            .build()
            .await
            .expect_err("invalid"),
    );
    let runtime = report(builder(db.pool(), true).build().await.expect_err("invalid"));
    assert_eq!(runtime, derived);
    let columns: Vec<Option<&str>> = derived
        .problems
        .iter()
        .map(|p| p.column.as_deref())
        .collect();
    for column in ["org_id", "email", "phone"] {
        assert!(columns.contains(&Some(column)), "{derived}");
    }
}

// contract: M2
#[tokio::test]
async fn registration_checks_apply_to_runtime_descriptors() {
    let (db, _) = db_with_cohort("public").await;
    let note = |table: &'static str| {
        EntityDescriptor::builder("Note", "notes", "at")
            .id(Uuid::from_u128(0x40_7e))
            .table(table)
            .fields(["id", "tenant_id", "at"])
            .build()
            .expect("valid")
    };
    let first = note("notes_a");
    let rules = TestRules::new().with(
        "notes",
        Capabilities::only(Strategy::Purge),
        Rule::new(Period::days(1), Strategy::Purge),
    );
    let Err(Error::Validation(report)) = Cohort::builder(db.pool().clone())
        .rules(rules)
        .entity_descriptor(first)
        .entity_descriptor(first)
        .entity_descriptor(note("notes_b"))
        .build()
        .await
    else {
        panic!("expected validation problems");
    };
    let problems: Vec<&str> = report.problems.iter().map(|p| p.problem.as_str()).collect();
    assert!(
        problems.contains(&"the type is registered twice"),
        "{report}"
    );
    assert!(
        problems.iter().any(|p| p.starts_with(
            "the retained-entity id 00000000-0000-0000-0000-00000000407e is also the id of Note"
        )),
        "{report}"
    );
}

fn problems(builder: cohort::model::EntityDescriptorBuilder) -> Vec<DescriptorProblem> {
    match builder.build() {
        Ok(d) => panic!("expected problems, built {}", d.type_name()),
        Err(e) => e.into_problems(),
    }
}

/// A retained type that is valid but for what each case adds.
fn base() -> cohort::model::EntityDescriptorBuilder {
    EntityDescriptor::builder("Note", "notes", "at")
        .id(Uuid::from_u128(0x40_7e))
        .fields(["id", "at"])
}

// contract: M2
#[test]
fn missing_nil_and_malformed_ids_are_refused() {
    // tests/ui/missing_id.rs
    assert_eq!(
        problems(EntityDescriptor::builder("Note", "notes", "at").field("at")),
        [DescriptorProblem::MissingId]
    );
    // tests/ui/duplicate_key.rs: a key given twice.
    assert_eq!(
        problems(base().id(Uuid::from_u128(2)).table("a").table("b")),
        [
            DescriptorProblem::GivenTwice { key: "id" },
            DescriptorProblem::GivenTwice { key: "table" }
        ]
    );
    // tests/ui/nil_id.rs
    assert_eq!(
        problems(
            EntityDescriptor::builder("Note", "notes", "at")
                .field("at")
                .id_str("00000000-0000-0000-0000-000000000000")
        ),
        [DescriptorProblem::NilId]
    );
    assert_eq!(
        problems(
            EntityDescriptor::builder("Note", "notes", "at")
                .field("at")
                .id(Uuid::nil())
        ),
        [DescriptorProblem::NilId]
    );
    // tests/ui/malformed_id.rs
    let malformed = problems(
        EntityDescriptor::builder("Note", "notes", "at")
            .field("at")
            .id_str("a3f467fe-c5d0-4f17-9897"),
    );
    assert!(
        matches!(&malformed[..], [DescriptorProblem::MalformedId { text, .. }] if text == "a3f467fe-c5d0-4f17-9897"),
        "{malformed:?}"
    );
    // An exempt type may have no id, but not a bad one.
    assert!(
        EntityDescriptor::exempt_builder("Invoice", "kept by law")
            .build()
            .is_ok()
    );
    assert_eq!(
        problems(EntityDescriptor::exempt_builder("Invoice", "kept by law").id(Uuid::nil())),
        [DescriptorProblem::NilId]
    );
}

// contract: M4, M5, M6
#[test]
fn marker_and_anonymise_mistakes_are_refused() {
    // tests/ui/duplicate_marker.rs
    assert_eq!(
        problems(base().field("key").record_id("id").record_id("key")),
        [DescriptorProblem::DuplicateMarker {
            role: FieldRole::RecordId,
            first: "id".into(),
            second: "key".into()
        }]
    );
    // tests/ui/tenantless_with_tenant.rs
    assert_eq!(
        problems(base().field("org").tenantless().tenant("org")),
        [DescriptorProblem::TenantOnTenantless {
            field: "org".into()
        }]
    );
    // tests/ui/anonymise_null_not_option.rs
    assert_eq!(
        problems(
            base()
                .field(FieldSpec::new("email").rust_type("String"))
                .anonymise_null("email")
        ),
        [DescriptorProblem::NullOnRequiredField {
            field: "email".into(),
            rust_type: "String".into()
        }]
    );
    // tests/ui/anchor_no_field.rs
    assert_eq!(
        problems(
            EntityDescriptor::builder("Note", "notes", "created")
                .id(Uuid::from_u128(1))
                .fields(["at", "body"])
        ),
        [DescriptorProblem::UnknownField {
            role: FieldRole::Anchor,
            field: "created".into(),
            known: vec!["at".into(), "body".into()]
        }]
    );
    // Two methods on one field; an empty anonymiser name.
    assert_eq!(
        problems(
            base()
                .field(FieldSpec::new("email").optional())
                .anonymise_null("email")
                .anonymise_literal("email", "x")
                .anonymise_named("id", "")
        ),
        [
            DescriptorProblem::TwoAnonymiseMethods {
                field: "email".into()
            },
            DescriptorProblem::EmptyAnonymiserName { field: "id".into() },
        ]
    );
}

// contract: M2, M4, M5, M6, M7
#[test]
fn every_mistake_is_reported_at_once() {
    // tests/ui/all_errors_at_once.rs, and what only a builder can get wrong:
    // names that are not identifiers, fields declared twice, markers,
    // methods and subjects naming fields that do not exist.
    let long = "x".repeat(64);
    let error: DescriptorError = EntityDescriptor::builder("Note", "", "nope")
        .id_str("xyz")
        .table(long.clone())
        .schema("")
        .tenantless()
        .field("a")
        .field("a")
        .field(FieldSpec::new("b").column("a"))
        .field(FieldSpec::new("c").column("bad\0name"))
        .tenant("a")
        .tenant("b")
        .soft_delete("ghost")
        .anonymise_null("a")
        .anonymise_empty("phantom")
        .erasure_subject("c")
        .erasure_subject("c")
        .erasure_subject("nobody")
        .build()
        .expect_err("many mistakes");
    assert_eq!(error.type_name(), "Note");
    let known: Vec<String> = vec!["a".into(), "b".into(), "c".into()];
    let unknown = |role, field: &str| DescriptorProblem::UnknownField {
        role,
        field: field.into(),
        known: known.clone(),
    };
    assert_eq!(
        error.problems(),
        [
            DescriptorProblem::DuplicateField { field: "a".into() },
            DescriptorProblem::InvalidName {
                kind: NameKind::Column,
                name: "bad\0name".into(),
                field: Some("c".into()),
                defaulted: false,
                problem: IdentProblem::ContainsNul
            },
            DescriptorProblem::DuplicateColumn {
                column: "a".into(),
                first: "a".into(),
                second: "b".into()
            },
            DescriptorProblem::EmptyCategory,
            unknown(FieldRole::Anchor, "nope"),
            DescriptorProblem::MalformedId {
                text: "xyz".into(),
                reason: "expected 32 hex digits, optionally hyphenated 8-4-4-4-12, like \
                         `a3f467fe-c5d0-4f17-9897-83c373cc1dc8`, found 3 characters"
                    .into()
            },
            DescriptorProblem::TenantOnTenantless { field: "a".into() },
            DescriptorProblem::DuplicateMarker {
                role: FieldRole::Tenant,
                first: "a".into(),
                second: "b".into()
            },
            DescriptorProblem::TenantOnTenantless { field: "b".into() },
            unknown(FieldRole::SoftDelete, "ghost"),
            DescriptorProblem::NullOnRequiredField {
                field: "a".into(),
                rust_type: "_".into()
            },
            unknown(FieldRole::Anonymised, "phantom"),
            DescriptorProblem::DuplicateErasureSubject { field: "c".into() },
            unknown(FieldRole::ErasureSubject, "nobody"),
            DescriptorProblem::InvalidName {
                kind: NameKind::Table,
                name: long,
                field: None,
                defaulted: false,
                problem: IdentProblem::TooLong
            },
            DescriptorProblem::InvalidName {
                kind: NameKind::Schema,
                name: String::new(),
                field: None,
                defaulted: false,
                problem: IdentProblem::Empty
            },
        ]
    );
    // Every problem has a message and a fix; `?` turns them into validation
    // problems of the type.
    assert!(
        error
            .problems()
            .iter()
            .all(|p| !p.to_string().is_empty() && !p.fix().is_empty())
    );
    let Error::Validation(report) = Error::from(error.clone()) else {
        panic!("a validation error");
    };
    assert_eq!(report.problems.len(), error.problems().len());
    assert!(
        report
            .problems
            .iter()
            .all(|p| p.type_name.as_deref() == Some("Note"))
    );
}

// contract: M2
#[tokio::test]
async fn a_builder_mistake_stops_the_host_with_question_mark() {
    async fn start(pool: sqlx::PgPool) -> Result<Cohort, Error> {
        let broken = EntityDescriptor::builder("Note", "notes", "at")
            .field("at")
            .build()?;
        Cohort::builder(pool)
            .rules(TestRules::new())
            .entity_descriptor(broken)
            .build()
            .await
    }
    let (db, _) = db_with_cohort("public").await;
    let Err(Error::Validation(report)) = start(db.pool().clone()).await else {
        panic!("the missing id should stop the host");
    };
    assert_eq!(report.problems.len(), 1, "{report}");
    assert_eq!(
        report.problems[0].problem,
        "a retained type needs a stable id"
    );
    // Nothing was registered: the ledger's registry of types is empty.
    let registered: i64 = sqlx::query_scalar("SELECT count(*) FROM public.retention_entities")
        .fetch_one(db.pool())
        .await
        .expect("registry");
    assert_eq!(registered, 0);
}
