// Each role marker may be on one field only.
#[derive(cohort::Retained)]
#[cohort(
    category = "case-contacts",
    anchor = "created_at",
    id = "b7316df4-7db5-46ad-aea7-f65c4b430f73"
)]
pub struct CaseContact {
    #[cohort(record_id)]
    pub id: i64,
    #[cohort(tenant)]
    pub tenant_id: i64,
    #[cohort(tenant, record_id)]
    pub organisation_id: i64,
    #[cohort(soft_delete)]
    pub deleted: bool,
    #[cohort(soft_delete)]
    pub hidden: bool,
    #[cohort(deleted_at)]
    pub deleted_at: Option<i64>,
    #[cohort(deleted_at)]
    pub hidden_at: Option<i64>,
    #[cohort(anonymised_at)]
    pub anonymised_at: Option<i64>,
    #[cohort(anonymised_at)]
    pub scrubbed_at: Option<i64>,
    pub created_at: i64,
}

fn main() {}
