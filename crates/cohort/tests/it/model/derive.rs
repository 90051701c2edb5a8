//! `#[derive(Retained)]`: the descriptors it emits for realistic row types.
//! The compile-time errors it reports are checked by `tests/ui.rs`.
#![allow(
    dead_code,
    unreachable_pub,
    reason = "public row types, as a host declares them; only their descriptors are read"
)]

use chrono::{DateTime, Utc};
use cohort::Retained;
use cohort::model::{
    AnonymiseMethod, AnonymisedField, EntityDescriptor, FieldDescriptor, Membership,
};
use uuid::Uuid;

/// A therapy session note: retained, tenant-scoped by convention.
#[derive(cohort::Retained)]
#[cohort(
    category = "session-notes",
    anchor = "created_at",
    id = "a3f467fe-c5d0-4f17-9897-83c373cc1dc8",
    table = "session_notes"
)]
pub(super) struct SessionNote {
    /// Record id.
    pub id: Uuid,
    /// Owning tenant.
    pub tenant_id: Uuid,
    /// Ages the row.
    pub created_at: DateTime<Utc>,
    /// The note.
    pub body: String,
}

/// A case contact whose personal data is scrubbed rather than deleted.
#[derive(cohort::Retained)]
#[cohort(
    category = "case-contacts",
    anchor = "created_at",
    id = "b7316df4-7db5-46ad-aea7-f65c4b430f73",
    table = "case_contacts"
)]
pub(super) struct CaseContact {
    /// Record id.
    pub id: Uuid,
    /// Owning tenant.
    pub tenant_id: Uuid,
    /// Ages the row.
    pub created_at: DateTime<Utc>,
    /// Set when the row was anonymised.
    pub anonymised_at: Option<DateTime<Utc>>,
    /// Scrubbed to NULL.
    #[cohort(anonymise = "null")]
    pub email: Option<String>,
    /// Scrubbed to the empty string.
    #[cohort(anonymise = "empty")]
    pub full_name: String,
    /// Scrubbed to a fixed text.
    #[cohort(anonymise(literal = "[redacted]"))]
    pub phone: String,
}

/// Keeps an e-mail address's domain, drops the local part.
pub(super) struct KeepDomain;

impl cohort::Anonymiser for KeepDomain {
    fn anonymise(original: Option<&str>) -> Option<String> {
        let domain = original?.rsplit_once('@')?.1;
        Some(format!("redacted@{domain}"))
    }
}

/// Anonymisers in a module, to check `anonymise_with` takes a path.
pub(super) mod anonymisers {
    /// Replaces any value with `"x"`.
    pub(crate) struct Cross;

    impl cohort::Anonymiser for Cross {
        fn anonymise(_original: Option<&str>) -> Option<String> {
            Some("x".to_owned())
        }
    }
}

/// Every marker, renamed columns, a schema, a custom anonymiser and two
/// erasure subjects; keys spread over several attributes.
#[derive(cohort::Retained)]
#[cohort(category = "referrals", anchor = "received")]
#[cohort(id = "5E0C4B1A7F2D4C3B9A8E6D5C4B3A2F10", schema = "clinic")]
pub(super) struct ReferralLetter {
    /// Record id under a non-default name and column.
    #[cohort(record_id, column = "referral_id")]
    pub key: Uuid,
    /// Tenant under a non-default name.
    #[cohort(tenant)]
    #[cohort(column = "org_id")]
    pub organisation: Uuid,
    /// Soft-delete flag.
    #[cohort(soft_delete)]
    pub removed: bool,
    /// Soft-delete time.
    #[cohort(deleted_at)]
    pub removed_at: std::option::Option<DateTime<Utc>>,
    /// Anonymisation time.
    #[cohort(anonymised_at, column = "scrubbed")]
    pub scrubbed_at: core::option::Option<DateTime<Utc>>,
    /// Ages the row (its column is renamed too).
    #[cohort(column = "received_at")]
    pub received: DateTime<Utc>,
    /// The patient: an erasure subject.
    #[cohort(erasure_subject)]
    pub patient_id: Uuid,
    /// The referrer's address: custom anonymiser and second erasure subject.
    #[cohort(anonymise_with = KeepDomain, erasure_subject)]
    pub referrer_email: String,
    /// A custom anonymiser named by a module path.
    #[cohort(anonymise_with = anonymisers::Cross)]
    pub notes: Option<String>,
    /// A raw identifier.
    pub r#type: String,
}

/// Tenantless, with the default (snake_case) table name.
#[derive(cohort::Retained)]
#[cohort(category = "system-events", anchor = "at")]
#[cohort(id = "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0", tenantless)]
pub(super) struct SystemEventLog {
    /// Record id.
    pub id: i64,
    /// Ages the row.
    pub at: DateTime<Utc>,
    /// What happened.
    pub message: String,
}

/// Explicitly exempt, without an id.
#[derive(cohort::Retained)]
#[cohort(exempt = "statutory accounting records, kept outside Cohort")]
pub(super) struct Invoice {
    /// Record id.
    pub id: Uuid,
    /// Owning tenant.
    pub tenant_id: Uuid,
}

/// Explicitly exempt, with an id and a table.
#[derive(cohort::Retained)]
#[cohort(
    exempt = "reference data",
    id = "c0ffee00-0000-4000-8000-000000000001",
    table = "countries"
)]
pub(super) struct Country {
    /// ISO code.
    pub code: String,
}

/// Generic types work when the attributes do not mention the parameters.
#[derive(cohort::Retained)]
#[cohort(category = "payloads", anchor = "created_at")]
#[cohort(id = "9d1c2b3a-4e5f-4a6b-8c7d-0e1f2a3b4c5d")]
pub(super) struct Payload<T: Send> {
    /// Record id.
    pub id: Uuid,
    /// Ages the row.
    pub created_at: DateTime<Utc>,
    /// The payload.
    #[cohort(anonymise = "null")]
    pub data: Option<T>,
}

fn field(descriptor: &EntityDescriptor, field: &'static str) -> FieldDescriptor {
    match descriptor.field(field) {
        Some(found) => *found,
        None => panic!("{} has no field {field}", descriptor.type_name()),
    }
}

/// A field descriptor as `(field, column, optional, rust_type)`.
type Fd = (&'static str, &'static str, bool, &'static str);

fn fd(f: &FieldDescriptor) -> Fd {
    (f.field(), f.column(), f.optional(), f.rust_type())
}

fn fields(descriptor: &EntityDescriptor) -> Vec<Fd> {
    descriptor.fields().iter().map(fd).collect()
}

/// The markers as `[record_id, tenant, soft_delete, deleted_at, anonymised_at]`.
fn markers(descriptor: &EntityDescriptor) -> [Option<&'static str>; 5] {
    let m = descriptor.markers();
    [
        m.record_id(),
        m.tenant(),
        m.soft_delete(),
        m.deleted_at(),
        m.anonymised_at(),
    ]
}

/// The anonymise methods as comparable text (`AnonymiseMethod` has no
/// `PartialEq`: it holds function pointers).
fn methods(anonymise: &[AnonymisedField]) -> Vec<(&'static str, String)> {
    anonymise
        .iter()
        .map(|a| {
            let method = match a.method() {
                AnonymiseMethod::Null => "null".to_owned(),
                AnonymiseMethod::EmptyString => "empty".to_owned(),
                AnonymiseMethod::Literal(text) => format!("literal {text}"),
                AnonymiseMethod::Custom(custom) => format!("custom {}", custom.name()),
                other => format!("unknown {other:?}"),
            };
            (a.field(), method)
        })
        .collect()
}

// contract: M1
// contract: M2
#[test]
fn session_note_is_retained_with_its_stable_id() {
    let d = SessionNote::descriptor();
    assert_eq!(d.type_name(), "SessionNote");
    assert_eq!(
        d.membership(),
        Membership::Retained {
            category: "session-notes",
            anchor: "created_at"
        }
    );
    assert_eq!(
        d.entity_id(),
        Some(Uuid::parse_str("a3f467fe-c5d0-4f17-9897-83c373cc1dc8").expect("valid uuid"))
    );
    assert_eq!(d.table(), "session_notes");
    assert_eq!(d.schema(), None);
    assert!(!d.tenantless());
    assert_eq!(
        fields(d),
        [
            ("id", "id", false, "Uuid"),
            ("tenant_id", "tenant_id", false, "Uuid"),
            ("created_at", "created_at", false, "DateTime<Utc>"),
            ("body", "body", false, "String"),
        ]
    );
    assert_eq!(markers(d), [None; 5]);
    assert!(d.anonymise().is_empty());
    assert!(d.erasure_subjects().is_empty());
    // The same static every time.
    assert!(std::ptr::eq(d, SessionNote::descriptor()));
}

// contract: M6
#[test]
fn case_contact_anonymises_with_null_empty_and_literal() {
    let d = CaseContact::descriptor();
    assert_eq!(d.type_name(), "CaseContact");
    assert_eq!(
        d.membership(),
        Membership::Retained {
            category: "case-contacts",
            anchor: "created_at"
        }
    );
    assert_eq!(
        d.entity_id(),
        Some(Uuid::from_u128(0xb7316df4_7db5_46ad_aea7_f65c4b430f73))
    );
    assert_eq!(d.table(), "case_contacts");
    assert_eq!(d.schema(), None);
    assert!(!d.tenantless());
    assert_eq!(
        fields(d),
        [
            ("id", "id", false, "Uuid"),
            ("tenant_id", "tenant_id", false, "Uuid"),
            ("created_at", "created_at", false, "DateTime<Utc>"),
            (
                "anonymised_at",
                "anonymised_at",
                true,
                "Option<DateTime<Utc>>"
            ),
            ("email", "email", true, "Option<String>"),
            ("full_name", "full_name", false, "String"),
            ("phone", "phone", false, "String"),
        ]
    );
    // Roles are left to conventions: no explicit markers.
    assert_eq!(markers(d), [None; 5]);
    assert_eq!(
        methods(d.anonymise()),
        [
            ("email", "null".to_owned()),
            ("full_name", "empty".to_owned()),
            ("phone", "literal [redacted]".to_owned()),
        ]
    );
    assert!(d.erasure_subjects().is_empty());
}

#[test]
fn markers_renames_and_schema() {
    let d = ReferralLetter::descriptor();
    assert_eq!(d.type_name(), "ReferralLetter");
    assert_eq!(
        d.membership(),
        Membership::Retained {
            category: "referrals",
            anchor: "received"
        }
    );
    assert_eq!(
        d.entity_id(),
        Some(Uuid::from_u128(0x5e0c4b1a_7f2d_4c3b_9a8e_6d5c4b3a2f10))
    );
    assert_eq!(d.table(), "referral_letter");
    assert_eq!(d.schema(), Some("clinic"));
    assert!(!d.tenantless());
    assert_eq!(
        markers(d),
        [
            Some("key"),
            Some("organisation"),
            Some("removed"),
            Some("removed_at"),
            Some("scrubbed_at"),
        ]
    );
    assert_eq!(
        fields(d),
        [
            ("key", "referral_id", false, "Uuid"),
            ("organisation", "org_id", false, "Uuid"),
            ("removed", "removed", false, "bool"),
            (
                "removed_at",
                "removed_at",
                true,
                "std::option::Option<DateTime<Utc>>"
            ),
            (
                "scrubbed_at",
                "scrubbed",
                true,
                "core::option::Option<DateTime<Utc>>"
            ),
            ("received", "received_at", false, "DateTime<Utc>"),
            ("patient_id", "patient_id", false, "Uuid"),
            ("referrer_email", "referrer_email", false, "String"),
            ("notes", "notes", true, "Option<String>"),
            ("type", "type", false, "String"),
        ]
    );
    // The anchor names a field; its column comes from the field descriptor.
    assert_eq!(field(d, "received").column(), "received_at");
}

// contract: M6
#[test]
fn custom_anonymisers_are_called_through_the_descriptor() {
    let d = ReferralLetter::descriptor();
    assert_eq!(
        methods(d.anonymise()),
        [
            ("referrer_email", "custom KeepDomain".to_owned()),
            ("notes", "custom Cross".to_owned()),
        ]
    );
    let AnonymiseMethod::Custom(keep_domain) = d.anonymise()[0].method() else {
        panic!("referrer_email should use a custom anonymiser");
    };
    assert_eq!(
        keep_domain.anonymise(Some("ann@example.org")).as_deref(),
        Some("redacted@example.org")
    );
    assert_eq!(keep_domain.anonymise(None), None);
    let AnonymiseMethod::Custom(cross) = d.anonymise()[1].method() else {
        panic!("notes should use a custom anonymiser");
    };
    assert_eq!(cross.anonymise(None).as_deref(), Some("x"));
}

// contract: M7
#[test]
fn several_erasure_subjects() {
    assert_eq!(
        ReferralLetter::descriptor().erasure_subjects(),
        &["patient_id", "referrer_email"]
    );
}

#[test]
fn tenantless_type_with_default_table() {
    let d = SystemEventLog::descriptor();
    assert_eq!(d.type_name(), "SystemEventLog");
    assert!(d.tenantless());
    assert_eq!(d.table(), "system_event_log");
    assert_eq!(d.schema(), None);
    assert_eq!(
        d.membership(),
        Membership::Retained {
            category: "system-events",
            anchor: "at"
        }
    );
    assert_eq!(
        d.entity_id(),
        Some(Uuid::from_u128(0x0f1e2d3c_4b5a_6978_8796_a5b4c3d2e1f0))
    );
    assert_eq!(markers(d), [None; 5]);
    assert_eq!(
        fields(d),
        [
            ("id", "id", false, "i64"),
            ("at", "at", false, "DateTime<Utc>"),
            ("message", "message", false, "String"),
        ]
    );
    assert!(d.anonymise().is_empty());
    assert!(d.erasure_subjects().is_empty());
}

// contract: M1
#[test]
fn exempt_types_carry_their_reason() {
    let d = Invoice::descriptor();
    assert_eq!(d.type_name(), "Invoice");
    assert_eq!(
        d.membership(),
        Membership::Exempt {
            reason: "statutory accounting records, kept outside Cohort"
        }
    );
    assert_eq!(d.entity_id(), None);
    assert_eq!(d.table(), "invoice");
    assert_eq!(d.schema(), None);
    assert!(!d.tenantless());
    assert_eq!(
        fields(d),
        [
            ("id", "id", false, "Uuid"),
            ("tenant_id", "tenant_id", false, "Uuid"),
        ]
    );
    assert_eq!(markers(d), [None; 5]);
    assert!(d.anonymise().is_empty());
    assert!(d.erasure_subjects().is_empty());

    let d = Country::descriptor();
    assert_eq!(
        d.membership(),
        Membership::Exempt {
            reason: "reference data"
        }
    );
    assert_eq!(
        d.entity_id(),
        Some(Uuid::from_u128(0xc0ffee00_0000_4000_8000_000000000001))
    );
    assert_eq!(d.table(), "countries");
    assert_eq!(fields(d), [("code", "code", false, "String")]);
}

#[test]
fn generic_types() {
    let d = <Payload<Vec<u8>> as Retained>::descriptor();
    assert!(std::ptr::eq(d, <Payload<String> as Retained>::descriptor()));
    assert_eq!(d.type_name(), "Payload");
    assert_eq!(d.table(), "payload");
    assert_eq!(fd(&field(d, "data")), ("data", "data", true, "Option<T>"));
    assert_eq!(methods(d.anonymise()), [("data", "null".to_owned())]);
}

// contract: M2
#[test]
fn entity_id_constant_and_trait_function() {
    const NOTE: Uuid = SessionNote::ENTITY_ID; // usable in const context
    assert_eq!(
        NOTE,
        Uuid::parse_str("a3f467fe-c5d0-4f17-9897-83c373cc1dc8").expect("valid uuid")
    );
    assert_eq!(
        Some(SessionNote::ENTITY_ID),
        SessionNote::descriptor().entity_id()
    );
    assert_eq!(
        ReferralLetter::ENTITY_ID,
        Uuid::from_u128(0x5e0c4b1a_7f2d_4c3b_9a8e_6d5c4b3a2f10)
    );
    assert_eq!(
        Payload::<u8>::ENTITY_ID,
        Uuid::from_u128(0x9d1c2b3a_4e5f_4a6b_8c7d_0e1f2a3b4c5d)
    );
    // An exempt type declared with an id has the constant too.
    assert_eq!(
        Country::ENTITY_ID,
        Uuid::from_u128(0xc0ffee00_0000_4000_8000_000000000001)
    );

    // Generic code reads the id through the trait.
    fn id_of<T: Retained>() -> Option<Uuid> {
        T::entity_id()
    }
    assert_eq!(id_of::<SessionNote>(), Some(SessionNote::ENTITY_ID));
    assert_eq!(id_of::<CaseContact>(), Some(CaseContact::ENTITY_ID));
    assert_eq!(
        id_of::<Payload<String>>(),
        Some(Payload::<String>::ENTITY_ID)
    );
    assert_eq!(id_of::<Country>(), Some(Country::ENTITY_ID));
    // An exempt type without an id has neither.
    assert_eq!(id_of::<Invoice>(), None);
}

#[test]
fn membership_helpers() {
    let retained = SessionNote::descriptor().membership();
    assert_eq!(retained.category(), Some("session-notes"));
    assert_eq!(retained.anchor(), Some("created_at"));
    assert_eq!(retained.exempt_reason(), None);
    let exempt = Country::descriptor().membership();
    assert_eq!(exempt.category(), None);
    assert_eq!(exempt.anchor(), None);
    assert_eq!(exempt.exempt_reason(), Some("reference data"));
}

/// Private types in a private module: the generated impl and `ENTITY_ID`
/// (used or not) raise no lint (this file is checked with `-D warnings`).
mod private_types {
    use chrono::{DateTime, Utc};

    #[derive(cohort::Retained)]
    #[cohort(category = "drafts", anchor = "at", tenantless)]
    #[cohort(id = "7b0e3d2c-1a4f-4e5d-8c6b-9a0f1e2d3c4b")]
    #[expect(dead_code, reason = "no row is built: only the descriptor is read")]
    pub(super) struct Draft {
        id: i64,
        at: DateTime<Utc>,
    }

    /// Its `ENTITY_ID` is never used.
    #[derive(cohort::Retained)]
    #[cohort(exempt = "scratch data", id = "4a5b6c7d-8e9f-4a0b-8c1d-2e3f4a5b6c7d")]
    #[expect(dead_code, reason = "no row is built: only the descriptor is read")]
    struct Scratch {
        id: i64,
    }

    pub(super) fn scratch_is_exempt() -> bool {
        <Scratch as cohort::Retained>::descriptor()
            .membership()
            .exempt_reason()
            .is_some()
    }
}

#[test]
fn private_types_derive_too() {
    assert_eq!(
        private_types::Draft::ENTITY_ID,
        Uuid::from_u128(0x7b0e3d2c_1a4f_4e5d_8c6b_9a0f1e2d3c4b)
    );
    assert!(private_types::scratch_is_exempt());
}

/// A retained type generated by `macro_rules!`: every attribute value arrives
/// as a fragment (`$x:literal`, `$x:path`, `$x:ty`, `$x:ident`), which the
/// compiler wraps in an invisible group.
macro_rules! retained_type {
    (
        $name:ident,
        id = $id:literal,
        category = $category:literal,
        table = $table:literal,
        schema = $schema:literal,
        anchor = $anchor:literal,
        anchor_field = $anchor_field:ident,
        column = $column:literal,
        anonymise = $method:literal,
        literal = $text:literal,
        anonymiser = $anonymiser:path,
        email_type = $email:ty $(,)?
    ) => {
        /// Generated by `retained_type!`.
        #[derive(cohort::Retained)]
        #[cohort(category = $category, anchor = $anchor, id = $id)]
        #[cohort(table = $table, schema = $schema)]
        pub struct $name {
            /// Record id.
            pub id: Uuid,
            /// Owning tenant.
            pub tenant_id: Uuid,
            /// Ages the row.
            #[cohort(column = $column)]
            pub $anchor_field: DateTime<Utc>,
            /// Set when the row was anonymised.
            pub anonymised_at: Option<DateTime<Utc>>,
            /// Scrubbed by the method given to the macro.
            #[cohort(anonymise = $method, erasure_subject)]
            pub email: $email,
            /// Scrubbed to a fixed text given to the macro.
            #[cohort(anonymise(literal = $text))]
            pub phone: String,
            /// Scrubbed by the anonymiser given to the macro.
            #[cohort(anonymise_with = $anonymiser)]
            pub work_email: String,
        }
    };
}

retained_type!(
    GeneratedNote,
    id = "6f1d2e3c-4b5a-4c7d-8e9f-0a1b2c3d4e5f",
    category = "generated-notes",
    table = "generated_notes",
    schema = "macros",
    anchor = "written_at",
    anchor_field = written_at,
    column = "written",
    anonymise = "null",
    literal = "[gone]",
    anonymiser = anonymisers::Cross,
    email_type = Option<String>,
);

#[test]
fn attribute_values_from_macro_rules_fragments() {
    let d = GeneratedNote::descriptor();
    assert_eq!(d.type_name(), "GeneratedNote");
    assert_eq!(
        d.membership(),
        Membership::Retained {
            category: "generated-notes",
            anchor: "written_at"
        }
    );
    assert_eq!(
        d.entity_id(),
        Some(Uuid::from_u128(0x6f1d2e3c_4b5a_4c7d_8e9f_0a1b2c3d4e5f))
    );
    assert_eq!(GeneratedNote::entity_id(), d.entity_id());
    assert_eq!(Some(GeneratedNote::ENTITY_ID), d.entity_id());
    assert_eq!(d.table(), "generated_notes");
    assert_eq!(d.schema(), Some("macros"));
    assert!(!d.tenantless());
    assert_eq!(
        fields(d),
        [
            ("id", "id", false, "Uuid"),
            ("tenant_id", "tenant_id", false, "Uuid"),
            ("written_at", "written", false, "DateTime<Utc>"),
            (
                "anonymised_at",
                "anonymised_at",
                true,
                "Option<DateTime<Utc>>"
            ),
            ("email", "email", true, "Option<String>"),
            ("phone", "phone", false, "String"),
            ("work_email", "work_email", false, "String"),
        ]
    );
    assert_eq!(
        methods(d.anonymise()),
        [
            ("email", "null".to_owned()),
            ("phone", "literal [gone]".to_owned()),
            ("work_email", "custom Cross".to_owned()),
        ]
    );
    assert_eq!(d.erasure_subjects(), &["email"]);
}
