//! `worker`: the library's scheduled worker (`cohort::worker::Worker`) on
//! the model's tables, with the tenants and kill switch from the settings.
//!
//! Each occurrence is the library's own [`Worker::run_occurrence`]: the
//! replica lock, the claim check, one pass per tenant and the tenantless
//! pass. This command only waits for the next occurrence, prints one line
//! (or one JSON object) per occurrence, and turns SIGTERM and Ctrl-C into a
//! clean shutdown.

use std::path::PathBuf;
use std::time::Duration;

use chrono::{DateTime, Utc};
use cohort::worker::{KillSwitch, OccurrenceReport, Worker};
use cohort::{BoxFuture, CancellationToken, TenantContext};
use serde::Serialize;
use uuid::Uuid;

use super::Ctx;
use crate::cli::WorkerArgs;
use crate::error::{CliError, CliResult};
use crate::output::{self, time};
use crate::progress::Progress;
use crate::telemetry::Telemetry;

/// One occurrence as JSON (`worker --once --json`; one line per occurrence
/// while running).
#[derive(Debug, Serialize)]
pub(crate) struct OccurrenceJson {
    /// The occurrence's time (UTC): the passes' logical time.
    pub(crate) occurrence: String,
    /// Whether the passes changed no row.
    pub(crate) dry_run: bool,
    /// Another replica (or an earlier run) had already swept it.
    pub(crate) already_swept: bool,
    /// The kill switch stopped it before a pass.
    pub(crate) stopped_by_kill_switch: bool,
    /// Shutdown stopped it mid-pass (that run ended `Cancelled`).
    pub(crate) cancelled: bool,
    /// Rows changed in all.
    pub(crate) affected: u64,
    /// One entry per pass, in the order run.
    pub(crate) passes: Vec<PassJson>,
}

/// One pass of an occurrence.
#[derive(Debug, Serialize)]
pub(crate) struct PassJson {
    /// The tenant, or null for the tenantless pass.
    pub(crate) tenant_id: Option<Uuid>,
    /// The run's id in the ledger (null when it failed before starting).
    pub(crate) run_id: Option<Uuid>,
    /// How the run ended (null when it failed before starting).
    pub(crate) status: Option<String>,
    /// Rows changed.
    pub(crate) affected: u64,
    /// Why it failed.
    pub(crate) error: Option<String>,
}

fn occurrence_json(r: &OccurrenceReport) -> OccurrenceJson {
    OccurrenceJson {
        occurrence: time(&r.occurrence),
        dry_run: r.dry_run,
        already_swept: r.already_swept,
        stopped_by_kill_switch: r.stopped_by_kill_switch,
        cancelled: r.cancelled,
        affected: r.affected(),
        passes: r
            .passes
            .iter()
            .map(|p| PassJson {
                tenant_id: p.tenant_id,
                run_id: p.run_id,
                status: p.status.map(|s| s.to_string()),
                affected: p.affected,
                error: p.error.clone(),
            })
            .collect(),
    }
}

fn print_occurrence(json: &OccurrenceJson) -> CliResult {
    let dry = if json.dry_run { " (dry run)" } else { "" };
    let what = if json.already_swept {
        "a scheduled sweep at or after this occurrence already ran (another replica, or an earlier run); skipped"
            .to_owned()
    } else if json.stopped_by_kill_switch && json.passes.is_empty() {
        "the kill switch is on; no pass started".to_owned()
    } else {
        let failed = json.passes.iter().filter(|p| p.error.is_some()).count();
        let mut s = format!(
            "{} pass(es), {} row(s) changed, {failed} failed",
            json.passes.len(),
            json.affected
        );
        if json.stopped_by_kill_switch {
            s.push_str("; the kill switch stopped the rest");
        }
        if json.cancelled {
            s.push_str("; shutdown cancelled the pass in flight");
        }
        s
    };
    output::line(format!("occurrence {}{dry}: {what}", json.occurrence))?;
    for p in &json.passes {
        let tenant = p
            .tenant_id
            .map_or_else(|| "tenantless".to_owned(), |t| format!("tenant {t}"));
        let run = p
            .run_id
            .map_or_else(|| "no run".to_owned(), |r| format!("run {r}"));
        let status = p.status.as_deref().unwrap_or("not started");
        let error = p
            .error
            .as_deref()
            .map(|e| format!(": {e}"))
            .unwrap_or_default();
        output::line(format!(
            "  {tenant}: {run} {status}, {} row(s){error}",
            p.affected
        ))?;
    }
    Ok(())
}

fn print(ctx: &Ctx, report: &OccurrenceReport) -> CliResult {
    let json = occurrence_json(report);
    if ctx.json() {
        output::json_line(&json)
    } else {
        print_occurrence(&json)
    }
}

/// The kill switch of `worker.kill_switch_file`: engaged while the file
/// exists.
struct FileSwitch(PathBuf);

impl KillSwitch for FileSwitch {
    fn engaged(&self) -> BoxFuture<'_, Result<bool, cohort::policy::ProviderError>> {
        Box::pin(async move {
            match tokio::fs::try_exists(&self.0).await {
                Ok(exists) => Ok(exists),
                Err(e) => Err(format!(
                    "cannot read the kill-switch file {}: {e}",
                    self.0.display()
                )
                .into()),
            }
        })
    }
}

/// Cancels `token` on SIGTERM or the first Ctrl-C; exits at once, with code
/// 130, on a second Ctrl-C.
fn shutdown_on_signals(progress: Progress) -> CliResult<CancellationToken> {
    let token = CancellationToken::new();
    let cancel = token.clone();
    let note = "stopping: the pass in flight ends after its current batch (its run ends \
                Cancelled; committed batches stay committed). Ctrl-C again exits at once.";
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let mut interrupt = signal(SignalKind::interrupt())
            .map_err(|e| CliError::Internal(format!("cannot handle Ctrl-C: {e}")))?;
        let mut terminate = signal(SignalKind::terminate())
            .map_err(|e| CliError::Internal(format!("cannot handle SIGTERM: {e}")))?;
        tokio::spawn(async move {
            tokio::select! {
                got = interrupt.recv() => if got.is_none() { return },
                got = terminate.recv() => if got.is_none() { return },
            }
            cancel.cancel();
            progress.note(note);
            if interrupt.recv().await.is_some() {
                eprintln!(
                    "second Ctrl-C: exiting at once; the run stays Started until it is settled"
                );
                std::process::exit(i32::from(crate::error::code::INTERRUPTED));
            }
        });
    }
    #[cfg(not(unix))]
    tokio::spawn(async move {
        if tokio::signal::ctrl_c().await.is_ok() {
            cancel.cancel();
            progress.note(note);
        }
        if tokio::signal::ctrl_c().await.is_ok() {
            std::process::exit(i32::from(crate::error::code::INTERRUPTED));
        }
    });
    Ok(token)
}

/// The worker on the model's tables, with its tenants and kill switch;
/// `telemetry` learns the handle once it is built.
async fn worker(
    ctx: &Ctx,
    args: &WorkerArgs,
    progress: &Progress,
    telemetry: Option<&Telemetry>,
) -> CliResult<Worker> {
    let model = ctx.model()?;
    let pool = ctx.pool().await?;
    let mut settings = ctx.settings.clone();
    if args.dry_run {
        settings.worker.dry_run = true;
    }
    let b = crate::model::build::builder(&pool, &model, &settings).await?;
    let cohort = b.observer(progress.clone()).build().await?;
    let tenants: Vec<Uuid> = if args.tenants.is_empty() {
        settings.worker.tenants.clone()
    } else {
        args.tenants.clone()
    };
    if let Some(t) = telemetry {
        t.ready(&cohort, &pool, &tenants);
    }
    let tenants: Vec<TenantContext> = tenants.into_iter().map(TenantContext::new).collect();
    let mut w = cohort.worker().tenants(tenants);
    if let Some(path) = &settings.worker.kill_switch_file {
        if settings.worker.kill_switch {
            // The settings' switch is on: it wins over the file.
            w = w.kill_switch(true);
        } else {
            w = w.kill_switch(FileSwitch(path.clone()));
        }
    }
    Ok(w)
}

/// The exit status of one occurrence.
fn outcome(report: &OccurrenceReport) -> CliResult {
    if report.cancelled {
        return Err(CliError::WorkerInterrupted);
    }
    match report.failed_passes() {
        0 => Ok(()),
        failed => Err(CliError::PassesFailed {
            failed,
            passes: report.passes.len(),
        }),
    }
}

/// `worker`.
pub(crate) async fn run(ctx: &Ctx, args: &WorkerArgs) -> CliResult {
    let names = super::names(&ctx.model()?);
    let progress = Progress::new(names);
    let telemetry = match args.metrics_addr {
        Some(addr) => {
            let t = Telemetry::start(addr).await?;
            progress.note(&format!(
                "cohort worker: metrics on http://{}/metrics, health on http://{}/healthz",
                t.addr, t.addr
            ));
            Some(t)
        }
        None => None,
    };
    let worker = match worker(ctx, args, &progress, telemetry.as_ref()).await {
        Ok(w) => w,
        Err(e) => {
            if let Some(t) = &telemetry {
                t.failed(&e.to_string());
            }
            return Err(e);
        }
    };
    let shutdown = shutdown_on_signals(progress.clone())?;
    if args.once {
        let at = args.at.map_or_else(Utc::now, |t| t.with_timezone(&Utc));
        let report = worker.run_occurrence(at, &shutdown).await;
        progress.finish();
        let report = report?;
        if telemetry.is_some() && !report.cancelled && report.failed_passes() == 0 {
            Telemetry::succeeded(at);
        }
        print(ctx, &report)?;
        return outcome(&report);
    }
    loop {
        let Some(next) = worker.next_occurrence() else {
            progress.note("the schedule has no occurrence left; the worker stops");
            return Ok(());
        };
        progress.note(&format!(
            "cohort worker: next occurrence {} (schedule {:?})",
            time(&next),
            ctx.settings.worker.schedule
        ));
        tokio::select! {
            () = sleep_until(next) => {}
            () = shutdown.cancelled() => return Ok(()),
        }
        match worker.run_occurrence(next, &shutdown).await {
            Ok(report) => {
                progress.finish();
                if telemetry.is_some() && !report.cancelled && report.failed_passes() == 0 {
                    Telemetry::succeeded(next);
                }
                print(ctx, &report)?;
            }
            Err(e) => {
                progress.finish();
                // The next occurrence comes as scheduled (W2).
                eprintln!(
                    "error: the occurrence {} failed: {}; the next one comes as scheduled",
                    time(&next),
                    CliError::from(e)
                );
            }
        }
        if shutdown.is_cancelled() {
            return Ok(());
        }
    }
}

/// Sleeps until `at` by the system clock, in steps of at most a minute so
/// that a clock adjusted meanwhile is noticed.
async fn sleep_until(at: DateTime<Utc>) {
    loop {
        let left = at - Utc::now();
        let Ok(left) = left.to_std() else { return };
        if left.is_zero() {
            return;
        }
        tokio::time::sleep(left.min(Duration::from_secs(60))).await;
    }
}
