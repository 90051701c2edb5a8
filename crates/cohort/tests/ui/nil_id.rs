// The nil UUID is not an identity.
#[derive(cohort::Retained)]
#[cohort(
    category = "session-notes",
    anchor = "created_at",
    id = "00000000-0000-0000-0000-000000000000"
)]
pub struct SessionNote {
    pub id: i64,
    pub created_at: i64,
}

fn main() {}
