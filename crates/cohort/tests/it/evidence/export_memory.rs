//! An export streams with flat memory (contract EV2): ten times the row
//! details, the same peak resident memory.
//!
//! Each export runs in a child process (this test binary again, with
//! `--exact`), which reads its own high-water mark (`VmHWM` in
//! `/proc/self/status`) once the export is done and prints it: a process's
//! peak is its own, unaffected by the tests running beside the parent.
//! The output goes to `std::io::sink()`, so only what the export itself
//! holds counts. The assertion is on memory only, never on time.
//!
//! It is one of the slow tests: about 45 s on 2 cores (debug build), of
//! which 12 s write the 220,000 row details through the chain's trigger,
//! about 25 s are the four exports and the rest verifies the chain.

use std::time::Instant;

use crate::support::{TestDb, child, db_with_cohort};
use cohort::evidence::{ExportFormat, ExportRecords, TimeRange, export};
use cohort::schema::SchemaName;
use sqlx::Connection;

/// The row details of the small and the large export.
const SMALL: i64 = 20_000;
const LARGE: i64 = 200_000;

/// How much more the large export's process may peak at than the small
/// one's. Measured (debug test binary, PostgreSQL 15, 2 cores): JSON Lines
/// 16,340 KiB for 20,000 row details and 16,580 KiB for 200,000; CSV 17,272
/// and 17,036 KiB (about 13,000 KiB before either export). An export that
/// buffered its rows (`fetch_all`, tried once) peaked at 28,740 and 142,160
/// KiB: 113 MiB apart. 8 MiB is thirty times the streaming export's
/// difference and a fourteenth of the buffered one's.
const BOUND_KIB: u64 = 8 * 1024;

fn this_test(name: &str) -> String {
    child::test_path(module_path!(), name)
}

/// The child's environment: the database URL, the range's bounds (RFC
/// 3339) and the format (`jsonl` or `csv`), separated by spaces.
const CHILD_VAR: &str = "COHORT_EV2_EXPORT_CHILD";

/// What the child prints on stdout, before its numbers.
const CHILD_LINE: &str = "EV2-CHILD";

/// The child side: when [`CHILD_VAR`] is set, exports the row details of
/// its range to `std::io::sink()` and prints the records written and the
/// peak resident memory before and after the export. Otherwise does nothing
/// (it is run as a child process by the test below).
#[tokio::test]
async fn child_export_process() {
    let Ok(spec) = std::env::var(CHILD_VAR) else {
        return;
    };
    let parts: Vec<&str> = spec.split(' ').collect();
    let [url, from, to, format] = parts[..] else {
        panic!("{CHILD_VAR}: {spec}");
    };
    let range = TimeRange::new(from.parse().expect("from"), to.parse().expect("to"));
    let format = match format {
        "jsonl" => ExportFormat::JsonLines,
        "csv" => ExportFormat::Csv,
        other => panic!("format {other}"),
    };
    let mut conn = sqlx::PgConnection::connect(url).await.expect("connect");
    let before = child::vm_hwm_kib();
    let written = export(
        &mut conn,
        &SchemaName::public(),
        ExportRecords::RowDetails,
        range,
        format,
        &mut std::io::sink(),
    )
    .await
    .expect("export");
    let after = child::vm_hwm_kib();
    println!(
        "{CHILD_LINE} records={} before_kib={before} peak_kib={after}",
        written.records
    );
}

/// What a child reported.
#[derive(Debug, Clone, Copy)]
struct Peak {
    records: u64,
    before_kib: u64,
    peak_kib: u64,
    /// The child's wall time (start-up, connection and export).
    secs: f64,
}

/// Runs the export of `range` as `format` in a child process.
async fn export_in_child(db: &TestDb, range: (&str, &str), format: &str) -> Peak {
    let spec = format!("{} {} {} {format}", db.url(), range.0, range.1);
    let clock = Instant::now();
    let line = child::run_child(
        this_test("child_export_process"),
        CHILD_VAR,
        spec,
        CHILD_LINE,
    )
    .await;
    Peak {
        records: line.field("records"),
        before_kib: line.field("before_kib"),
        peak_kib: line.field("peak_kib"),
        secs: clock.elapsed().as_secs_f64(),
    }
}

/// One settled run started at `started` with `n` row details, written with
/// plain SQL through the chain's triggers (they link each detail and seal
/// the run, so these are valid ledger rows). Returns the seconds it took.
async fn run_with_details(db: &TestDb, run: &str, started: &str, n: i64) -> f64 {
    let clock = Instant::now();
    db.exec(&format!(
        "INSERT INTO sweep_run (run_id, run_kind, trigger, dry_run, tenant_id, logical_now, status, started_at) \
         VALUES ('{run}', 'Sweep', 'Manual', false, '11111111-1111-1111-1111-111111111111', \
                 '{started}', 'Started', '{started}'); \
         INSERT INTO sweep_run_row_detail (run_id, retained_entity_id, entity_type, record_id, tenant_id, action, created_at) \
         SELECT '{run}', 'a3f467fe-c5d0-4f17-9897-83c373cc1dc8', 'SessionNote', gen_random_uuid()::text, \
                '11111111-1111-1111-1111-111111111111', 'Purge', '{started}'::timestamptz + g * interval '1 millisecond' \
         FROM generate_series(1, {n}) g; \
         UPDATE sweep_run SET status = 'Succeeded', settled_at = '{started}'::timestamptz + interval '1 hour' \
          WHERE run_id = '{run}';"
    ))
    .await;
    clock.elapsed().as_secs_f64()
}

// contract: EV2
#[tokio::test]
async fn an_export_of_ten_times_the_row_details_peaks_at_the_same_memory() {
    let (db, _) = db_with_cohort("public").await;
    let small = run_with_details(
        &db,
        "00000000-0000-0000-0000-0000000e0002",
        "2020-01-01T00:00:00Z",
        SMALL,
    )
    .await;
    let large = run_with_details(
        &db,
        "00000000-0000-0000-0000-0000000e0003",
        "2021-01-01T00:00:00Z",
        LARGE,
    )
    .await;
    println!(
        "row details written through the chain's trigger: {SMALL} in {small:.1} s, {LARGE} in {large:.1} s"
    );
    let mut conn = db.pool().acquire().await.expect("conn");
    let report = cohort::evidence::verify(&mut conn, &SchemaName::public())
        .await
        .expect("verify");
    assert!(report.is_intact(), "{report}");
    assert_eq!(report.details, (SMALL + LARGE) as u64);

    let small_range = ("2020-01-01T00:00:00Z", "2021-01-01T00:00:00Z");
    let large_range = ("2021-01-01T00:00:00Z", "2022-01-01T00:00:00Z");
    for format in ["jsonl", "csv"] {
        let s = export_in_child(&db, small_range, format).await;
        let l = export_in_child(&db, large_range, format).await;
        println!(
            "{format}: {SMALL} row details peak at {} KiB ({} before the export, {:.1} s), \
             {LARGE} at {} KiB ({} before, {:.1} s)",
            s.peak_kib, s.before_kib, s.secs, l.peak_kib, l.before_kib, l.secs
        );
        assert_eq!((s.records, l.records), (SMALL as u64, LARGE as u64));
        assert!(
            l.peak_kib <= s.peak_kib + BOUND_KIB,
            "{format}: exporting {LARGE} row details peaked at {} KiB, {SMALL} at {} KiB: \
             more than {BOUND_KIB} KiB apart, so the export does not stream",
            l.peak_kib,
            s.peak_kib
        );
    }
}
