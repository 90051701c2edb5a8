// A tenantless type cannot have a tenant field.
#[derive(cohort::Retained)]
#[cohort(
    category = "system-events",
    anchor = "at",
    id = "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0",
    tenantless
)]
pub struct SystemEvent {
    pub id: i64,
    #[cohort(tenant)]
    pub tenant_id: i64,
    pub at: i64,
}

fn main() {}
