//! `preview`, `sweep` and `erase`: the library's own operations on the
//! model's descriptors, with live progress and clean cancellation.

use std::collections::HashMap;

use cohort::{
    CancellationToken, Cohort, ErasureRequest, Preview, RunResult, RunStatus, Scope, SweepOptions,
};
use serde::Serialize;
use uuid::Uuid;

use super::rows::SummaryJson;
use super::{Ctx, names, scope};
use crate::cli::{EraseArgs, ScopeArgs, SweepArgs};
use crate::error::{CliError, CliResult};
use crate::model::Model;
use crate::output::{self, opt, time};
use crate::progress::Progress;

/// `preview` as JSON.
#[derive(Debug, Serialize)]
pub(crate) struct PreviewJson {
    /// The logical time (UTC).
    pub(crate) now: String,
    /// The tenant, or null for the tenantless scope.
    pub(crate) tenant_id: Option<Uuid>,
    /// One entry per retained table of the scope.
    pub(crate) entries: Vec<PreviewEntryJson>,
    /// Tables explicitly exempt.
    pub(crate) exempt: Vec<ExemptJson>,
}

/// One table in a preview.
#[derive(Debug, Serialize)]
pub(crate) struct PreviewEntryJson {
    /// The model's name for the table.
    pub(crate) entity: String,
    /// Its retained-entity id.
    pub(crate) entity_id: Uuid,
    /// Its category.
    pub(crate) category: String,
    /// The strategy the rule resolves to (null when it could not be resolved).
    pub(crate) strategy: Option<&'static str>,
    /// Rows older than this are eligible (null: none are).
    pub(crate) cutoff: Option<String>,
    /// Rows a sweep would change.
    pub(crate) eligible: u64,
    /// Rows past the cutoff under an active legal hold.
    pub(crate) held: u64,
    /// Rows with a NULL anchor (kept).
    pub(crate) null_anchor: u64,
    /// Why the table could not be previewed (the sanitized failure).
    pub(crate) failure: Option<String>,
    /// Under disposition review: `eligible` counts only the rows of
    /// approved batches; left out when the rule has no review.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub(crate) review: bool,
    /// Under review: the rows a sweep would freeze into a new batch.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) awaiting_review: Option<u64>,
}

/// An exempt table.
#[derive(Debug, Serialize)]
pub(crate) struct ExemptJson {
    /// Its name.
    pub(crate) entity: String,
    /// Why it is exempt.
    pub(crate) reason: String,
}

/// A sweep's or an erasure's result as JSON: the run that just finished,
/// with its summaries and the exempt tables inline. `runs list` and `runs
/// show` print a run from the ledger instead ([`super::runs::RunRowJson`]),
/// a different shape: there the logical time is `logical_now` (here `now`),
/// and the trigger, the tenant, the database's start and settle times, the
/// run's error and its held total are given, which a finished run's result
/// does not carry (its summaries do: held rows and errors are per table).
#[derive(Debug, Serialize)]
pub(crate) struct RunJson {
    /// The run's id in the ledger.
    pub(crate) run_id: Uuid,
    /// `Sweep` or `Erasure`.
    pub(crate) kind: &'static str,
    /// `Succeeded`, `PartiallyFailed`, `Failed` or `Cancelled`.
    pub(crate) status: String,
    /// Whether nothing was changed.
    pub(crate) dry_run: bool,
    /// The logical time (UTC).
    pub(crate) now: String,
    /// Rows changed in all (or, in a dry run, that would have been).
    pub(crate) affected: u64,
    /// One summary per table.
    pub(crate) summaries: Vec<SummaryJson>,
    /// Tables explicitly exempt.
    pub(crate) exempt: Vec<ExemptJson>,
    /// With `sweep --vacuum` or `erase --vacuum`: each table the sweep changed rows in, its
    /// dead tuples and whether it was vacuumed (the library's
    /// `RunResult::tables`, as JSON).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) tables: Option<Vec<cohort::TableMaintenance>>,
    /// What disposition review did (the library's
    /// `RunResult::dispositions`): batches frozen, auto-approved, carried
    /// out, voided. Left out when none.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) dispositions: Vec<DispositionJson>,
}

/// One thing disposition review did in a run.
#[derive(Debug, Serialize)]
pub(crate) struct DispositionJson {
    /// The batch.
    pub(crate) batch_id: Uuid,
    /// The table, as the model file names it.
    pub(crate) entity: String,
    /// The rule's stage, the first being 1.
    pub(crate) stage: u32,
    /// `frozen`, `auto_approved`, `carried_out` or `voided`, with counts.
    #[serde(flatten)]
    pub(crate) action: cohort::disposition::DispositionAction,
}

fn name_of(names: &HashMap<Uuid, String>, id: Uuid, fallback: &str) -> String {
    names
        .get(&id)
        .cloned()
        .unwrap_or_else(|| fallback.to_owned())
}

/// The preview as JSON.
pub(crate) fn preview_json(p: &Preview, scope: &Scope, model: &Model) -> PreviewJson {
    let names = names(model);
    PreviewJson {
        now: time(&p.now),
        tenant_id: scope.tenant().map(|t| t.id),
        entries: p
            .entries
            .iter()
            .map(|e| PreviewEntryJson {
                entity: name_of(&names, e.entity_id, e.entity_type),
                entity_id: e.entity_id,
                category: e.category.to_owned(),
                strategy: e.strategy.map(|s| s.as_str()),
                cutoff: e.cutoff.as_ref().map(time),
                eligible: e.eligible,
                held: e.held,
                null_anchor: e.null_anchor,
                failure: e.failure.as_ref().map(ToString::to_string),
                review: e.review,
                awaiting_review: e.awaiting_review,
            })
            .collect(),
        exempt: p
            .exempt
            .iter()
            .map(|x| ExemptJson {
                entity: x.entity_type.to_owned(),
                reason: x.reason.to_owned(),
            })
            .collect(),
    }
}

/// The preview as a table.
pub(crate) fn print_preview(json: &PreviewJson) -> CliResult {
    let scope = json
        .tenant_id
        .map_or_else(|| "tenantless tables".to_owned(), |t| format!("tenant {t}"));
    output::line(format!(
        "Preview at {} for {scope} (nothing is changed)",
        json.now
    ))?;
    let mut t = output::table(&[
        "table",
        "category",
        "strategy",
        "cutoff",
        "eligible",
        "held",
        "null anchor",
        "failure",
    ]);
    for e in &json.entries {
        t.add_row(vec![
            e.entity.clone(),
            e.category.clone(),
            opt(e.strategy),
            opt(e.cutoff.as_deref()),
            e.eligible.to_string(),
            e.held.to_string(),
            e.null_anchor.to_string(),
            opt(e.failure.as_deref()),
        ]);
    }
    output::line(t.to_string())?;
    for e in json.entries.iter().filter(|e| e.review) {
        output::line(format!(
            "under review: {}: `eligible` counts the rows of approved batches; a sweep would freeze {} more row(s) for review",
            e.entity,
            e.awaiting_review.unwrap_or(0)
        ))?;
    }
    for x in &json.exempt {
        output::line(format!("exempt: {} ({})", x.entity, x.reason))?;
    }
    Ok(())
}

/// A run's result as JSON.
pub(crate) fn run_json(r: &RunResult, model: &Model) -> RunJson {
    let names = names(model);
    RunJson {
        run_id: r.run_id,
        kind: r.kind.as_str(),
        status: r.status.to_string(),
        dry_run: r.dry_run,
        now: time(&r.now),
        affected: r.affected(),
        summaries: r
            .summaries
            .iter()
            .map(|s| SummaryJson {
                entity: name_of(&names, s.entity_id, s.entity_type),
                entity_id: s.entity_id,
                category: s.category.to_owned(),
                tenant_id: s.tenant_id,
                strategy: s.strategy.map(|s| s.as_str().to_owned()),
                status: None,
                affected: s.affected,
                held: s.held,
                skipped: s.skipped,
                null_anchor: s.null_anchor,
                legal_minimum: s.legal_minimum,
                applied_period: s.applied_period.map(|p| p.to_string()),
                cutoff: s.cutoff.as_ref().map(time),
                rule_source: s.rule_source.clone(),
                rule_reason: s.rule_reason.clone(),
                error: s.error.clone(),
            })
            .collect(),
        exempt: r
            .exempt
            .iter()
            .map(|x| ExemptJson {
                entity: x.entity_type.to_owned(),
                reason: x.reason.to_owned(),
            })
            .collect(),
        tables: None,
        dispositions: r
            .dispositions
            .iter()
            .map(|d| DispositionJson {
                batch_id: d.batch_id,
                entity: name_of(&names, d.entity_id, &d.entity_type),
                stage: d.stage + 1,
                action: d.action.clone(),
            })
            .collect(),
    }
}

/// What `skipped` means in a cancelled run's table.
pub(crate) const CANCELLED_SKIPPED: &str = "the run was cancelled: `skipped` also counts the rows it had not reached yet \
     (the next sweep takes them)";

/// A run's result as a table.
pub(crate) fn print_run(json: &RunJson) -> CliResult {
    let dry = if json.dry_run {
        " (dry run: nothing was changed)"
    } else {
        ""
    };
    output::line(format!(
        "{} run {} at {}: {}{dry}",
        json.kind, json.run_id, json.now, json.status
    ))?;
    let mut t = output::table(&[
        "table",
        "category",
        "strategy",
        "affected",
        "held",
        "skipped",
        "null anchor",
        "legal min.",
        "period",
        "cutoff",
        "error",
    ]);
    for s in &json.summaries {
        t.add_row(vec![
            s.entity.clone(),
            s.category.clone(),
            opt(s.strategy.as_deref()),
            s.affected.to_string(),
            s.held.to_string(),
            s.skipped.to_string(),
            s.null_anchor.to_string(),
            s.legal_minimum.to_string(),
            opt(s.applied_period.as_deref()),
            opt(s.cutoff.as_deref()),
            opt(s.error.as_deref()),
        ]);
    }
    output::line(t.to_string())?;
    if json.status == "Cancelled" {
        output::line(CANCELLED_SKIPPED)?;
    }
    for d in &json.dispositions {
        use cohort::disposition::DispositionAction as A;
        let what = match &d.action {
            A::Frozen { rows } => format!(
                "{rows} row(s) frozen for review, none changed (cohort disposition show {})",
                output::short_id(&d.batch_id)
            ),
            A::AutoApproved => "approved automatically: its auto-approval time came".to_owned(),
            A::CarriedOut {
                changed,
                held,
                left,
                ineligible,
            } => format!(
                "carried out: {changed} changed, {held} kept (held), {left} left (locked), {ineligible} kept (no longer eligible)"
            ),
            A::Voided => "voided: its rule changed".to_owned(),
            _ => "changed".to_owned(),
        };
        output::line(format!(
            "disposition batch {} of {} (stage {}): {what}",
            output::short_id(&d.batch_id),
            d.entity,
            d.stage
        ))?;
    }
    for x in &json.exempt {
        output::line(format!("exempt: {} ({})", x.entity, x.reason))?;
    }
    for t in json.tables.iter().flatten() {
        let done = match &t.vacuum {
            cohort::VacuumOutcome::Vacuumed { millis } => format!("vacuumed in {millis} ms"),
            cohort::VacuumOutcome::BelowThreshold => {
                "not vacuumed (fewer rows changed than the --vacuum threshold)".into()
            }
            cohort::VacuumOutcome::NotPermitted => {
                "not vacuumed: only the table's owner may VACUUM it".into()
            }
            cohort::VacuumOutcome::TimedOut => "VACUUM timed out".into(),
            cohort::VacuumOutcome::Failed { reason } => format!("VACUUM failed: {reason}"),
            _ => "not vacuumed".into(),
        };
        let dead = t
            .dead_tuples
            .map_or_else(|| "unknown".to_owned(), |d| d.to_string());
        output::line(format!(
            "{}: {} rows changed, {done}; {dead} dead tuples",
            t.table, t.changed
        ))?;
    }
    Ok(())
}

/// `preview`.
pub(crate) async fn preview(ctx: &Ctx, args: &ScopeArgs) -> CliResult {
    let model = ctx.model()?;
    let pool = ctx.pool().await?;
    let cohort = ctx.cohort(&pool, &model, None).await?;
    let (scope, now) = scope(args, &model)?;
    let p = cohort.preview(&scope, now).await?;
    let json = preview_json(&p, &scope, &model);
    if ctx.json() {
        output::json(&json)
    } else {
        print_preview(&json)
    }
}

/// Cancels `token` on the first Ctrl-C (the run stops after its current
/// batch and ends `Cancelled`); exits at once, with code 130, on the second.
pub(crate) fn cancel_on_ctrl_c(progress: Progress) -> CliResult<CancellationToken> {
    let token = CancellationToken::new();
    let cancel = token.clone();
    // The handler is installed here, before the run starts, not when the
    // task is first polled: a Ctrl-C from then on is never lost.
    #[cfg(unix)]
    let mut signals = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())
        .map_err(|e| CliError::Internal(format!("cannot handle Ctrl-C: {e}")))?;
    tokio::spawn(async move {
        #[cfg(unix)]
        let mut next = async || signals.recv().await.is_some();
        #[cfg(not(unix))]
        let mut next = async || tokio::signal::ctrl_c().await.is_ok();
        if !next().await {
            return;
        }
        cancel.cancel();
        progress.note(
            "Ctrl-C: stopping after the current batch; the run will end Cancelled \
             (committed batches stay committed). Press Ctrl-C again to exit at once.",
        );
        if next().await {
            eprintln!(
                "second Ctrl-C: exiting at once; the run stays Started until its lease expires \
                 (Options::run_lease, 60 s by default), then `cohort runs settle` settles it"
            );
            std::process::exit(i32::from(crate::error::code::INTERRUPTED));
        }
    });
    Ok(token)
}

/// The exit status of a finished run: success only when it succeeded.
fn outcome(r: &RunResult) -> CliResult {
    match r.status {
        RunStatus::Succeeded => Ok(()),
        RunStatus::Cancelled => Err(CliError::Interrupted(r.run_id)),
        status => Err(CliError::RunNotSucceeded {
            run_id: r.run_id,
            status,
        }),
    }
}

async fn prepared(ctx: &Ctx, model: &Model) -> CliResult<(Cohort, Progress)> {
    let pool = ctx.pool().await?;
    let progress = Progress::new(names(model));
    let cohort = ctx.cohort(&pool, model, Some(progress.clone())).await?;
    let settled = cohort.settle_abandoned_runs().await?;
    if settled > 0 {
        progress.note(&format!(
            "settled {settled} abandoned run(s) as Failed (their owner is gone)"
        ));
    }
    Ok((cohort, progress))
}

/// `sweep`.
pub(crate) async fn sweep(ctx: &Ctx, args: &SweepArgs) -> CliResult {
    let model = ctx.model()?;
    let (cohort, progress) = prepared(ctx, &model).await?;
    let (scope, now) = scope(&args.scope, &model)?;
    let token = cancel_on_ctrl_c(progress.clone())?;
    let mut options = SweepOptions::default().cancel_on(token);
    if let Some(rows) = args.vacuum {
        options = options.vacuum(cohort::VacuumOptions::default().min_rows(rows));
    }
    if args.dry_run {
        options = options.dry_run();
    }
    let result = cohort.sweep_with(&scope, now, options).await;
    progress.finish();
    let result = result?;
    let mut json = run_json(&result, &model);
    if args.vacuum.is_some() {
        json.tables = Some(result.tables.clone());
    }
    if ctx.json() {
        output::json(&json)?;
    } else {
        print_run(&json)?;
    }
    outcome(&result)
}

/// `erase`.
pub(crate) async fn erase(ctx: &Ctx, args: &EraseArgs) -> CliResult {
    let model = ctx.model()?;
    if ctx.settings.certificate_key.is_none() {
        eprintln!(
            "warning: certificate_key is not set, so this erasure records no subject hash and `cohort certificate` \
             will not certify it; set COHORT_CERTIFICATE_KEY (or certificate_key in cohort.toml) before erasing"
        );
    }
    let (cohort, progress) = prepared(ctx, &model).await?;
    let (scope, now) = scope(&args.scope, &model)?;
    let token = cancel_on_ctrl_c(progress.clone())?;
    let mut request = ErasureRequest::new(args.subject.as_str()).cancel_on(token);
    if args.dry_run {
        request = request.dry_run();
    }
    if args.allow_soft_delete {
        request = request.allow_soft_delete();
    }
    if args.vacuum {
        request = request.vacuum();
    }
    let result = cohort.erase(&scope, now, request).await;
    progress.finish();
    let result = result?;
    let mut json = run_json(&result, &model);
    if args.vacuum {
        json.tables = Some(result.tables.clone());
    }
    if let Some(path) = &args.register {
        super::subject::append_to_register(ctx, result.run_id, path).await?;
    }
    if ctx.json() {
        output::json(&json)?;
    } else {
        print_run(&json)?;
    }
    outcome(&result)
}
