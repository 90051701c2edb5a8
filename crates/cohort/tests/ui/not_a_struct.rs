// Only structs with named fields.
#[derive(cohort::Retained)]
#[cohort(exempt = "not a table")]
pub enum Status {
    Open,
    Closed,
}

#[derive(cohort::Retained)]
#[cohort(exempt = "not a table")]
pub struct Pair(pub i64, pub String);

#[derive(cohort::Retained)]
#[cohort(exempt = "not a table")]
pub struct Marker;

fn main() {}
