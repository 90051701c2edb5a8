//! A subject access export streams with flat memory (contract SA1): ten
//! times the subject's rows, the same peak resident memory.
//!
//! As `evidence::export_memory`: each export runs in a child process (this
//! test binary again, with `--exact`), which reads its own high-water mark
//! (`VmHWM`) once the export is done and prints it; the output goes to
//! `std::io::sink()`. The assertion is on memory only, never on time.

use chrono::Utc;
use cohort::evidence::ExportFormat;
use cohort::{AccessRequest, Capabilities, Cohort, Period, Rule, Scope, Strategy, TenantContext};
use uuid::Uuid;

use crate::support::models::*;
use crate::support::{TestDb, TestRules, child, db_with_cohort};

const SMALL: i64 = 20_000;
const LARGE: i64 = 200_000;

/// How much more the large export's process may peak at than the small
/// one's. A streaming export's peak does not grow with the rows; one that
/// held 200,000 rows of about 200 bytes each (as JSON, twice that) would
/// peak 40 MiB or more above the small one.
const BOUND_KIB: u64 = 8 * 1024;

const CHILD_VAR: &str = "COHORT_SA1_EXPORT_CHILD";
const CHILD_LINE: &str = "SA1-CHILD";

fn tenant() -> Uuid {
    Uuid::from_u128(0x3e3)
}

fn subject(n: u128) -> Uuid {
    Uuid::from_u128(0x5000 + n)
}

fn this_test(name: &str) -> String {
    child::test_path(module_path!(), name)
}

/// The child side: when [`CHILD_VAR`] is set (`<url> <subject> <format>`),
/// exports the subject to `std::io::sink()` and prints the rows and the
/// peak resident memory. Otherwise does nothing.
#[tokio::test]
async fn child_subject_export_process() {
    let Ok(spec) = std::env::var(CHILD_VAR) else {
        return;
    };
    let parts: Vec<&str> = spec.split(' ').collect();
    let [url, who, format] = parts[..] else {
        panic!("{CHILD_VAR}: {spec}");
    };
    let format = match format {
        "jsonl" => ExportFormat::JsonLines,
        "csv" => ExportFormat::Csv,
        other => panic!("format {other}"),
    };
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(2)
        .connect(url)
        .await
        .expect("connect");
    let cohort = Cohort::builder(pool)
        .rules(TestRules::new().with(
            "user-data",
            Capabilities::only(Strategy::Purge),
            Rule::new(Period::days(30), Strategy::Purge),
        ))
        .entity::<UserRecord>()
        .subject_key(b"memory".to_vec())
        .build()
        .await
        .expect("model");
    let before = child::vm_hwm_kib();
    let export = cohort
        .subject_export(
            &Scope::Tenant(TenantContext::new(tenant())),
            Utc::now(),
            AccessRequest::new(who, "memory test").format(format),
            &mut std::io::sink(),
        )
        .await
        .expect("export");
    let after = child::vm_hwm_kib();
    println!(
        "{CHILD_LINE} rows={} before_kib={before} peak_kib={after}",
        export.rows
    );
}

/// What a child reported: rows, peak KiB.
async fn export_in_child(db: &TestDb, who: Uuid, format: &str) -> (u64, u64) {
    let spec = format!("{} {who} {format}", db.url());
    let line = child::run_child(
        this_test("child_subject_export_process"),
        CHILD_VAR,
        spec,
        CHILD_LINE,
    )
    .await;
    (line.field("rows"), line.field("peak_kib"))
}

// contract: SA1
#[tokio::test]
async fn an_export_of_ten_times_the_subjects_rows_peaks_at_the_same_memory() {
    let (db, _) = db_with_cohort("public").await;
    db.exec(TABLES).await;
    let t = tenant();
    for (who, first, n) in [(subject(1), 1, SMALL), (subject(2), SMALL + 1, LARGE)] {
        db.exec(&format!(
            "INSERT INTO user_records (id, tenant_id, created_at, user_id, notes) \
             SELECT g, '{t}', now() - g * interval '1 minute', '{who}', \
                    repeat('personal data ', 10) || g \
             FROM generate_series({first}, {last}) g",
            last = first + n - 1
        ))
        .await;
    }
    db.exec("ANALYZE user_records").await;
    for format in ["jsonl", "csv"] {
        let (small_rows, small) = export_in_child(&db, subject(1), format).await;
        let (large_rows, large) = export_in_child(&db, subject(2), format).await;
        assert_eq!(small_rows, SMALL as u64);
        assert_eq!(large_rows, LARGE as u64);
        println!("{format}: {SMALL} rows peak {small} KiB, {LARGE} rows peak {large} KiB");
        assert!(
            large <= small + BOUND_KIB,
            "{format}: the 200,000-row export peaked at {large} KiB, the 20,000-row one at {small} KiB"
        );
    }
}
