//! `disposition list|show|approve|reject|extend`: disposition review
//! (contracts DR1-DR3) through the library's API, tables named as the model
//! file names them.

use cohort::disposition::{
    BatchStatus, Decision, DispositionBatch, DispositionError, Dispositions,
};
use serde::Serialize;
use uuid::Uuid;

use super::{Ctx, names};
use crate::cli::DispositionCommand;
use crate::error::{CliError, CliResult};
use crate::model::Model;
use crate::output::{self, opt, opt_time, short_id, short_time, time};

/// A batch as JSON (`disposition list`, and in `show`).
#[derive(Debug, Serialize)]
struct BatchJson {
    batch_id: Uuid,
    /// The table, as the model file names it.
    entity: String,
    /// Null for a tenantless table.
    tenant_id: Option<Uuid>,
    /// The rule's stage, the first being 1.
    stage: u32,
    strategy: String,
    status: String,
    rows: u64,
    approvers_required: u32,
    approvals: Vec<String>,
    frozen_at: String,
    frozen_by_run: Uuid,
    auto_approve_at: Option<String>,
    keep_until: Option<String>,
    rule_hash: String,
    /// The rule's canonical content, exactly as hashed (`rule_hash` is the
    /// SHA-256 of this text).
    rule_content: String,
    /// The same, parsed.
    rule: serde_json::Value,
    carried_out_by_run: Option<Uuid>,
    changed: Option<u64>,
    held: Option<u64>,
    left: Option<u64>,
    ineligible: Option<u64>,
}

fn batch_json(b: &DispositionBatch, model: &Model) -> BatchJson {
    let names = names(model);
    BatchJson {
        batch_id: b.batch_id,
        entity: names
            .get(&b.entity_id)
            .cloned()
            .unwrap_or_else(|| b.entity_type.clone()),
        tenant_id: Some(b.tenant_id).filter(|t| !t.is_nil()),
        stage: b.stage + 1,
        strategy: b.strategy.clone(),
        status: b.status.to_string(),
        rows: b.rows,
        approvers_required: b.approvers_required,
        approvals: b.approvals.clone(),
        frozen_at: time(&b.frozen_at),
        frozen_by_run: b.run_id,
        auto_approve_at: b.auto_approve_at.as_ref().map(time),
        keep_until: b.keep_until.as_ref().map(time),
        rule_hash: b.rule_hash.clone(),
        rule_content: b.rule_content.clone(),
        rule: serde_json::from_str(&b.rule_content)
            .unwrap_or_else(|_| serde_json::Value::String(b.rule_content.clone())),
        carried_out_by_run: b.carried_run_id,
        changed: b.changed,
        held: b.held,
        left: b.left,
        ineligible: b.ineligible,
    }
}

/// A decision as JSON (`disposition show`).
#[derive(Debug, Serialize)]
struct DecisionJson {
    seq: i64,
    decision: String,
    decided_by: String,
    automatic: bool,
    decided_at: String,
    reason: Option<String>,
    keep_until: Option<String>,
    run_id: Option<Uuid>,
    rows: Option<u64>,
    changed: Option<u64>,
    held: Option<u64>,
    left: Option<u64>,
    ineligible: Option<u64>,
    chain_hash: String,
}

fn decision_json(d: &Decision) -> DecisionJson {
    DecisionJson {
        seq: d.seq,
        decision: d.kind.to_string(),
        decided_by: d.decided_by.clone(),
        automatic: d.automatic,
        decided_at: time(&d.decided_at),
        reason: d.reason.clone(),
        keep_until: d.keep_until.as_ref().map(time),
        run_id: d.run_id,
        rows: d.rows,
        changed: d.changed,
        held: d.held,
        left: d.left,
        ineligible: d.ineligible,
        chain_hash: d.chain_hash.clone(),
    }
}

/// `disposition show` as JSON.
#[derive(Debug, Serialize)]
struct ShowJson {
    batch: BatchJson,
    decisions: Vec<DecisionJson>,
    /// Up to `--rows` of its frozen record ids, in text order.
    record_ids: Vec<String>,
}

fn approvals(b: &BatchJson) -> String {
    format!("{}/{}", b.approvals.len().min(2), b.approvers_required)
}

fn print_batches(batches: &[BatchJson]) -> CliResult {
    let mut t = output::table(&[
        "batch",
        "table",
        "tenant",
        "stage",
        "rows",
        "status",
        "approved",
        "frozen",
        "auto-approve",
    ]);
    for b in batches {
        t.add_row(vec![
            short_id(&b.batch_id),
            b.entity.clone(),
            b.tenant_id.map_or_else(|| "-".to_owned(), |t| short_id(&t)),
            format!("{} ({})", b.stage, b.strategy),
            b.rows.to_string(),
            b.status.clone(),
            approvals(b),
            short_time(&b.frozen_at),
            b.auto_approve_at
                .as_deref()
                .map_or_else(|| "-".to_owned(), short_time),
        ]);
    }
    output::line(t.to_string())
}

/// A refused decision in the command's words: the request's own mistakes
/// are usage errors (exit 2), the batch's state a refusal (exit 1).
fn spoken(e: cohort::Error) -> CliError {
    let cohort::Error::Disposition(d) = &e else {
        return e.into();
    };
    let text = d.to_string();
    match d {
        DispositionError::EmptyDecider
        | DispositionError::InvalidDecider
        | DispositionError::InvalidReason
        | DispositionError::ExtensionInPast { .. } => CliError::Usage(text),
        _ => CliError::Refused(text),
    }
}

/// A batch by its id or the start of it (what `list` shows).
async fn batch_id(
    d: &Dispositions<'_>,
    conn: &mut sqlx::PgConnection,
    text: &str,
) -> CliResult<Uuid> {
    if let Ok(id) = Uuid::parse_str(text) {
        return Ok(id);
    }
    let prefix = text.to_ascii_lowercase().replace('-', "");
    if prefix.len() < 4 || !prefix.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(CliError::Usage(format!(
            "{text:?} is not a batch id: give the id, or at least its first 4 hex digits"
        )));
    }
    let matching: Vec<Uuid> = d
        .list(conn, None)
        .await?
        .into_iter()
        .map(|b| b.batch_id)
        .filter(|id| id.simple().to_string().starts_with(&prefix))
        .collect();
    match matching.as_slice() {
        [one] => Ok(*one),
        [] => Err(CliError::Refused(format!("no disposition batch {text}"))),
        _ => Err(CliError::Usage(format!(
            "{text} is the start of {} batch ids; give more of it",
            matching.len()
        ))),
    }
}

/// The end of `approve`, `reject` and `extend`: the batch as JSON, or what
/// happened in a sentence and the batch as a table.
fn one_batch(ctx: &Ctx, json: BatchJson, said: &str) -> CliResult {
    if ctx.json() {
        output::json(&json)
    } else {
        output::line(said)?;
        print_batches(&[json])
    }
}

/// `disposition ...`.
pub(crate) async fn run(ctx: &Ctx, cmd: &DispositionCommand) -> CliResult {
    let model = ctx.model()?;
    let pool = ctx.pool().await?;
    let cohort = ctx.cohort(&pool, &model, None).await?;
    let mut conn = pool.acquire().await?;
    let d = cohort.dispositions();
    match cmd {
        DispositionCommand::List(a) => {
            let all = d.list(&mut conn, None).await?;
            let open = [
                BatchStatus::Pending,
                BatchStatus::Approved,
                BatchStatus::CarryingOut,
            ];
            let json: Vec<BatchJson> = all
                .iter()
                .filter(|b| a.all || open.contains(&b.status))
                .map(|b| batch_json(b, &model))
                .collect();
            if ctx.json() {
                output::json(&json)
            } else {
                if a.all {
                    output::line(format!("{} disposition batch(es)", json.len()))?;
                } else {
                    output::line(format!(
                        "{} disposition batch(es) waiting for a decision or a sweep",
                        json.len()
                    ))?;
                }
                print_batches(&json)
            }
        }
        DispositionCommand::Show(a) => {
            let id = batch_id(&d, &mut conn, &a.batch).await?;
            let Some(batch) = d.get(&mut conn, id).await? else {
                return Err(spoken(
                    DispositionError::NoSuchBatch { batch_id: id }.into(),
                ));
            };
            let decisions = d.decisions(&mut conn, id).await?;
            let record_ids = d.record_ids(&mut conn, id, None, a.rows).await?;
            let json = ShowJson {
                batch: batch_json(&batch, &model),
                decisions: decisions.iter().map(decision_json).collect(),
                record_ids,
            };
            if ctx.json() {
                return output::json(&json);
            }
            let b = &json.batch;
            output::line(format!(
                "batch {} of {}: {} row(s) frozen at {} for stage {} ({}), {}",
                b.batch_id, b.entity, b.rows, b.frozen_at, b.stage, b.strategy, b.status
            ))?;
            output::line(format!("rule hash {}", b.rule_hash))?;
            let mut t = output::table(&["#", "decision", "by", "when", "details"]);
            for x in &json.decisions {
                let details = match x.decision.as_str() {
                    "Frozen" => format!("{} row(s)", x.rows.unwrap_or(0)),
                    "Rejected" => format!(
                        "{}; kept until {}",
                        opt(x.reason.as_deref()),
                        opt(x.keep_until.as_deref())
                    ),
                    "Extended" => format!("kept until {}", opt(x.keep_until.as_deref())),
                    "CarriedOut" => format!(
                        "changed {}, held {}, locked {}, no longer eligible {}",
                        x.changed.unwrap_or(0),
                        x.held.unwrap_or(0),
                        x.left.unwrap_or(0),
                        x.ineligible.unwrap_or(0)
                    ),
                    "Voided" => opt(x.reason.as_deref()),
                    "Approved" if x.automatic => "the auto-approval time came".to_owned(),
                    _ => String::new(),
                };
                t.add_row(vec![
                    x.seq.to_string(),
                    x.decision.clone(),
                    x.decided_by.clone(),
                    short_time(&x.decided_at),
                    details,
                ]);
            }
            output::line(t.to_string())?;
            if !json.record_ids.is_empty() {
                output::line(format!(
                    "record ids ({} of {}): {}",
                    json.record_ids.len(),
                    b.rows,
                    json.record_ids.join(", ")
                ))?;
            }
            Ok(())
        }
        DispositionCommand::Approve(a) => {
            let id = batch_id(&d, &mut conn, &a.batch).await?;
            let batch = d.approve(&mut conn, id, &a.by).await.map_err(spoken)?;
            let json = batch_json(&batch, &model);
            let said = if batch.status == BatchStatus::Approved {
                format!(
                    "batch {} approved by {}: the next sweep of {} changes its {} row(s) that are still eligible and not held",
                    batch.batch_id, a.by, json.entity, batch.rows
                )
            } else {
                format!(
                    "batch {} approved by {}: {} of {} approvers; it waits for another",
                    batch.batch_id,
                    a.by,
                    batch.approvals.len(),
                    batch.approvers_required
                )
            };
            one_batch(ctx, json, &said)
        }
        DispositionCommand::Reject(a) => {
            let id = batch_id(&d, &mut conn, &a.batch).await?;
            let batch = d
                .reject(&mut conn, id, &a.by, &a.reason)
                .await
                .map_err(spoken)?;
            let json = batch_json(&batch, &model);
            let said = format!(
                "batch {} rejected by {}: its {} row(s) are kept, and not offered again before {} unless the rule changes",
                batch.batch_id,
                a.by,
                batch.rows,
                opt_time(batch.keep_until.as_ref())
            );
            one_batch(ctx, json, &said)
        }
        DispositionCommand::Extend(a) => {
            let id = batch_id(&d, &mut conn, &a.batch).await?;
            let batch = d
                .extend(&mut conn, id, &a.by, a.until)
                .await
                .map_err(spoken)?;
            let json = batch_json(&batch, &model);
            let said = format!(
                "batch {} extended by {}: its {} row(s) are kept until {}",
                batch.batch_id,
                a.by,
                batch.rows,
                opt_time(batch.keep_until.as_ref())
            );
            one_batch(ctx, json, &said)
        }
    }
}
