// Every type says whether it is retained or exempt.
#[derive(cohort::Retained)]
pub struct SessionNote {
    pub id: i64,
    pub created_at: i64,
}

#[derive(cohort::Retained)]
#[cohort(table = "notes", id = "a3f467fe-c5d0-4f17-9897-83c373cc1dc8")]
pub struct Note {
    pub id: i64,
}

fn main() {}
