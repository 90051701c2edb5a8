//! `cohort worker --metrics-addr` (contract OB1): a real HTTP client scrapes
//! `/metrics` during and after occurrences, and the counters move by the
//! runs' exact counts; `/healthz` is ready once the handle is built and the
//! database answers, not ready (saying why) while the database refuses
//! connections, and ready again when it takes them.

use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use crate::common::*;

const TENANT: &str = "2b0c6e1e-5d4c-4a8e-9a59-1f3c1d0e7a21";
const OTHER: &str = "7d1e0f5e-0c3b-4d8e-9a1b-2c3d4e5f6a7b";
const EVENTS: &str = "4e5f6a7b-8c9d-4e0f-a1b2-c3d4e5f6a7b8";

/// Ten old rows of `TENANT` (the worker's), ten of `OTHER`, two recent ones.
async fn setup(p: &Project) {
    assert_success(&p.cohort(&["schema", "migrate"]));
    p.db.exec(&format!(
        "CREATE TABLE events (id bigint PRIMARY KEY, tenant_id uuid NOT NULL, created_at timestamptz NOT NULL); \
         INSERT INTO events SELECT i, CASE WHEN i <= 10 THEN '{TENANT}'::uuid ELSE '{OTHER}'::uuid END, \
                '2020-01-01'::timestamptz + i * interval '1 second' FROM generate_series(1, 20) AS i; \
         INSERT INTO events VALUES (21, '{TENANT}', '2029-12-31'), (22, '{TENANT}', '2029-12-30');"
    ))
    .await;
    p.write(
        "cohort-model.toml",
        &format!(
            "[[entity]]\nid = \"{EVENTS}\"\ntable = \"events\"\ncategory = \"events\"\nanchor = \"created_at\"\n\n\
             [rules.events]\nstrategy = \"purge\"\nperiod = \"30d\"\n"
        ),
    );
    // Every second (six fields: seconds first).
    p.write(
        "cohort.toml",
        &format!("[worker]\nschedule = \"* * * * * *\"\ntenants = [\"{TENANT}\"]\n"),
    );
}

/// A free local port (the worker binds it next).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// `GET http://127.0.0.1:port/path`: the status and the body, or `None`
/// while nothing listens.
async fn get(port: u16, path: &str) -> Option<(u16, String)> {
    let url = format!("http://127.0.0.1:{port}{path}");
    tokio::task::spawn_blocking(move || {
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(Duration::from_secs(20)))
            .build()
            .into();
        let mut response = agent.get(&url).call().ok()?;
        let status = response.status().as_u16();
        let body = response.body_mut().read_to_string().ok()?;
        Some((status, body))
    })
    .await
    .expect("join")
}

/// The value of the series `series` (name and labels exactly as rendered).
fn value(metrics: &str, series: &str) -> Option<f64> {
    metrics.lines().find_map(|l| {
        let rest = l.strip_prefix(series)?;
        rest.strip_prefix(' ')?.trim().parse().ok()
    })
}

/// Polls `check` until it answers, or fails the test after a minute.
async fn until<T, F, Fut>(child: &mut Child, what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(v) = check().await {
            return v;
        }
        if let Some(status) = child.try_wait().expect("poll the worker") {
            panic!("the worker exited ({status}) before {what}");
        }
        assert!(Instant::now() < deadline, "never: {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Lets the test database take new connections, or not (from another
/// database: a database cannot refuse its own session's).
async fn allow_connections(p: &Project, allow: bool) {
    use sqlx::Connection;
    let mut other = sqlx::PgConnection::connect_with(&p.db.options().database("postgres"))
        .await
        .expect("connect to the postgres database");
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "ALTER DATABASE \"{}\" ALLOW_CONNECTIONS {allow}",
        p.db.name()
    )))
    .execute(&mut other)
    .await
    .expect("alter database");
    if !allow {
        // And the sessions it has are ended (the worker's pool included).
        sqlx::query("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1")
            .bind(p.db.name())
            .execute(&mut other)
            .await
            .expect("terminate");
    }
}

// contract: OB1
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_worker_serves_metrics_that_count_its_runs_and_a_health_check() {
    let p = Project::new().await;
    setup(&p).await;
    let port = free_port();
    let addr = format!("127.0.0.1:{port}");
    let mut child = p
        .command(&["worker", "--metrics-addr", &addr])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the worker");

    // Ready once the handle is built.
    until(&mut child, "/healthz answers 200", || async {
        get(port, "/healthz").await.filter(|(s, _)| *s == 200)
    })
    .await;

    // During and after occurrences: the first purges the ten old rows of
    // the worker's tenant; every later one finds nothing.
    let metrics = until(&mut child, "two scheduled runs are counted", || async {
        let (status, body) = get(port, "/metrics").await?;
        assert_eq!(status, 200);
        let runs = value(
            &body,
            r#"cohort_runs_total{kind="Sweep",trigger="Scheduled",status="Succeeded"}"#,
        )?;
        (runs >= 2.0).then_some(body)
    })
    .await;
    assert_eq!(
        value(&metrics, r#"cohort_rows_total{strategy="Purge"}"#),
        Some(10.0),
        "exactly the rows the runs purged:\n{metrics}"
    );
    let purged: i64 = sqlx::query_scalar("SELECT count(*) FROM events WHERE tenant_id = $1::uuid")
        .bind(TENANT)
        .fetch_one(p.db.pool())
        .await
        .expect("count");
    assert_eq!(purged, 2, "the two recent rows stay");
    assert!(
        value(
            &metrics,
            r#"cohort_batch_duration_seconds_count{strategy="Purge"}"#
        )
        .is_some_and(|n| n >= 1.0),
        "{metrics}"
    );
    assert!(
        value(&metrics, "cohort_fence_wait_seconds_count").is_some_and(|n| n >= 1.0),
        "{metrics}"
    );
    assert!(
        value(&metrics, "cohort_worker_last_success_timestamp_seconds").is_some_and(|t| t > 1.0e9),
        "{metrics}"
    );
    // The backlog: nothing overdue in the worker's tenant once it swept.
    assert_eq!(
        value(
            &metrics,
            &format!(
                r#"cohort_backlog_rows{{category="events",tenant="{TENANT}",reason="NeverSwept"}}"#
            )
        ),
        Some(0.0),
        "{metrics}"
    );
    assert!(
        metrics.contains("# TYPE cohort_rows_total counter"),
        "{metrics}"
    );

    // The database refuses connections: not ready, and it says why.
    allow_connections(&p, false).await;
    let (status, body) = until(&mut child, "/healthz answers 503", || async {
        get(port, "/healthz").await.filter(|(s, _)| *s == 503)
    })
    .await;
    assert_eq!(status, 503);
    assert!(
        body.contains("not ready") && body.contains("database"),
        "{body}"
    );
    allow_connections(&p, true).await;
    until(&mut child, "/healthz answers 200 again", || async {
        get(port, "/healthz").await.filter(|(s, _)| *s == 200)
    })
    .await;
    assert_eq!(get(port, "/nothing").await.map(|(s, _)| s), Some(404));

    let (status, out) = terminate(child);
    assert_eq!(status.code(), Some(0), "stderr:\n{}", stderr(&out));
    assert!(stderr(&out).contains(&format!("metrics on http://{addr}/metrics")));
}
