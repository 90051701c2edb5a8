// An exempt type takes no part in retention: no anchor.
#[derive(cohort::Retained)]
#[cohort(anchor = "created_at")]
#[cohort(exempt = "reference data")]
pub struct Country {
    pub code: String,
    pub created_at: i64,
}

fn main() {}
