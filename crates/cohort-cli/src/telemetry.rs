//! `cohort worker --metrics-addr`: `/metrics` in Prometheus' text format and
//! `/healthz` (contract OB1).
//!
//! The library counts through the `metrics` facade; this installs the
//! Prometheus exporter's recorder and serves what it renders. At each scrape
//! it also sets the gauges only a query can answer: the row-handler queue's
//! depth per state and the retention backlog per category, tenant and
//! reason (`Cohort::backlog`, one indexed statement per type). `/healthz` is
//! ready once the handle is built and the database answers a query; its
//! body says why not. A deliberately small HTTP/1.1 server: `GET` of the two
//! paths, one request per connection, headers bounded to 8 KiB.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, Utc};
use cohort::{Cohort, Scope, TenantContext};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use sqlx::PgPool;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use uuid::Uuid;

use crate::error::{CliError, CliResult};

/// How long a scrape's queries and the health check's query may take.
const QUERY_BUDGET: Duration = Duration::from_secs(5);

/// The batch-duration histogram's buckets, in seconds.
const BATCH_BUCKETS: &[f64] = &[
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// What the endpoint serves from.
struct State {
    prometheus: PrometheusHandle,
    /// `None` until the handle is built; then the handle, its pool and the
    /// worker's tenants (for the backlog).
    engine: Mutex<Option<Engine>>,
    /// Why the handle is not built yet (or could not be).
    not_ready: Mutex<String>,
}

#[derive(Clone)]
struct Engine {
    cohort: Cohort,
    pool: PgPool,
    tenants: Vec<Uuid>,
}

/// The running endpoint.
#[derive(Clone)]
pub(crate) struct Telemetry {
    state: Arc<State>,
    /// The address it listens on (the port chosen when 0 was asked for).
    pub(crate) addr: SocketAddr,
}

impl Telemetry {
    /// Installs the recorder, binds `addr` and serves in the background.
    pub(crate) async fn start(addr: SocketAddr) -> CliResult<Telemetry> {
        let prometheus = PrometheusBuilder::new()
            .set_buckets_for_metric(
                Matcher::Full("cohort_batch_duration_seconds".to_owned()),
                BATCH_BUCKETS,
            )
            .map_err(|e| CliError::Usage(format!("the metrics recorder: {e}")))?
            .set_buckets_for_metric(
                Matcher::Full("cohort_fence_wait_seconds".to_owned()),
                BATCH_BUCKETS,
            )
            .map_err(|e| CliError::Usage(format!("the metrics recorder: {e}")))?
            .install_recorder()
            .map_err(|e| CliError::Usage(format!("the metrics recorder: {e}")))?;
        let listener = TcpListener::bind(addr).await.map_err(|e| {
            CliError::Usage(format!("--metrics-addr {addr}: cannot listen there: {e}"))
        })?;
        let addr = listener.local_addr().map_err(|e| {
            CliError::Usage(format!("--metrics-addr {addr}: cannot listen there: {e}"))
        })?;
        let state = Arc::new(State {
            prometheus,
            engine: Mutex::new(None),
            not_ready: Mutex::new(
                "building the handle (the model against the database)".to_owned(),
            ),
        });
        describe();
        let serving = Arc::clone(&state);
        tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                let state = Arc::clone(&serving);
                tokio::spawn(async move {
                    if let Err(e) = answer(stream, &state).await {
                        tracing::debug!(error = %e, "a metrics request failed");
                    }
                });
            }
        });
        Ok(Telemetry { state, addr })
    }

    /// The handle is built: `/healthz` may say ready, scrapes read the queue
    /// and the backlog.
    pub(crate) fn ready(&self, cohort: &Cohort, pool: &PgPool, tenants: &[Uuid]) {
        if let Ok(mut e) = self.state.engine.lock() {
            *e = Some(Engine {
                cohort: cohort.clone(),
                pool: pool.clone(),
                tenants: tenants.to_vec(),
            });
        }
    }

    /// The handle could not be built: `/healthz` says why.
    pub(crate) fn failed(&self, why: &str) {
        if let Ok(mut r) = self.state.not_ready.lock() {
            *r = why.to_owned();
        }
    }

    /// An occurrence swept without a failed pass.
    pub(crate) fn succeeded(at: DateTime<Utc>) {
        // Seconds since the epoch, as Prometheus timestamps are.
        metrics::gauge!("cohort_worker_last_success_timestamp_seconds")
            .set(at.timestamp_millis() as f64 / 1000.0);
    }
}

/// Help texts for the series the library and this module write.
fn describe() {
    use metrics::{describe_counter, describe_gauge, describe_histogram};
    describe_counter!("cohort_rows_total", "Rows changed, by strategy.");
    describe_counter!("cohort_batches_total", "Committed batches, by strategy.");
    describe_histogram!(
        "cohort_batch_duration_seconds",
        metrics::Unit::Seconds,
        "Duration of one committed batch, by strategy."
    );
    describe_counter!(
        "cohort_held_rows_total",
        "Rows past their cutoff found held at the end of an entity."
    );
    describe_counter!(
        "cohort_skipped_rows_total",
        "Eligible rows left by a run (locked, changed meanwhile)."
    );
    describe_counter!(
        "cohort_runs_total",
        "Settled runs, by kind, trigger and status."
    );
    describe_counter!(
        "cohort_lock_wait_fallbacks_total",
        "Range batches that met a locked row and took the locked path."
    );
    describe_counter!(
        "cohort_fence_timeouts_total",
        "Batches whose entity fence was not granted within the fence wait."
    );
    describe_histogram!(
        "cohort_fence_wait_seconds",
        metrics::Unit::Seconds,
        "How long a batch waited for its entity fence (its BEGIN included)."
    );
    describe_counter!(
        "cohort_handler_deliveries_total",
        "Settled row-handler deliveries, by outcome."
    );
    describe_counter!(
        "cohort_worker_occurrences_total",
        "Worker occurrences, by outcome."
    );
    describe_gauge!(
        "cohort_worker_last_success_timestamp_seconds",
        "When the last occurrence without a failed pass was due (Unix seconds)."
    );
    describe_gauge!(
        "cohort_handler_queue_depth",
        "Row-handler deliveries in the queue, by state."
    );
    describe_gauge!(
        "cohort_backlog_rows",
        "Rows past their cutoff still present and not held, by category, tenant and reason."
    );
    describe_gauge!(
        "cohort_backlog_oldest_overdue_seconds",
        "How far past its cutoff the oldest overdue row is, by category and tenant."
    );
    describe_gauge!(
        "cohort_backlog_held_rows",
        "Rows past their cutoff kept by an active hold or matter, by category and tenant."
    );
    describe_gauge!(
        "cohort_scrape_errors_total",
        "Scrapes whose queue or backlog query failed."
    );
}

/// Answers one request.
async fn answer(mut stream: TcpStream, state: &State) -> std::io::Result<()> {
    let mut head = Vec::with_capacity(1024);
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < 8192 {
        let n = tokio::time::timeout(QUERY_BUDGET, stream.read(&mut buf))
            .await
            .map_err(|_| std::io::Error::new(std::io::ErrorKind::TimedOut, "request head"))??;
        if n == 0 {
            break;
        }
        head.extend_from_slice(&buf[..n]);
    }
    let line = String::from_utf8_lossy(&head);
    let mut words = line.split_whitespace();
    let (method, path) = (words.next().unwrap_or(""), words.next().unwrap_or(""));
    let path = path.split('?').next().unwrap_or("");
    let (status, content_type, body) = match (method, path) {
        ("GET", "/metrics") => {
            refresh(state).await;
            (
                "200 OK",
                "text/plain; version=0.0.4; charset=utf-8",
                state.prometheus.render(),
            )
        }
        ("GET", "/healthz") => match health(state).await {
            Ok(()) => ("200 OK", "text/plain; charset=utf-8", "ok\n".to_owned()),
            Err(why) => (
                "503 Service Unavailable",
                "text/plain; charset=utf-8",
                format!("not ready: {why}\n"),
            ),
        },
        ("GET", _) => (
            "404 Not Found",
            "text/plain; charset=utf-8",
            "not found: try /metrics or /healthz\n".to_owned(),
        ),
        _ => (
            "405 Method Not Allowed",
            "text/plain; charset=utf-8",
            "only GET\n".to_owned(),
        ),
    };
    let response = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(response.as_bytes()).await?;
    stream.shutdown().await
}

fn engine(state: &State) -> Option<Engine> {
    state.engine.lock().ok().and_then(|e| e.clone())
}

/// Ready: the handle is built and the database answers.
async fn health(state: &State) -> Result<(), String> {
    let Some(e) = engine(state) else {
        return Err(state
            .not_ready
            .lock()
            .map(|r| r.clone())
            .unwrap_or_default());
    };
    let ping = sqlx::query_scalar::<_, i32>("SELECT 1").fetch_one(&e.pool);
    match tokio::time::timeout(QUERY_BUDGET, ping).await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(err)) => Err(format!("the database does not answer: {err}")),
        Err(_) => Err(format!(
            "the database did not answer within {}s",
            QUERY_BUDGET.as_secs()
        )),
    }
}

/// The gauges a query answers: the handler queue and the backlog.
async fn refresh(state: &State) {
    let Some(e) = engine(state) else { return };
    let work = async {
        let queue = crate::db::qualified(e.cohort.schema().as_str(), "sweep_row_handler_status")?;
        let rows: Vec<(String, i64)> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
            "SELECT q.state, pg_catalog.count(*) FROM {queue} AS q GROUP BY q.state"
        )))
        .fetch_all(&e.pool)
        .await?;
        for state in ["Pending", "InFlight", "Succeeded", "DeadLettered"] {
            let n = rows.iter().find(|(s, _)| s == state).map_or(0, |(_, n)| *n);
            metrics::gauge!("cohort_handler_queue_depth", "state" => state).set(n as f64);
        }
        let mut scopes = vec![(Scope::Tenantless, "-".to_owned())];
        for t in &e.tenants {
            scopes.push((Scope::Tenant(TenantContext::new(*t)), t.to_string()));
        }
        let now = Utc::now();
        for (scope, tenant) in scopes {
            let backlog = e.cohort.backlog(&scope, now).await?;
            for entry in backlog.entries {
                let labels = [
                    ("category", entry.category.to_owned()),
                    ("tenant", tenant.clone()),
                ];
                for reason in [
                    "NeverSwept",
                    "LastSweepFailed",
                    "LockedOrSkipped",
                    "DueSinceLastSweep",
                ] {
                    let n = match &entry.reason {
                        Some(r) if format!("{r:?}") == reason => entry.overdue,
                        _ => 0,
                    };
                    let mut l = labels.to_vec();
                    l.push(("reason", reason.to_owned()));
                    metrics::gauge!("cohort_backlog_rows", &l).set(n as f64);
                }
                let overdue = entry
                    .overdue_by()
                    .map_or(0.0, |d| d.num_milliseconds() as f64 / 1000.0);
                metrics::gauge!("cohort_backlog_oldest_overdue_seconds", &labels).set(overdue);
                metrics::gauge!("cohort_backlog_held_rows", &labels).set(entry.held as f64);
            }
        }
        Ok::<(), Box<dyn std::error::Error + Send + Sync>>(())
    };
    match tokio::time::timeout(QUERY_BUDGET, work).await {
        Ok(Ok(())) => {}
        Ok(Err(err)) => {
            tracing::warn!(error = %err, "a metrics scrape could not read the queue or the backlog");
            metrics::counter!("cohort_scrape_errors_total").increment(1);
        }
        Err(_) => {
            tracing::warn!("a metrics scrape's queries took longer than their budget");
            metrics::counter!("cohort_scrape_errors_total").increment(1);
        }
    }
}
