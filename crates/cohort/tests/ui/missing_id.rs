// A retained type must declare its stable id.
#[derive(cohort::Retained)]
#[cohort(category = "session-notes", anchor = "created_at")]
pub struct SessionNote {
    pub id: i64,
    pub created_at: i64,
}

fn main() {}
