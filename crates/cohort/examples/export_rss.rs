//! Peak memory of an export (contract EV2): the export streams, so the
//! process's high-water mark (`VmHWM`) does not grow with the rows.
//!
//! ```sh
//! cargo run --release -p cohort --example export_rss -- 100000
//! cargo run --release -p cohort --example export_rss -- 1000000
//! ```
//!
//! Builds a fresh database (see `cohort-testdb`) with one settled run holding
//! N row details (inserted by the server, through the chain's trigger), then
//! exports them as JSON Lines and as CSV to `/dev/null` and prints the bytes
//! written, the seconds, and `VmHWM` before and after.

use std::time::Instant;

use cohort::evidence::{ExportFormat, ExportRecords, TimeRange, export};
use cohort::schema::SchemaName;
use cohort_testdb::TestDb;
use sqlx::AssertSqlSafe;

fn vm_hwm_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}

/// Counts bytes and throws them away.
struct Counter(u64);

impl std::io::Write for Counter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0 += buf.len() as u64;
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let rows: i64 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(100_000);
    let db = TestDb::new().await;
    let schema = SchemaName::public();
    sqlx::raw_sql(AssertSqlSafe(cohort::schema::ddl(&schema)))
        .execute(db.pool())
        .await?;
    let started = Instant::now();
    sqlx::raw_sql(AssertSqlSafe(format!(
        "INSERT INTO sweep_run (run_id, run_kind, trigger, dry_run, tenant_id, logical_now, status, started_at) \
         VALUES ('00000000-0000-0000-0000-000000000001', 'Sweep', 'Manual', false, \
                 '00000000-0000-0000-0000-000000000000', now(), 'Started', now()); \
         INSERT INTO sweep_run_row_detail (run_id, retained_entity_id, entity_type, record_id, tenant_id, action, created_at) \
         SELECT '00000000-0000-0000-0000-000000000001', 'a3f467fe-c5d0-4f17-9897-83c373cc1dc8', 'SessionNote', \
                gen_random_uuid()::text, '00000000-0000-0000-0000-000000000000', 'Purge', now() \
         FROM generate_series(1, {rows}); \
         UPDATE sweep_run SET status = 'Succeeded', settled_at = now();"
    )))
    .execute(db.pool())
    .await?;
    println!(
        "{rows} row details written (chained) in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    let before = vm_hwm_kib();
    let mut conn = db.pool().acquire().await?;
    for format in [ExportFormat::JsonLines, ExportFormat::Csv] {
        let mut out = Counter(0);
        let started = Instant::now();
        let written = export(
            &mut conn,
            &schema,
            ExportRecords::RowDetails,
            TimeRange::all(),
            format,
            &mut out,
        )
        .await?;
        println!(
            "{format:?}: {} records, {} bytes, {:.1} s, VmHWM {} KiB (before the exports: {} KiB)",
            written.records,
            out.0,
            started.elapsed().as_secs_f64(),
            vm_hwm_kib(),
            before
        );
    }
    Ok(())
}
