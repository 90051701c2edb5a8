// Each key may be given once, even across attributes.
#[derive(cohort::Retained)]
#[cohort(
    category = "session-notes",
    anchor = "created_at",
    id = "a3f467fe-c5d0-4f17-9897-83c373cc1dc8"
)]
#[cohort(table = "notes", table = "session_notes", tenantless, tenantless)]
#[cohort(category = "other")]
pub struct SessionNote {
    pub id: i64,
    pub created_at: i64,
    #[cohort(column = "text")]
    #[cohort(column = "body", erasure_subject, erasure_subject)]
    pub body: Option<String>,
    #[cohort(anonymise = "empty", anonymise_with = Redact)]
    pub title: String,
}

pub struct Redact;

fn main() {}
