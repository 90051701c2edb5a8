//! The auditor's report (contract EV3), rendered in headless Chromium
//! (Debian's `chromium`): the page loads with no console error, the charts
//! are drawn, and it needs no network.
//!
//! Chromium is required: when it is missing this test fails (CI installs
//! it). Set `COHORT_REPORT_SCREENSHOT=<path.png>` to keep a screenshot.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::support::fixtures::{db_with_tables, tenant_a};
use crate::support::models::*;
use crate::support::{Answer, TestDb, TestRules};
use chrono::Utc;
use cohort::evidence::{ReportOptions, TimeRange, audit_report};
use cohort::holds::HoldRequest;
use cohort::schema::SchemaName;
use cohort::{Capabilities, Cohort, Period, Rule, Scope, Strategy, TenantContext};
use uuid::Uuid;

fn chromium() -> PathBuf {
    for candidate in ["/usr/bin/chromium", "/usr/bin/chromium-browser"] {
        if Path::new(candidate).exists() {
            return PathBuf::from(candidate);
        }
    }
    panic!(
        "Chromium is required for the report test: install Debian's `chromium` package \
         (apt-get install -y chromium)"
    );
}

/// Runs headless Chromium on `page` with `mode` (`--dump-dom`,
/// `--screenshot=...`); returns (stdout, stderr).
fn run_chromium(page: &Path, mode: &[String]) -> (String, String) {
    let profile = std::env::temp_dir().join(format!("cohort-chromium-{}", Uuid::new_v4().simple()));
    let output = Command::new(chromium())
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-dev-shm-usage",
            // Any name lookup fails: a page that needed the network would show it.
            "--host-resolver-rules=MAP * ~NOTFOUND",
            "--enable-logging=stderr",
            "--v=0",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(mode)
        .arg(format!("file://{}", page.display()))
        .output()
        .expect("chromium runs");
    let _ = std::fs::remove_dir_all(&profile);
    assert!(
        output.status.success(),
        "chromium failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    (
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// Console messages and failed loads Chromium logged for the page.
fn console_errors(stderr: &str) -> Vec<String> {
    stderr
        .lines()
        .filter(|l| {
            l.contains(":CONSOLE")
                || l.contains("Uncaught")
                || l.contains("net::ERR_")
                || l.contains("Refused to")
        })
        .map(str::to_owned)
        .collect()
}

async fn ledger() -> TestDb {
    let db = db_with_tables().await;
    db.exec(&format!(
        "INSERT INTO tickets (id, tenant_id, opened_at) \
         SELECT g, '{t}', now() - interval '100 days' + g * interval '1 second' FROM generate_series(1, 40) g; \
         INSERT INTO session_notes (id, tenant_id, created_at, body) \
         SELECT gen_random_uuid(), '{t}', now() - interval '100 days', 'n' FROM generate_series(1, 25)",
        t = tenant_a()
    ))
    .await;
    // Earlier months, written as the engine writes them (start, then settle).
    for (months, purged, soft, held) in [(3, 120, 40, 2), (2, 80, 65, 3), (1, 150, 20, 1)] {
        let run = Uuid::new_v4();
        db.exec(&format!(
            "INSERT INTO sweep_run (run_id, run_kind, trigger, dry_run, tenant_id, logical_now, status, started_at) \
             VALUES ('{run}', 'Sweep', 'Scheduled', false, '{t}', now(), 'Started', now() - interval '{months} months'); \
             INSERT INTO sweep_run_entity_summary (run_id, retained_entity_id, entity_type, category, tenant_id, strategy, \
                 status, affected_count, held_count, skipped_count, null_anchor_count, updated_at) \
             VALUES ('{run}', '{notes}', 'SessionNote', 'session-notes', '{t}', 'Purge', 'Succeeded', {purged}, {held}, 0, 0, now()), \
                    ('{run}', '5d1c1b8e-2f7a-4b7e-9d8a-0c2a44f0e001', 'Ticket', 'tickets', '{t}', 'SoftDelete', 'Succeeded', {soft}, 0, 0, 0, now()); \
             UPDATE sweep_run SET status = 'Succeeded', settled_at = started_at + interval '1 minute' WHERE run_id = '{run}';",
            t = tenant_a(),
            notes = NOTE_ID,
        ))
        .await;
    }
    let rules = TestRules::new()
        .with(
            "tickets",
            Capabilities::only(Strategy::SoftDelete),
            Rule::new(Period::days(30), Strategy::SoftDelete),
        )
        .with(
            "session-notes",
            Capabilities::only(Strategy::Purge),
            Rule::new(Period::days(30), Strategy::Purge).with_per_row_audit(),
        );
    let cohort = Cohort::builder(db.pool().clone())
        .rules(rules.clone())
        .entity::<Ticket>()
        .entity::<SessionNote>()
        .build()
        .await
        .expect("model");
    let mut conn = db.pool().acquire().await.expect("conn");
    cohort
        .holds()
        .create(
            &mut conn,
            HoldRequest::new(
                uuid("5d1c1b8e-2f7a-4b7e-9d8a-0c2a44f0e001"),
                "7",
                Some(tenant_a()),
                "Litigation <b>hold</b> - case #12345",
                Utc::now() - chrono::Duration::days(12),
            ),
        )
        .await
        .expect("hold");
    let scope = Scope::Tenant(TenantContext::new(tenant_a()));
    cohort.sweep(&scope, Utc::now()).await.expect("sweep");
    // A run that fails in part: the policy service is down for one category.
    sqlx::query(
        "INSERT INTO tickets (id, tenant_id, opened_at) \
         SELECT 1000 + g, $1, now() - interval '100 days' FROM generate_series(1, 5) g",
    )
    .bind(tenant_a())
    .execute(db.pool())
    .await
    .expect("rows");
    rules.set("session-notes", Answer::Error);
    cohort.sweep(&scope, Utc::now()).await.expect("sweep");
    db
}

// contract: EV3
#[tokio::test]
async fn the_report_renders_in_chromium_with_its_charts_and_no_console_error() {
    let db = ledger().await;
    let mut conn = db.pool().acquire().await.expect("conn");
    let report = audit_report(
        &mut conn,
        &SchemaName::public(),
        &ReportOptions::new(TimeRange::all()),
    )
    .await
    .expect("report");
    assert!(report.verification.is_intact(), "{}", report.verification);
    assert_eq!(report.failed_runs.len(), 1);
    assert_eq!(report.failed_runs[0].status, "PartiallyFailed");
    let error = report.failed_runs[0].error.clone().expect("error");
    assert!(error.contains("RuleProvider"), "{error}");
    assert!(!error.contains("secret-token"), "{error}");
    assert_eq!(report.active_holds.len(), 1);
    assert_eq!(report.active_holds[0].age_days, 12);
    // Four months of activity, per category.
    let months: std::collections::BTreeSet<&str> =
        report.rows.iter().map(|r| r.month.as_str()).collect();
    assert_eq!(months.len(), 4, "{:?}", report.rows);
    let this_month = report
        .rows
        .iter()
        .filter(|r| r.month == *months.last().expect("month"));
    let soft: i64 = this_month.clone().map(|r| r.soft_deleted).sum();
    let purged: i64 = this_month.clone().map(|r| r.purged).sum();
    let held: i64 = this_month.map(|r| r.held).sum();
    // This month's two runs each met the one held note: it is held once.
    let met: i64 = crate::support::count(
        &db,
        "SELECT coalesce(sum(s.held_count), 0)::bigint FROM sweep_run_entity_summary s \
         JOIN sweep_run r USING (run_id) WHERE r.started_at >= date_trunc('month', now())",
    )
    .await;
    assert_eq!(met, 2, "the ledger counts the held note in both runs");
    assert_eq!((soft, purged, held), (39 + 5, 25, 1));
    assert_eq!(held as usize, report.active_holds.len());

    let html = report.to_html().expect("html");
    // Self-contained: no reference outside the file, no script.
    // (The SVG namespace is a name, never fetched.)
    let without_namespace = html.replace("xmlns=\"http://www.w3.org/2000/svg\"", "");
    for outside in ["http://", "https://", "<script", "<link", "src=", "url("] {
        assert!(
            !without_namespace.contains(outside),
            "the report references {outside}"
        );
    }
    // Text from the ledger is escaped.
    assert!(
        html.contains("Litigation &#60;b&#62;hold&#60;/b&#62;")
            || html.contains("Litigation &lt;b&gt;hold")
    );
    let dir = std::env::temp_dir().join(format!("cohort-report-{}", Uuid::new_v4().simple()));
    std::fs::create_dir_all(&dir).expect("dir");
    let page = dir.join("report.html");
    std::fs::write(&page, &html).expect("write");

    let (dom, stderr) = run_chromium(&page, &["--dump-dom".to_owned()]);
    assert!(dom.contains("Data retention: auditor's report"), "{dom}");
    assert!(dom.contains("id=\"verdict\""), "{dom}");
    assert!(dom.contains("Intact"), "{dom}");
    for chart in ["chart-months", "chart-categories"] {
        let at = dom.find(&format!("id=\"{chart}\"")).expect("chart div");
        let rest = &dom[at..];
        let end = rest.find("</svg>").expect("an svg element in the chart");
        let svg = &rest[..end];
        assert!(svg.contains("<svg"), "{chart}: {svg}");
        assert!(
            svg.matches("<rect").count() >= 8,
            "{chart} draws bars: {svg}"
        );
        assert!(svg.contains("<text"), "{chart} has labels");
    }
    assert_eq!(console_errors(&stderr), Vec::<String>::new(), "{stderr}");

    if let Ok(path) = std::env::var("COHORT_REPORT_SCREENSHOT") {
        run_chromium(
            &page,
            &[
                format!("--screenshot={path}"),
                "--window-size=1200,1900".to_owned(),
                "--hide-scrollbars".to_owned(),
            ],
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

// contract: EV3
// Every install's first report: all runs in one month, one category. The
// charts' one group gets bars of positive size (a one-group axis had no
// width, and the bars negative ones).
#[tokio::test]
async fn a_report_of_one_month_and_one_category_draws_its_bars() {
    let db = db_with_tables().await;
    db.exec(&format!(
        "INSERT INTO session_notes (id, tenant_id, created_at, body) \
         SELECT gen_random_uuid(), '{t}', now() - interval '100 days', 'n' FROM generate_series(1, 7)",
        t = tenant_a()
    ))
    .await;
    let cohort = Cohort::builder(db.pool().clone())
        .rules(TestRules::new().with(
            "session-notes",
            Capabilities::only(Strategy::Purge),
            Rule::new(Period::days(30), Strategy::Purge),
        ))
        .entity::<SessionNote>()
        .build()
        .await
        .expect("model");
    let scope = Scope::Tenant(TenantContext::new(tenant_a()));
    cohort.sweep(&scope, Utc::now()).await.expect("sweep");
    let mut conn = db.pool().acquire().await.expect("conn");
    let report = audit_report(
        &mut conn,
        &SchemaName::public(),
        &ReportOptions::new(TimeRange::all()),
    )
    .await
    .expect("report");
    assert_eq!(report.rows.len(), 1, "{:?}", report.rows);
    assert_eq!(report.rows[0].purged, 7);
    let html = report.to_html().expect("html");
    let dir = std::env::temp_dir().join(format!("cohort-report-{}", Uuid::new_v4().simple()));
    std::fs::create_dir_all(&dir).expect("dir");
    let page = dir.join("report.html");
    std::fs::write(&page, &html).expect("write");
    let (dom, stderr) = run_chromium(&page, &["--dump-dom".to_owned()]);
    for chart in ["chart-months", "chart-categories"] {
        let at = dom.find(&format!("id=\"{chart}\"")).expect("chart div");
        let rest = &dom[at..];
        let svg = &rest[..rest.find("</svg>").expect("an svg element")];
        for attribute in ["width=\"-", "height=\"-", "x=\"-"] {
            assert!(
                !svg.contains(attribute),
                "{chart} has a negative size: {svg}"
            );
        }
        // The purge bar: a filled rectangle taller than a legend swatch.
        let bars = svg
            .split("<rect")
            .skip(1)
            .filter(|r| {
                let height = r
                    .split("height=\"")
                    .nth(1)
                    .and_then(|h| h.split('"').next())
                    .and_then(|h| h.parse::<f64>().ok())
                    .unwrap_or(0.0);
                height > 20.0 && !r.contains("fill=\"#FFFFFF\"") && !r.contains("fill=\"white\"")
            })
            .count();
        assert!(bars >= 1, "{chart} draws the month's bar: {svg}");
    }
    assert_eq!(console_errors(&stderr), Vec::<String>::new(), "{stderr}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// The console check is not vacuous: a page that logs an error, or fails a
/// load, is caught.
#[test]
fn the_console_check_catches_errors() {
    let dir = std::env::temp_dir().join(format!("cohort-console-{}", Uuid::new_v4().simple()));
    std::fs::create_dir_all(&dir).expect("dir");
    let page = dir.join("broken.html");
    std::fs::write(
        &page,
        "<!DOCTYPE html><html><body><script>console.error('broken page');</script>\
         <img src=\"https://example.invalid/x.png\"></body></html>",
    )
    .expect("write");
    let (_, stderr) = run_chromium(&page, &["--dump-dom".to_owned()]);
    let errors = console_errors(&stderr);
    assert!(errors.iter().any(|l| l.contains("broken page")), "{stderr}");
    let _ = std::fs::remove_dir_all(&dir);
}
