//! `holds add|list|remove|prune`: the library's holds API.

use chrono::Utc;
use cohort::holds::{Hold, HoldError, HoldFilter, HoldRequest};
use serde::Serialize;
use uuid::Uuid;

use super::{Ctx, names};
use crate::cli::HoldsCommand;
use crate::error::{CliError, CliResult};
use crate::model::Model;
use crate::output::{self, opt, opt_time, time};

/// A hold as JSON.
#[derive(Debug, Serialize)]
pub(crate) struct HoldJson {
    /// The hold's id.
    pub(crate) hold_id: Uuid,
    /// The model's name for the held row's table.
    pub(crate) entity: String,
    /// Its retained-entity id.
    pub(crate) entity_id: Uuid,
    /// The row's canonical record id.
    pub(crate) record_id: String,
    /// The row's tenant (null for tenantless tables).
    pub(crate) tenant_id: Option<Uuid>,
    /// Why the row is held.
    pub(crate) reason: String,
    /// When the hold started protecting.
    pub(crate) created_at: String,
    /// When it stops protecting (null: until removed).
    pub(crate) expires_at: Option<String>,
    /// When it was removed.
    pub(crate) removed_at: Option<String>,
}

pub(crate) fn hold_json(h: &Hold, model: &Model) -> HoldJson {
    HoldJson {
        hold_id: h.hold_id,
        entity: names(model)
            .get(&h.entity_id)
            .cloned()
            .unwrap_or_else(|| h.entity_id.to_string()),
        entity_id: h.entity_id,
        record_id: h.record_id.clone(),
        tenant_id: h.tenant_id,
        reason: h.reason.clone(),
        created_at: time(&h.created_at),
        expires_at: h.expires_at.as_ref().map(time),
        removed_at: h.removed_at.as_ref().map(time),
    }
}

/// Holds as a table.
pub(crate) fn print_holds(holds: &[HoldJson]) -> CliResult {
    let mut t = output::table(&[
        "hold", "table", "record", "tenant", "reason", "created", "expires", "removed",
    ]);
    for h in holds {
        t.add_row(vec![
            h.hold_id.to_string(),
            h.entity.clone(),
            h.record_id.clone(),
            h.tenant_id
                .map_or_else(|| "-".to_owned(), |t| t.to_string()),
            h.reason.clone(),
            h.created_at.clone(),
            opt(h.expires_at.as_deref()),
            opt(h.removed_at.as_deref()),
        ]);
    }
    output::line(t.to_string())
}

pub(super) fn entity_id(model: &Model, name: &str) -> CliResult<Uuid> {
    model.entity(name).map(|e| e.id).ok_or_else(|| {
        let known: Vec<&str> = model.entities.iter().map(|e| e.name.as_str()).collect();
        CliError::Usage(format!(
            "no retained table named {name:?} in the model (known: {})",
            known.join(", ")
        ))
    })
}

/// A refused hold request in the model file's words: the table by its
/// name rather than its retained-entity id, no tenant for a tenantless
/// table, and the request's own mistakes as usage errors (exit 2).
pub(super) fn spoken(e: cohort::Error, model: &Model) -> CliError {
    let cohort::Error::Hold(hold) = &e else {
        return e.into();
    };
    let mut text = hold.to_string();
    for entity in &model.entities {
        let id = entity.id.to_string();
        if text.contains(&id) {
            text = text
                .replace(
                    &format!("retained type {id}"),
                    &format!("table {}", entity.name),
                )
                .replace(&id, &entity.name);
            if entity.tenantless {
                text = text.replace(" in this tenant", "");
            }
        }
    }
    match hold {
        HoldError::NoSuchRow { .. }
        | HoldError::DuplicateHoldId { .. }
        | HoldError::NoSuchHold { .. }
        | HoldError::DuplicateMatterId { .. }
        | HoldError::NoSuchMatter { .. }
        | HoldError::MatterReleased { .. }
        | HoldError::ExpiryNotExtended { .. } => CliError::Refused(text),
        _ => CliError::Usage(text),
    }
}

/// `holds ...`.
pub(crate) async fn run(ctx: &Ctx, cmd: &HoldsCommand) -> CliResult {
    let model = ctx.model()?;
    let pool = ctx.pool().await?;
    let cohort = ctx.cohort(&pool, &model, None).await?;
    let mut conn = pool.acquire().await?;
    match cmd {
        HoldsCommand::Add(a) => {
            let mut request = HoldRequest::new(
                entity_id(&model, &a.entity)?,
                a.record.clone(),
                a.tenant,
                a.reason.clone(),
                Utc::now(),
            );
            if let Some(expires) = a.expires {
                request = request.expires_at(expires);
            }
            if let Some(id) = a.hold_id {
                request = request.hold_id(id);
            }
            let entity = entity_id(&model, &a.entity)?;
            let already = cohort
                .holds()
                .is_held(
                    &mut conn,
                    &cohort::holds::Target::new(entity, a.record.clone(), a.tenant),
                    Utc::now(),
                )
                .await
                .map_err(|e| spoken(e, &model))?;
            let hold = cohort
                .holds()
                .create(&mut conn, request)
                .await
                .map_err(|e| spoken(e, &model))?;
            if already {
                eprintln!(
                    "note: another active hold already covers this row; this one adds its own reason and expiry \
                     (`cohort holds list --entity {}` shows them)",
                    a.entity
                );
            }
            let json = hold_json(&hold, &model);
            if ctx.json() {
                output::json(&json)
            } else {
                output::line(format!("hold {} created", hold.hold_id))?;
                print_holds(&[json])
            }
        }
        HoldsCommand::List(a) => {
            let mut filter = HoldFilter::all();
            if let Some(name) = &a.entity {
                filter = filter.entity(entity_id(&model, name)?);
            }
            if let Some(t) = a.tenant {
                filter = filter.tenant(t);
            }
            let as_of = a.as_of.map_or_else(Utc::now, |t| t.with_timezone(&Utc));
            let holds = if a.all {
                cohort.holds().list(&mut conn, &filter).await?
            } else {
                cohort
                    .holds()
                    .list_active(&mut conn, as_of, &filter)
                    .await?
            };
            let json: Vec<HoldJson> = holds.iter().map(|h| hold_json(h, &model)).collect();
            if ctx.json() {
                output::json(&json)
            } else {
                if a.all {
                    output::line(format!("{} hold(s), active or not", json.len()))?;
                } else {
                    output::line(format!("{} active hold(s) at {}", json.len(), time(&as_of)))?;
                }
                print_holds(&json)
            }
        }
        HoldsCommand::Remove(a) => {
            let at = a.at.map_or_else(Utc::now, |t| t.with_timezone(&Utc));
            // PostgreSQL's precision, so "earlier" below compares like with like.
            let at = chrono::DurationRound::duration_trunc(at, chrono::TimeDelta::microseconds(1))
                .unwrap_or(at);
            let hold = cohort
                .holds()
                .remove(&mut conn, a.hold_id, at)
                .await
                .map_err(|e| spoken(e, &model))?;
            let json = hold_json(&hold, &model);
            if ctx.json() {
                output::json(&json)
            } else {
                // A removal never pushes an earlier one back.
                let earlier = hold.removed_at.is_some_and(|r| r < at);
                if earlier {
                    output::line(format!(
                        "hold {} was already removed: it stopped protecting at {}; nothing changed",
                        hold.hold_id,
                        opt_time(hold.removed_at.as_ref())
                    ))?;
                } else {
                    output::line(format!(
                        "hold {} removed: it stops protecting at {}",
                        hold.hold_id,
                        opt_time(hold.removed_at.as_ref())
                    ))?;
                }
                print_holds(&[json])
            }
        }
        HoldsCommand::Prune => {
            let pruned = cohort.holds().prune(&mut conn).await?;
            let retention = ctx.settings.inactive_hold_retention;
            if ctx.json() {
                #[derive(Serialize)]
                struct Out {
                    pruned: u64,
                    inactive_hold_retention_seconds: Option<f64>,
                }
                output::json(&Out {
                    pruned,
                    inactive_hold_retention_seconds: retention,
                })
            } else if retention.is_none() {
                output::line(
                    "pruned 0 hold(s): inactive_hold_retention is not set, so holds are kept forever \
                     (set it in cohort.toml or COHORT_INACTIVE_HOLD_RETENTION, in seconds)",
                )
            } else {
                output::line(format!(
                    "pruned {pruned} hold(s) inactive for longer than the retention"
                ))
            }
        }
    }
}
