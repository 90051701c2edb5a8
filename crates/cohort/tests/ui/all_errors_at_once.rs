// Problems in different places are reported together.
#[derive(cohort::Retained)]
#[cohort(
    category = "case-contacts",
    anchor = "created",
    id = "b7316df4",
    tenantless
)]
pub struct CaseContact {
    #[cohort(tenant)]
    pub tenant_id: i64,
    pub created_at: i64,
    #[cohort(anonymise = "null", colour = "red")]
    pub email: String,
}

fn main() {}
