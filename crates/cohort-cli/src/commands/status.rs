//! `status`: the retention backlog (contract OB2) of one scope, as a table
//! or JSON, and a failed check (exit 3) when a row has been past its cutoff
//! for longer than `--max-overdue-days`.

use serde::Serialize;
use uuid::Uuid;

use super::{Ctx, names, scope};
use crate::cli::StatusArgs;
use crate::error::{CliError, CliResult};
use crate::output::{self, opt, time};

/// One table's backlog as JSON.
#[derive(Debug, Serialize)]
struct EntryJson {
    /// The model's name for the table.
    entity: String,
    /// The retained-entity id.
    entity_id: Uuid,
    /// The category.
    category: String,
    /// The strategy the rule resolves to now.
    strategy: Option<String>,
    /// The cutoff now.
    cutoff: Option<String>,
    /// Rows past the cutoff, not held, still there.
    overdue: u64,
    /// The oldest of them (its anchor).
    oldest_overdue: Option<String>,
    /// How many days the oldest has been past its cutoff.
    overdue_days: Option<f64>,
    /// Why they are still there: `never_swept`, `last_sweep_failed`,
    /// `locked_or_skipped`, `due_since_last_sweep`.
    reason: Option<&'static str>,
    /// Rows past the cutoff kept by an active hold.
    held: u64,
    /// The latest real sweep of the table in this scope.
    last_sweep: Option<Uuid>,
    /// Why the table could not be measured.
    failure: Option<String>,
}

/// `status --json`.
#[derive(Debug, Serialize)]
struct StatusJson {
    /// The logical time.
    now: String,
    /// Rows overdue in all.
    overdue: u64,
    /// The longest time, in days, any row has been past its cutoff.
    max_overdue_days: Option<f64>,
    /// One entry per retained table of the scope.
    entries: Vec<EntryJson>,
}

fn reason(r: cohort::BacklogReason) -> &'static str {
    match r {
        cohort::BacklogReason::NeverSwept => "never_swept",
        cohort::BacklogReason::LastSweepFailed => "last_sweep_failed",
        cohort::BacklogReason::LockedOrSkipped => "locked_or_skipped",
        cohort::BacklogReason::DueSinceLastSweep => "due_since_last_sweep",
        _ => "other",
    }
}

fn days(d: chrono::TimeDelta) -> f64 {
    (d.num_seconds() as f64 / 86_400.0 * 10.0).round() / 10.0
}

/// `status`.
pub(crate) async fn run(ctx: &Ctx, args: &StatusArgs) -> CliResult {
    let model = ctx.model()?;
    let (scope, now) = scope(&args.scope, &model)?;
    let pool = ctx.pool().await?;
    let cohort = ctx.cohort(&pool, &model, None).await?;
    let backlog = cohort.backlog(&scope, now).await?;
    let names = names(&model);
    let json = StatusJson {
        now: time(&backlog.now),
        overdue: backlog.overdue(),
        max_overdue_days: backlog.max_overdue_by().map(days),
        entries: backlog
            .entries
            .iter()
            .map(|e| EntryJson {
                entity: names
                    .get(&e.entity_id)
                    .cloned()
                    .unwrap_or_else(|| e.entity_type.to_owned()),
                entity_id: e.entity_id,
                category: e.category.to_owned(),
                strategy: e.strategy.map(|s| s.as_str().to_owned()),
                cutoff: e.cutoff.as_ref().map(time),
                overdue: e.overdue,
                oldest_overdue: e.oldest_overdue.as_ref().map(time),
                overdue_days: e.overdue_by().map(days),
                reason: e.reason.map(reason),
                held: e.held,
                last_sweep: e.last_sweep.map(|(id, _)| id),
                failure: e.failure.as_ref().map(ToString::to_string),
            })
            .collect(),
    };
    if ctx.json() {
        output::json(&json)?;
    } else {
        output::line(format!(
            "backlog at {}: {} row(s) past their cutoff",
            json.now, json.overdue
        ))?;
        let mut t = output::table(&[
            "table",
            "category",
            "strategy",
            "overdue",
            "oldest overdue",
            "days past cutoff",
            "why",
            "held",
            "error",
        ]);
        for e in &json.entries {
            t.add_row(vec![
                e.entity.clone(),
                e.category.clone(),
                opt(e.strategy.as_deref()),
                e.overdue.to_string(),
                opt(e.oldest_overdue.as_deref()),
                e.overdue_days
                    .map_or_else(|| "-".to_owned(), |d| d.to_string()),
                opt(e.reason),
                e.held.to_string(),
                opt(e.failure.as_deref()),
            ]);
        }
        output::line(t.to_string())?;
    }
    match (args.max_overdue_days, json.max_overdue_days) {
        (Some(max), Some(worst)) if worst > f64::from(max) => Err(CliError::CheckFailed(format!(
            "a row has been past its cutoff for {worst} days, more than --max-overdue-days {max}"
        ))),
        _ => Ok(()),
    }
}
