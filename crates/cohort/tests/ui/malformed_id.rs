// The id must be a UUID: 32 hex digits, plain or hyphenated 8-4-4-4-12.
#[derive(cohort::Retained)]
#[cohort(
    category = "session-notes",
    anchor = "created_at",
    id = "a3f467fe-c5d0-4f17-9897-83c373cc1dcz"
)]
pub struct SessionNote {
    pub id: i64,
    pub created_at: i64,
}

#[derive(cohort::Retained)]
#[cohort(
    category = "session-notes",
    anchor = "created_at",
    id = "a3f467fe-c5d04f17-9897-83c373cc1dc8"
)]
pub struct BadLayout {
    pub created_at: i64,
}

#[derive(cohort::Retained)]
#[cohort(exempt = "reference data", id = "not-a-uuid")]
pub struct ExemptWithBadId {
    pub id: i64,
}

fn main() {}
