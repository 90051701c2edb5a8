use uuid::Uuid;

/// A map without `category_from`, and a `category_from` naming no field
/// with a value mapped twice: every mistake at once.
#[derive(cohort::Retained)]
#[cohort(
    category = "drafts",
    anchor = "created_at",
    id = "5c2d8e1f-4a6b-4c7d-9e0f-1a2b3c4d5e80",
    category_map("invoice" = "invoices")
)]
pub struct MapAlone {
    pub id: i64,
    pub tenant_id: Uuid,
    pub created_at: chrono::DateTime<chrono::Utc>,
}

#[derive(cohort::Retained)]
#[cohort(
    category_from = "klass",
    category_map("invoice" = "invoices", "invoice" = "bills", "memo" = ""),
    anchor = "created_at",
    id = "5c2d8e1f-4a6b-4c7d-9e0f-1a2b3c4d5e81"
)]
pub struct BadMap {
    pub id: i64,
    pub tenant_id: Uuid,
    pub created_at: chrono::DateTime<chrono::Utc>,
    pub kind: String,
}

fn main() {}
