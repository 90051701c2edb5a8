// Values of the wrong shape.
#[derive(cohort::Retained)]
#[cohort(category = session_notes, anchor = "created_at", id = 0xa3f467fe)]
#[cohort(table, schema = "", tenantless = true)]
pub struct SessionNote {
    pub id: i64,
    pub created_at: i64,
    #[cohort(anonymise = "redact")]
    pub body: String,
    #[cohort(anonymise(text = "[redacted]"))]
    pub title: String,
    #[cohort(anonymise_with = "")]
    pub email: String,
    #[cohort(column = "")]
    pub phone: String,
    #[cohort(tenant = "yes")]
    pub tenant_id: i64,
}

fn main() {}
