// An exempt type takes no part in retention: no category.
#[derive(cohort::Retained)]
#[cohort(exempt = "reference data", category = "countries")]
pub struct Country {
    pub code: String,
}

fn main() {}
