// Setting NULL needs a nullable (Option) field.
#[derive(cohort::Retained)]
#[cohort(
    category = "case-contacts",
    anchor = "created_at",
    id = "b7316df4-7db5-46ad-aea7-f65c4b430f73"
)]
pub struct CaseContact {
    pub id: i64,
    pub created_at: i64,
    #[cohort(anonymise = "null")]
    pub email: String,
    #[cohort(anonymise = "null")]
    pub phone: Option<String>,
}

fn main() {}
