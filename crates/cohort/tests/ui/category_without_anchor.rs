// `category` alone does not make a type retained: the anchor is needed too.
#[derive(cohort::Retained)]
#[cohort(
    category = "session-notes",
    id = "a3f467fe-c5d0-4f17-9897-83c373cc1dc8"
)]
pub struct SessionNote {
    pub id: i64,
    pub created_at: i64,
}

fn main() {}
