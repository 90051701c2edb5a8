// `anonymise_with` names a type implementing `cohort::Anonymiser`.
#[derive(cohort::Retained)]
#[cohort(
    category = "case-contacts",
    anchor = "created_at",
    id = "b7316df4-7db5-46ad-aea7-f65c4b430f73"
)]
pub struct CaseContact {
    pub id: i64,
    pub created_at: i64,
    #[cohort(anonymise_with = NotAnAnonymiser)]
    pub email: String,
}

pub struct NotAnAnonymiser;

fn main() {}
