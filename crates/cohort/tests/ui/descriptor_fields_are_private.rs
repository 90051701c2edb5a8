// contract: C3 — descriptors are built by `#[derive(Retained)]` or the checked
// runtime builder only: their fields are private, so a host cannot write one
// that skipped the derive's checks, and Cohort can add fields without breaking hosts.
use cohort::model::{EntityDescriptor, FieldDescriptor, Markers, Membership};

static FIELDS: [FieldDescriptor; 1] = [FieldDescriptor {
    field: "id",
    column: "id",
    optional: false,
    rust_type: "i64",
}];

static NOTE: EntityDescriptor = EntityDescriptor {
    type_name: "SessionNote",
    membership: Membership::Retained {
        category: "session-notes",
        anchor: "created_at",
    },
    entity_id: None,
    table: "session_notes",
    schema: None,
    tenantless: false,
    fields: &FIELDS,
    markers: Markers {
        record_id: None,
        tenant: None,
        soft_delete: None,
        deleted_at: None,
        anonymised_at: None,
    },
    anonymise: &[],
    erasure_subjects: &[],
    guard: None,
    category_from: None,
    event_key: None,
};

fn main() {
    let _ = (&NOTE, &FIELDS);
}
