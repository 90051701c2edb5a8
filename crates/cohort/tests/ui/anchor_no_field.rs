// `anchor` names a field, not a column.
#[derive(cohort::Retained)]
#[cohort(
    category = "session-notes",
    anchor = "created",
    id = "a3f467fe-c5d0-4f17-9897-83c373cc1dc8"
)]
pub struct SessionNote {
    pub id: i64,
    #[cohort(column = "created")]
    pub created_at: i64,
}

fn main() {}
