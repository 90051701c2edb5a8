//! The auditor's report (contract EV3), looked at the way a person looks at
//! it: rendered in headless Chromium (Debian's `chromium`), its DOM read
//! back and checked against the ledger (every section there, every count
//! equal to the ledger's, names where the ledger has them, no negative
//! size in any chart), printed to PDF, and its chain check run as printed.
//!
//! Chromium is required: when it is missing this test fails (CI installs
//! it). Set `COHORT_REPORT_SCREENSHOT=<path.png>` to keep a screenshot and
//! `COHORT_REPORT_PDF=<path.pdf>` to keep the printed PDF.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::support::fixtures::{db_with_tables, tenant_a};
use crate::support::models::*;
use crate::support::{Answer, TestDb, TestRules};
use chrono::Utc;
use cohort::evidence::{
    AuditReport, EvidenceError, ReportOptions, TimeRange, audit_report, sign_report, verify,
    verify_report_signature,
};
use cohort::holds::{HoldRequest, MatterRequest};
use cohort::model::EntityDescriptor;
use cohort::schema::SchemaName;
use cohort::{
    Capabilities, Cohort, ErasureRequest, Period, Rule, Scope, Strategy, SweepOptions,
    TenantContext,
};
use sqlx::Row;
use uuid::Uuid;

const TICKET_ID: &str = "5d1c1b8e-2f7a-4b7e-9d8a-0c2a44f0e001";
const USER_RECORD_ID: &str = "6b619c19-6e3c-44e8-a87f-975c68fd3988";
const SYSTEM_LOG_ID: &str = "9e7a3c52-6a1d-4f0c-8b1e-7d2f3a4b5c6d";
const SUBJECT: &str = "aaaaaaaa-0000-4000-8000-000000000534";

/// Every section of the report, by id, in order.
const SECTIONS: &[&str] = &[
    "scope",
    "contents",
    "summary",
    "verification",
    "coverage",
    "rules",
    "runs-by-kind",
    "activity",
    "runs",
    "erasures",
    "failures",
    "holds",
    "ended-holds",
    "matters",
    "ended-matters",
    "dispositions",
    "head-check",
    "signature",
];

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
/// `--screenshot=...`, `--print-to-pdf=...`); returns (stdout, stderr).
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

/// A report written to a fresh directory, and its DOM as Chromium built it.
pub(crate) struct Rendered {
    dir: PathBuf,
    page: PathBuf,
    pub(crate) html: String,
    pub(crate) dom: String,
}

impl Drop for Rendered {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

pub(crate) fn render(report: &AuditReport) -> Rendered {
    let html = report.to_html().expect("html");
    let dir = std::env::temp_dir().join(format!("cohort-report-{}", Uuid::new_v4().simple()));
    std::fs::create_dir_all(&dir).expect("dir");
    let page = dir.join("report.html");
    std::fs::write(&page, &html).expect("write");
    let (dom, stderr) = run_chromium(&page, &["--dump-dom".to_owned()]);
    assert_eq!(console_errors(&stderr), Vec::<String>::new(), "{stderr}");
    Rendered {
        dir,
        page,
        html,
        dom,
    }
}

/// The element with `id` whose tag is `tag`, up to its closing tag (the
/// report nests no element of the same tag inside these).
fn element<'a>(dom: &'a str, tag: &str, id: &str) -> &'a str {
    let open = format!("<{tag} id=\"{id}\"");
    let at = dom
        .find(&open)
        .or_else(|| {
            // Attributes before the id (`class=...`).
            let marker = format!("id=\"{id}\"");
            let i = dom.find(&marker)?;
            dom[..i].rfind(&format!("<{tag}"))
        })
        .unwrap_or_else(|| panic!("no <{tag} id=\"{id}\"> in the report"));
    let rest = &dom[at..];
    let close = format!("</{tag}>");
    let end = rest.find(&close).expect("closing tag") + close.len();
    &rest[..end]
}

/// Text with tags removed and the entities Chromium writes decoded.
fn text(html: &str) -> String {
    let mut out = String::new();
    let mut in_tag = false;
    for c in html.chars() {
        match c {
            '<' => in_tag = true,
            '>' => in_tag = false,
            c if !in_tag => out.push(c),
            _ => {}
        }
    }
    out.replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&#39;", "'")
        .replace("&nbsp;", " ")
        .replace("&amp;", "&")
}

/// The body rows of table `id`, each as its cells' text.
pub(crate) fn rows(dom: &str, id: &str) -> Vec<Vec<String>> {
    let table = element(dom, "table", id);
    let body = table
        .split("<tbody>")
        .nth(1)
        .unwrap_or_else(|| panic!("table {id} has a tbody"));
    body.split("<tr>")
        .skip(1)
        .map(|row| {
            row.split("<td")
                .skip(1)
                .map(|cell| {
                    let inner = &cell[cell.find('>').map_or(0, |i| i + 1)..];
                    text(inner.split("</td>").next().unwrap_or(""))
                        .trim()
                        .to_owned()
                })
                .collect()
        })
        .collect()
}

/// `1,234` as a number.
fn number(cell: &str) -> i64 {
    cell.replace(',', "")
        .parse()
        .unwrap_or_else(|_| panic!("{cell:?} is a number"))
}

/// Every `<rect>` of `svg` as (x, y, width, height, fill).
fn rects(svg: &str) -> Vec<(f64, f64, f64, f64, String)> {
    svg.split("<rect")
        .skip(1)
        .map(|r| {
            let head = r.split('>').next().unwrap_or("");
            let attr = |name: &str| {
                head.split(&format!(" {name}=\""))
                    .nth(1)
                    .and_then(|v| v.split('"').next())
                    .unwrap_or("")
                    .to_owned()
            };
            let num = |name: &str| attr(name).parse::<f64>().unwrap_or(f64::NAN);
            (
                num("x"),
                num("y"),
                num("width"),
                num("height"),
                attr("fill"),
            )
        })
        .collect()
}

/// Every chart on the page draws sizes that are numbers and not negative.
fn assert_no_negative_sizes(dom: &str) {
    let mut charts = 0;
    for svg in dom.split("<svg").skip(1) {
        charts += 1;
        let svg = svg.split("</svg>").next().unwrap_or("");
        for r in rects(svg) {
            assert!(
                r.0 >= 0.0 && r.1 >= 0.0 && r.2 >= 0.0 && r.3 >= 0.0,
                "a rectangle with a negative or missing size: {r:?}"
            );
        }
    }
    assert!(charts >= 2, "the page draws its charts ({charts})");
}

const PURGE: &str = "#B42318";

async fn count(db: &TestDb, sql: &str) -> i64 {
    crate::support::count(db, sql).await
}

/// A ledger with something in every section: four months of sweeps (three
/// written as the engine writes them, scheduled), a manual sweep, a dry
/// run, an erasure that keeps rows for a hold, the legal minimum and a NULL
/// anchor, a partially failed sweep, a cancelled run, a run in progress,
/// holds active (with and without expiry), removed and expired, a matter
/// active and one released, a registered type never swept (tenantless) and
/// an exempt table.
async fn ledger() -> (TestDb, Cohort) {
    let db = db_with_tables().await;
    let t = tenant_a();
    db.exec(&format!(
        "CREATE TABLE audit_trail (id bigint PRIMARY KEY, at timestamptz NOT NULL, line text NOT NULL); \
         INSERT INTO tickets (id, tenant_id, opened_at) \
         SELECT g, '{t}', now() - interval '100 days' + g * interval '1 second' FROM generate_series(1, 40) g; \
         INSERT INTO session_notes (id, tenant_id, created_at, body) \
         SELECT gen_random_uuid(), '{t}', now() - interval '100 days', 'n' FROM generate_series(1, 25); \
         INSERT INTO user_records (id, tenant_id, created_at, user_id) VALUES \
           (1, '{t}', now() - interval '3 years', '{SUBJECT}'), \
           (2, '{t}', now() - interval '3 years', '{SUBJECT}'), \
           (3, '{t}', now() - interval '10 days', '{SUBJECT}'), \
           (4, '{t}', NULL, '{SUBJECT}'), \
           (5, '{t}', now() - interval '3 years', gen_random_uuid());"
    ))
    .await;
    // Earlier months, written as the engine writes them (start, then settle).
    for (months, purged, soft, held) in [(3, 120, 40, 2), (2, 1_234_567, 65, 3), (1, 150, 20, 1)] {
        let run = Uuid::new_v4();
        db.exec(&format!(
            "INSERT INTO sweep_run (run_id, run_kind, trigger, dry_run, tenant_id, logical_now, status, started_at) \
             VALUES ('{run}', 'Sweep', 'Scheduled', false, '{t}', now(), 'Started', now() - interval '{months} months'); \
             INSERT INTO sweep_run_entity_summary (run_id, retained_entity_id, entity_type, category, tenant_id, strategy, \
                 status, affected_count, held_count, skipped_count, null_anchor_count, applied_period, rule_source, rule_reason, updated_at) \
             VALUES ('{run}', '{NOTE_ID}', 'SessionNote', 'session-notes', '{t}', 'Purge', 'Succeeded', {purged}, {held}, 0, 0, \
                     'P30D', 'retention-policy-2025', 'storage limitation', now()), \
                    ('{run}', '{TICKET_ID}', 'Ticket', 'tickets', '{t}', 'SoftDelete', 'Succeeded', {soft}, 0, 0, 0, \
                     'P30D', 'retention-policy-2025', 'storage limitation', now()); \
             UPDATE sweep_run SET status = 'Succeeded', settled_at = started_at + interval '1 minute' WHERE run_id = '{run}';"
        ))
        .await;
    }
    let rules = TestRules::new()
        .with(
            "tickets",
            Capabilities::only(Strategy::SoftDelete),
            Rule::new(Period::days(30), Strategy::SoftDelete)
                .with_provenance("retention-policy-2026", "GDPR art. 5(1)(e)"),
        )
        .with(
            "session-notes",
            Capabilities::only(Strategy::Purge),
            Rule::new(Period::days(30), Strategy::Purge).with_per_row_audit(),
        )
        .with(
            "user-data",
            Capabilities::only(Strategy::Purge),
            Rule::new(Period::days(30), Strategy::Purge)
                .with_legal_minimum(Period::days(365))
                .with_provenance("retention-policy-2026", "tax law: one year"),
        )
        .with(
            "audit-log",
            Capabilities::only(Strategy::Purge),
            Rule::new(Period::days(30), Strategy::Purge),
        );
    let exempt = EntityDescriptor::exempt_builder("AuditTrail", "kept ten years by law (HGB 257)")
        .table("audit_trail")
        .build()
        .expect("exempt descriptor");
    let cohort = Cohort::builder(db.pool().clone())
        .rules(rules.clone())
        .entity::<Ticket>()
        .entity::<SessionNote>()
        .entity::<UserRecord>()
        .entity::<SystemLog>()
        .entity_descriptor(exempt)
        .subject_key(b"the host's subject key".to_vec())
        .build()
        .await
        .expect("model");
    let mut conn = db.pool().acquire().await.expect("conn");
    cohort
        .holds()
        .create(
            &mut conn,
            HoldRequest::new(
                uuid(TICKET_ID),
                "7",
                Some(t),
                "Litigation <b>hold</b> - case #12345",
                Utc::now() - chrono::Duration::days(12),
            ),
        )
        .await
        .expect("hold");
    cohort
        .holds()
        .create(
            &mut conn,
            HoldRequest::new(
                uuid(TICKET_ID),
                "10",
                Some(t),
                "Tax audit 2026",
                Utc::now() - chrono::Duration::days(3),
            )
            .expires_at(Utc::now() + chrono::Duration::days(30)),
        )
        .await
        .expect("hold with an expiry");
    cohort
        .holds()
        .create(
            &mut conn,
            HoldRequest::new(
                uuid(USER_RECORD_ID),
                "2",
                Some(t),
                "Fraud investigation",
                Utc::now() - chrono::Duration::days(1),
            ),
        )
        .await
        .expect("hold on the subject's row");
    // A hold removed two days ago, and one that expired five days ago.
    db.exec(&format!(
        "INSERT INTO retention_holds (hold_id, retained_entity_id, record_id, tenant_id, reason, created_at) \
         VALUES ('0e000000-0000-4000-8000-000000000008', '{TICKET_ID}', '8', '{t}', 'Dispute settled', now() - interval '30 days'); \
         UPDATE retention_holds SET removed_at = now() - interval '2 days' WHERE hold_id = '0e000000-0000-4000-8000-000000000008'; \
         INSERT INTO retention_holds (hold_id, retained_entity_id, record_id, tenant_id, reason, created_at, expires_at) \
         VALUES ('0e000000-0000-4000-8000-000000000009', '{TICKET_ID}', '9', '{t}', 'Audit 2025 closed', \
                 now() - interval '20 days', now() - interval '5 days');"
    ))
    .await;
    let scope = Scope::Tenant(TenantContext::new(t));
    cohort
        .sweep_with(&scope, Utc::now(), SweepOptions::default().dry_run())
        .await
        .expect("dry run");
    // The erasure first: the sweep would purge the subject's old rows.
    cohort
        .erase(&scope, Utc::now(), ErasureRequest::new(uuid(SUBJECT)))
        .await
        .expect("erasure");
    cohort.sweep(&scope, Utc::now()).await.expect("sweep");
    // A run that fails in part: the policy service is down for one category.
    sqlx::query(
        "INSERT INTO tickets (id, tenant_id, opened_at) \
         SELECT 1000 + g, $1, now() - interval '100 days' FROM generate_series(1, 5) g",
    )
    .bind(t)
    .execute(db.pool())
    .await
    .expect("rows");
    rules.set("session-notes", Answer::Error);
    cohort.sweep(&scope, Utc::now()).await.expect("sweep");
    // A cancelled run (its one committed batch counts as activity) and a
    // run still in progress.
    db.exec(&format!(
        "INSERT INTO sweep_run (run_id, run_kind, trigger, dry_run, tenant_id, logical_now, status, started_at) \
         VALUES ('cccccccc-0000-4000-8000-00000000000c', 'Sweep', 'Manual', false, '{t}', now(), 'Started', now()); \
         INSERT INTO sweep_run_entity_summary (run_id, retained_entity_id, entity_type, category, tenant_id, strategy, \
             status, affected_count, held_count, skipped_count, null_anchor_count, applied_period, updated_at) \
         VALUES ('cccccccc-0000-4000-8000-00000000000c', '{TICKET_ID}', 'Ticket', 'tickets', '{t}', 'SoftDelete', \
                 'Cancelled', 3, 0, 0, 0, 'P30D', now()); \
         UPDATE sweep_run SET status = 'Cancelled', settled_at = now() WHERE run_id = 'cccccccc-0000-4000-8000-00000000000c'; \
         INSERT INTO sweep_run (run_id, run_kind, trigger, dry_run, tenant_id, logical_now, status, started_at) \
         VALUES ('dddddddd-0000-4000-8000-00000000000d', 'Sweep', 'Scheduled', false, '{t}', now(), 'Started', now());"
    ))
    .await;
    // Matters: one active, one released.
    cohort
        .matters()
        .create(
            &mut conn,
            MatterRequest::of::<SessionNote>(
                Some(t),
                "Regulator inquiry 2026-04",
                "legal@example.com",
            ),
        )
        .await
        .expect("matter");
    let released = cohort
        .matters()
        .create(
            &mut conn,
            MatterRequest::of::<Ticket>(Some(t), "Customer complaint", "support-lead@example.com"),
        )
        .await
        .expect("matter");
    cohort
        .matters()
        .release(&mut conn, released.matter_id)
        .await
        .expect("release");
    (db, cohort)
}

// contract: EV3
#[tokio::test]
async fn every_section_of_the_report_shows_the_ledger_by_name_in_chromium() {
    let (db, cohort) = ledger().await;
    let report = cohort
        .audit_report(&ReportOptions::new(TimeRange::all()))
        .await
        .expect("report");
    assert!(report.verification.is_intact(), "{}", report.verification);

    // The figures, against the ledger's own counts.
    assert_eq!(
        report.runs_in_range,
        count(&db, "SELECT count(*) FROM sweep_run").await
    );
    // Every run is listed: settled, cancelled and in progress.
    let listed = count(&db, "SELECT count(*) FROM sweep_run").await;
    assert_eq!(
        listed, 9,
        "3 written + dry run + sweep + erasure + partly failed sweep + cancelled + in progress"
    );
    assert_eq!(report.runs.total, listed as u64);
    assert_eq!(report.runs.items.len(), listed as usize);
    assert!(report.runs.items.iter().any(|r| r.status == "Cancelled"));
    assert!(report.runs.items.iter().any(|r| r.status == "Started"));
    for (kind, trigger, runs, dry, cancelled, in_progress) in [
        ("Sweep", "Scheduled", 4, 0, 0, 1),
        ("Sweep", "Manual", 4, 1, 1, 0),
        ("Erasure", "Manual", 1, 0, 0, 0),
    ] {
        let c = report
            .run_counts
            .iter()
            .find(|c| c.kind == kind && c.trigger == trigger)
            .unwrap_or_else(|| panic!("{kind} {trigger} in {:?}", report.run_counts));
        assert_eq!(
            (c.runs, c.dry_runs, c.cancelled, c.in_progress),
            (runs, dry, cancelled, in_progress),
            "{c:?}"
        );
    }
    let e = &report.erasure_totals;
    assert_eq!(
        (e.requests, e.erased, e.held, e.legal_minimum, e.null_anchor),
        (1, 1, 1, 1, 1),
        "{e:?}"
    );
    assert_eq!(report.failed_runs.items.len(), 1);
    let failure = &report.failed_runs.items[0].failures[0];
    assert_eq!(failure.entity.as_deref(), Some("SessionNote"));
    assert_eq!(failure.kind, "RuleProvider");
    assert_eq!(report.active_holds.total, 3);
    assert!(
        report
            .active_holds
            .items
            .iter()
            .all(|h| h.entity != TICKET_ID)
    );
    assert_eq!(report.ended_holds.total, 2);
    let ended: Vec<&str> = report
        .ended_holds
        .items
        .iter()
        .map(|h| h.ended_by.as_str())
        .collect();
    assert_eq!(ended, ["expired", "removed"]);
    assert_eq!(report.active_matters.total, 1);
    assert_eq!(report.ended_matters.total, 1);
    let log = report
        .coverage
        .iter()
        .find(|c| c.name == "SystemLog")
        .expect("the registered tenantless type");
    assert_eq!(log.state(), "no run in range");
    let tickets_rule = report
        .rules
        .items
        .iter()
        .find(|r| {
            r.category == "tickets" && r.rule_source.as_deref() == Some("retention-policy-2026")
        })
        .expect("the tickets rule");
    assert_eq!(tickets_rule.sweep_periods.as_deref(), Some("P30D"));
    let user_data = report
        .rules
        .items
        .iter()
        .find(|r| r.category == "user-data" && r.erasures > 0)
        .expect("the user-data rule an erasure applied");
    assert_eq!(user_data.erasure_minimums.as_deref(), Some("P365D"));
    // Activity equals the ledger's sums of real runs.
    let changed = report.rows_changed();
    for (i, strategy) in ["Purge", "SoftDelete", "Anonymise"].iter().enumerate() {
        let ledger = count(
            &db,
            &format!(
                "SELECT coalesce(sum(s.affected_count), 0)::bigint FROM sweep_run_entity_summary s \
                 JOIN sweep_run r USING (run_id) WHERE NOT r.dry_run AND s.strategy = '{strategy}'"
            ),
        )
        .await;
        assert_eq!(changed[i], ledger, "{strategy}");
    }

    let page = render(&report);
    let dom = &page.dom;
    // Self-contained: no reference outside the file, no script.
    // (The SVG namespace is a name, never fetched.)
    let without_namespace = page
        .html
        .replace("xmlns=\"http://www.w3.org/2000/svg\"", "");
    for outside in ["http://", "https://", "<script", "<link", "src=", "url("] {
        assert!(
            !without_namespace.contains(outside),
            "the report references {outside}"
        );
    }
    // Every section, in order.
    let mut at = 0;
    for id in SECTIONS {
        let here = dom
            .find(&format!("id=\"{id}\""))
            .unwrap_or_else(|| panic!("section {id} is missing"));
        assert!(here > at, "section {id} is out of order");
        at = here;
    }
    assert_no_negative_sizes(dom);
    // Names, never the retained-entity ids the ledger also has.
    for id in [TICKET_ID, NOTE_ID, USER_RECORD_ID, SYSTEM_LOG_ID] {
        assert!(
            !dom.contains(id),
            "the report shows the id {id}, not its name"
        );
    }
    // Text from the ledger is escaped.
    assert!(
        page.html.contains("Litigation &#60;b&#62;hold&#60;/b&#62;")
            || page.html.contains("Litigation &lt;b&gt;hold")
    );

    // The range has dates.
    let scope_text = text(element(dom, "header", "scope"));
    assert!(
        scope_text.contains("from the first run (20"),
        "{scope_text}"
    );
    // At a glance: the ledger's count of runs.
    assert_eq!(
        number(&text(element(dom, "td", "glance-runs"))),
        report.runs_in_range
    );

    // Coverage by name, the tenantless type flagged, the exempt table listed.
    let coverage = rows(dom, "coverage-types");
    let names: Vec<&str> = coverage.iter().map(|r| r[0].as_str()).collect();
    assert_eq!(names, ["SessionNote", "SystemLog", "Ticket", "UserRecord"]);
    let log = coverage.iter().find(|r| r[0] == "SystemLog").expect("row");
    assert_eq!(log[1], "public.system_log");
    assert_eq!(log[8], "no run in range");
    let exempt = rows(dom, "exempt-tables");
    assert_eq!(exempt.len(), 1);
    assert_eq!(exempt[0][0], "AuditTrail");
    assert_eq!(exempt[0][1], "public.audit_trail");
    assert!(exempt[0][2].contains("HGB 257"));

    // Rules: period, legal minimum, source and reason.
    let rules = rows(dom, "rules-table");
    let tickets = rules
        .iter()
        .find(|r| r[0] == "tickets" && r[5] == "retention-policy-2026")
        .expect("tickets rule");
    assert_eq!(tickets[1], "Ticket");
    assert_eq!(tickets[2], "SoftDelete");
    assert_eq!(tickets[3], "P30D (30 days)");
    assert_eq!(tickets[6], "GDPR art. 5(1)(e)");
    let user_data = rules
        .iter()
        .find(|r| r[0] == "user-data" && r[8] != "0")
        .expect("user-data rule of the erasure");
    assert_eq!(user_data[4], "P365D (365 days)");
    assert_eq!(user_data[6], "tax law: one year");

    // Runs by kind and trigger, as the ledger counts them.
    let by_kind = rows(dom, "run-counts");
    assert_eq!(by_kind.len(), 3, "{by_kind:?}");
    let ledger_total = count(&db, "SELECT count(*) FROM sweep_run").await;
    assert_eq!(
        by_kind.iter().map(|r| number(&r[2])).sum::<i64>(),
        ledger_total
    );
    let manual = by_kind
        .iter()
        .find(|r| r[0] == "Sweep" && r[1] == "Manual")
        .expect("manual sweeps");
    assert_eq!(
        (number(&manual[3]), number(&manual[7])),
        (1, 1),
        "{manual:?}"
    );

    // Activity: the table adds up to the ledger, with thousands separators.
    let months = rows(dom, "category-months");
    let purged: i64 = months.iter().map(|r| number(&r[2])).sum();
    assert_eq!(purged, changed[0]);
    assert!(months.iter().any(|r| r[2] == "1,234,567"), "{months:?}");
    let soft: i64 = months.iter().map(|r| number(&r[3])).sum();
    assert_eq!(soft, changed[1]);
    // This month's tickets: two held rows (7 and 10), as the last sweep in
    // which tickets succeeded found them; the cancelled run after it, with
    // its incomplete count of 0, does not hide them, and the two sweeps
    // that met them count them once.
    let this_month = Utc::now().format("%Y-%m").to_string();
    let tickets_now = months
        .iter()
        .find(|r| r[0] == "tickets" && r[1] == this_month)
        .expect("this month's tickets");
    assert_eq!(tickets_now[5], "2", "{tickets_now:?}");

    // Runs: every one, the cancelled and the one in progress included.
    let runs = rows(dom, "runs-table");
    assert_eq!(runs.len() as i64, listed);
    let cancelled = runs
        .iter()
        .find(|r| r[0].starts_with("cccccccc"))
        .expect("the cancelled run is listed");
    assert_eq!(cancelled[6], "Cancelled", "{cancelled:?}");
    let running = runs
        .iter()
        .find(|r| r[0].starts_with("dddddddd"))
        .expect("the run in progress is listed");
    assert_eq!(running[6], "in progress", "{running:?}");
    let changed_listed: i64 = runs
        .iter()
        .filter(|r| !r[0].contains("dry run"))
        .map(|r| number(&r[8]))
        .sum();
    let ledger_listed = count(
        &db,
        "SELECT coalesce(sum(s.affected_count), 0)::bigint FROM sweep_run_entity_summary s \
         JOIN sweep_run r USING (run_id) WHERE NOT r.dry_run",
    )
    .await;
    assert_eq!(changed_listed, ledger_listed);

    // The erasure and why rows were kept.
    let erasures = rows(dom, "erasures-table");
    assert_eq!(erasures.len(), 1);
    let hmac: String = sqlx::query_scalar(
        "SELECT left(encode(subject_hmac, 'hex'), 16) FROM sweep_run WHERE run_kind = 'Erasure'",
    )
    .fetch_one(db.pool())
    .await
    .expect("hash");
    assert_eq!(erasures[0][1], hmac);
    assert_eq!(
        erasures[0][6..10]
            .iter()
            .map(|c| number(c))
            .collect::<Vec<_>>(),
        [1, 1, 1, 1]
    );

    // Failures read: type by name, kind, no raw JSON.
    let failed = element(dom, "table", "failed-runs");
    let failed_text = text(failed);
    assert!(failed_text.contains("SessionNote"), "{failed_text}");
    assert!(
        failed_text.contains("rule provider returned an error"),
        "{failed_text}"
    );
    assert!(!failed_text.contains("{\""), "raw JSON: {failed_text}");
    assert!(!failed_text.contains("secret-token"), "{failed_text}");

    // Holds: names, expiry, age; ended ones with how.
    let holds = rows(dom, "active-holds");
    assert_eq!(holds.len(), 3);
    let seven = holds.iter().find(|r| r[1] == "7").expect("ticket 7");
    assert_eq!(seven[0], "Ticket");
    assert_eq!(seven[5], "never (until removed)");
    assert_eq!(seven[6], "12");
    let ten = holds.iter().find(|r| r[1] == "10").expect("ticket 10");
    assert!(ten[5].starts_with("20"), "{ten:?}");
    let ended = rows(dom, "ended-holds-table");
    assert_eq!(
        ended
            .iter()
            .map(|r| (r[1].as_str(), r[6].as_str()))
            .collect::<Vec<_>>(),
        [("9", "expired"), ("8", "removed")]
    );
    // Matters, by type name.
    let matters = rows(dom, "active-matters");
    assert_eq!(matters.len(), 1);
    assert_eq!(matters[0][1], "every row of type SessionNote");
    let released = rows(dom, "ended-matters-table");
    assert_eq!(released.len(), 1);
    assert_eq!(released[0][7], "released");

    // The head, and the SQL an auditor runs to check it, run as printed.
    let head = report.verification.head.clone().expect("a head");
    assert_eq!(text(element(dom, "code", "head-hash")), head.hash);
    let check_sql = text(element(dom, "pre", "check-sql"));
    let head_sql = text(element(dom, "pre", "head-sql"));
    let check = sqlx::raw_sql(sqlx::AssertSqlSafe(check_sql.clone()))
        .fetch_one(db.pool())
        .await
        .expect("the printed chain check runs");
    let links: i64 = check.try_get("links").expect("links");
    let changed_links: i64 = check.try_get("changed").expect("changed");
    let broken: i64 = check.try_get("broken").expect("broken");
    let head_seq: i64 = check.try_get("head_seq").expect("head_seq");
    let head_hash: String = check.try_get("head_hash").expect("head_hash");
    assert_eq!(links as u64, report.verification.runs);
    assert_eq!((changed_links, broken), (0, 0));
    assert_eq!(
        (head_seq, head_hash.as_str()),
        (head.seq, head.hash.as_str())
    );
    let at_head = sqlx::raw_sql(sqlx::AssertSqlSafe(head_sql))
        .fetch_one(db.pool())
        .await
        .expect("the printed head query runs");
    assert_eq!(at_head.try_get::<String, _>(1).expect("hash"), head.hash);
    assert!(text(element(dom, "code", "verify-command")).contains("cohort verify --json"));

    // Printed: a PDF of several pages.
    let pdf = page.dir.join("report.pdf");
    run_chromium(
        &page.page,
        &[
            format!("--print-to-pdf={}", pdf.display()),
            "--no-pdf-header-footer".to_owned(),
        ],
    );
    let bytes = std::fs::read(&pdf).expect("the PDF");
    assert!(bytes.starts_with(b"%PDF"), "a PDF");
    let raw = String::from_utf8_lossy(&bytes);
    let pages = raw.matches("/Type /Page").count() - raw.matches("/Type /Pages").count();
    assert!(pages >= 3, "{pages} pages");
    if let Ok(path) = std::env::var("COHORT_REPORT_PDF") {
        std::fs::copy(&pdf, path).expect("keep the PDF");
    }
    if let Ok(path) = std::env::var("COHORT_REPORT_SCREENSHOT") {
        run_chromium(
            &page.page,
            &[
                format!("--screenshot={path}"),
                "--window-size=1200,3200".to_owned(),
                "--hide-scrollbars".to_owned(),
            ],
        );
    }

    // The printed check is not vacuous: a run changed behind Cohort's back
    // is one changed link, as verify says.
    db.exec(
        "ALTER TABLE sweep_run DISABLE TRIGGER USER; \
         UPDATE sweep_run SET error = '{}' WHERE chain_seq = 1; \
         ALTER TABLE sweep_run ENABLE TRIGGER USER;",
    )
    .await;
    let check = sqlx::raw_sql(sqlx::AssertSqlSafe(check_sql))
        .fetch_one(db.pool())
        .await
        .expect("the chain check runs");
    assert_eq!(check.try_get::<i64, _>("changed").expect("changed"), 1);
    let mut conn = db.pool().acquire().await.expect("conn");
    let verified = verify(&mut conn, &SchemaName::public())
        .await
        .expect("verify");
    assert_eq!(verified.problems.len(), 1, "{verified}");
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
    let page = render(&report);
    assert_no_negative_sizes(&page.dom);
    for chart in ["chart-categories", "chart-months"] {
        let svg = element(&page.dom, "div", chart);
        let bars: Vec<_> = rects(svg).into_iter().filter(|r| r.4 == PURGE).collect();
        assert_eq!(bars.len(), 1, "{chart} draws the month's bar: {svg}");
        assert!(
            bars[0].2 > 5.0 && bars[0].3 > 5.0,
            "{chart}: a bar of positive size: {:?}",
            bars[0]
        );
    }
    // Without the host's model, the report says it does not know exempt
    // tables rather than listing none.
    let exempt = text(element(&page.dom, "p", "exempt-tables"));
    assert!(exempt.starts_with("Not given"), "{exempt}");
}

// contract: EV3
// One category of two million rows and five small ones: on a linear axis
// the small ones' bars were less than a pixel wide. On the report's log
// scale each is drawn and labelled, and each has a panel of its own scale.
#[tokio::test]
async fn a_skewed_category_does_not_hide_the_others() {
    let db = db_with_tables().await;
    let t = tenant_a();
    let run = Uuid::new_v4();
    let mut values = String::new();
    for (i, purged) in [2_000_000, 7, 40, 3, 120, 1].iter().enumerate() {
        if i > 0 {
            values.push_str(", ");
        }
        values.push_str(&format!(
            "('{run}', '{}', 'Type{i}', 'category-{i}', '{t}', 'Purge', 'Succeeded', {purged}, 0, 0, 0, now())",
            Uuid::new_v4()
        ));
    }
    db.exec(&format!(
        "INSERT INTO sweep_run (run_id, run_kind, trigger, dry_run, tenant_id, logical_now, status, started_at) \
         VALUES ('{run}', 'Sweep', 'Scheduled', false, '{t}', now(), 'Started', now()); \
         INSERT INTO sweep_run_entity_summary (run_id, retained_entity_id, entity_type, category, tenant_id, strategy, \
             status, affected_count, held_count, skipped_count, null_anchor_count, updated_at) VALUES {values}; \
         UPDATE sweep_run SET status = 'Succeeded', settled_at = now() WHERE run_id = '{run}';"
    ))
    .await;
    let mut conn = db.pool().acquire().await.expect("conn");
    let report = audit_report(
        &mut conn,
        &SchemaName::public(),
        &ReportOptions::new(TimeRange::all()),
    )
    .await
    .expect("report");
    let page = render(&report);
    assert_no_negative_sizes(&page.dom);
    let chart = element(&page.dom, "div", "chart-categories");
    let bars: Vec<_> = rects(chart).into_iter().filter(|r| r.4 == PURGE).collect();
    assert_eq!(bars.len(), 6, "{chart}");
    for b in &bars {
        assert!(b.2 >= 8.0, "every category's bar is visible: {b:?}");
    }
    let labels = text(chart);
    for label in ["2,000,000", "120", "40"] {
        assert!(labels.contains(label), "{label} labelled: {labels}");
    }
    // Small multiples: six panels, the smallest category's bar as tall as
    // the largest's (each panel has its own scale).
    let panels = element(&page.dom, "div", "chart-months");
    let panel_bars: Vec<_> = rects(panels).into_iter().filter(|r| r.4 == PURGE).collect();
    assert_eq!(panel_bars.len(), 6, "{panels}");
    let heights: Vec<f64> = panel_bars.iter().map(|b| b.3).collect();
    let (min, max) = heights
        .iter()
        .fold((f64::MAX, 0f64), |(lo, hi), h| (lo.min(*h), hi.max(*h)));
    assert!(min > 0.8 * max, "{heights:?}");
    // The table has the number with its separators.
    let months = rows(&page.dom, "category-months");
    assert_eq!(months[0][0], "category-0");
    assert_eq!(months[0][2], "2,000,000");
}

// contract: EV3
// Lists are capped, with how many were left out; totals count them all.
#[tokio::test]
async fn long_lists_are_capped_and_say_how_many_more() {
    let db = db_with_tables().await;
    db.exec(&format!(
        "INSERT INTO session_notes (id, tenant_id, created_at, body) \
         SELECT gen_random_uuid(), '{t}', now() - interval '100 days', 'n' FROM generate_series(1, 3)",
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
    for _ in 0..5 {
        cohort.sweep(&scope, Utc::now()).await.expect("sweep");
    }
    let mut options = ReportOptions::new(TimeRange::all());
    options.list_limit = 2;
    let report = cohort.audit_report(&options).await.expect("report");
    assert_eq!(report.runs.items.len(), 2);
    assert_eq!(report.runs.total, 5);
    let page = render(&report);
    assert_eq!(rows(&page.dom, "runs-table").len(), 2);
    let more = text(element(&page.dom, "p", "runs-more"));
    assert!(more.starts_with("3 more not shown"), "{more}");
    assert!(more.contains("cohort runs export"), "{more}");
    // The counts are not capped.
    let by_kind = rows(&page.dom, "run-counts");
    assert_eq!(number(&by_kind[0][2]), 5);
    // The handle gave its (empty) list of exempt tables: known, none.
    let exempt = rows(&page.dom, "exempt-tables");
    assert_eq!(exempt[0][0], "The model declares no exempt table.");
}

// contract: EV3
// The report file signed with the certificate key: the detached signature
// verifies over the file as written, and not once one byte changed.
#[tokio::test]
async fn a_signed_report_verifies_and_a_changed_byte_does_not() {
    let db = db_with_tables().await;
    let key = ed25519_dalek::SigningKey::from_bytes(&[7u8; 32]);
    let mut options = ReportOptions::new(TimeRange::all());
    options.signed_by = Some(hex::encode(key.verifying_key().as_bytes()));
    let mut conn = db.pool().acquire().await.expect("conn");
    let report = audit_report(&mut conn, &SchemaName::public(), &options)
        .await
        .expect("report");
    let html = report.to_html().expect("html");
    assert!(html.contains(&hex::encode(key.verifying_key().as_bytes())));
    let signature = sign_report(html.as_bytes(), &key).to_json();
    verify_report_signature(html.as_bytes(), &signature, &key.verifying_key())
        .expect("the file as written verifies");
    let mut changed = html.clone().into_bytes();
    let middle = changed.len() / 2;
    changed[middle] ^= 0x20;
    assert!(matches!(
        verify_report_signature(&changed, &signature, &key.verifying_key()),
        Err(EvidenceError::BadSignature)
    ));
    let other = ed25519_dalek::SigningKey::from_bytes(&[8u8; 32]);
    assert!(matches!(
        verify_report_signature(html.as_bytes(), &signature, &other.verifying_key()),
        Err(EvidenceError::BadSignature)
    ));
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

/// The negative-size check is not vacuous.
#[test]
fn the_size_check_catches_a_negative_bar() {
    let dom = "<svg><rect x=\"10\" y=\"5\" width=\"-48\" height=\"20\" fill=\"#B42318\"></rect></svg><svg></svg>";
    let caught = std::panic::catch_unwind(|| assert_no_negative_sizes(dom));
    assert!(caught.is_err());
}
