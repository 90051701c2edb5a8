// Unknown keys, and keys in the wrong place.
#[derive(cohort::Retained)]
#[cohort(
    category = "session-notes",
    anchor = "created_at",
    id = "a3f467fe-c5d0-4f17-9897-83c373cc1dc8"
)]
#[cohort(retention = "30d", record_id)]
pub struct SessionNote {
    pub id: i64,
    #[cohort(rename = "created")]
    pub created_at: i64,
    #[cohort(table = "notes")]
    pub body: String,
}

fn main() {}
