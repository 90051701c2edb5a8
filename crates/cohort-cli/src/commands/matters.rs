//! `matters add|list|show|extend|release`: the library's matters API.

use chrono::Utc;
use cohort::holds::{Matter, MatterReport, MatterRequest, MatterScope};
use serde::Serialize;
use uuid::Uuid;

use super::holds::{entity_id, spoken};
use super::{Ctx, names};
use crate::cli::MattersCommand;
use crate::error::{CliError, CliResult};
use crate::model::Model;
use crate::output::{self, opt, time};

/// A matter as JSON.
#[derive(Debug, Serialize)]
struct MatterJson {
    matter_id: Uuid,
    /// `subject` or `table`.
    scope: &'static str,
    /// The data subject (subject matters).
    subject: Option<String>,
    /// The tables it covers, by the model's names (null: every table of
    /// the tenant).
    entities: Option<Vec<String>>,
    tenant_id: Option<Uuid>,
    /// A table matter's anchor window.
    anchor_from: Option<String>,
    anchor_to: Option<String>,
    reason: String,
    owner: String,
    created_at: String,
    expires_at: Option<String>,
    released_at: Option<String>,
    /// Whether it protects now.
    active: bool,
}

fn matter_json(m: &Matter, model: &Model) -> MatterJson {
    let names = names(model);
    let name = |id: &Uuid| names.get(id).cloned().unwrap_or_else(|| id.to_string());
    let (scope, subject, entities, from, to) = match &m.scope {
        MatterScope::Subject {
            subject,
            entity_ids,
        } => (
            "subject",
            Some(subject.clone()),
            entity_ids
                .as_ref()
                .map(|ids| ids.iter().map(name).collect()),
            None,
            None,
        ),
        MatterScope::Type {
            entity_id,
            anchor_from,
            anchor_to,
        } => (
            "table",
            None,
            Some(vec![name(entity_id)]),
            anchor_from.as_ref().map(time),
            anchor_to.as_ref().map(time),
        ),
        _ => ("other", None, None, None, None),
    };
    MatterJson {
        matter_id: m.matter_id,
        scope,
        subject,
        entities,
        tenant_id: m.tenant_id,
        anchor_from: from,
        anchor_to: to,
        reason: m.reason.clone(),
        owner: m.owner.clone(),
        created_at: time(&m.created_at),
        expires_at: m.expires_at.as_ref().map(time),
        released_at: m.released_at.as_ref().map(time),
        active: m.is_active_at(Utc::now()),
    }
}

/// What a matter covers, in words.
fn covers(m: &MatterJson) -> String {
    let tables = m
        .entities
        .as_ref()
        .map_or_else(|| "every table".to_owned(), |e| e.join(", "));
    match m.scope {
        "subject" => format!(
            "subject {} in {tables}",
            m.subject.as_deref().unwrap_or_default()
        ),
        _ => match (&m.anchor_from, &m.anchor_to) {
            (None, None) => format!("all of {tables}"),
            (f, t) => format!(
                "{tables}, anchors {} to {}",
                f.as_deref().unwrap_or("-"),
                t.as_deref().unwrap_or("-")
            ),
        },
    }
}

fn print_matters(matters: &[MatterJson]) -> CliResult {
    let mut t = output::table(&[
        "matter", "covers", "tenant", "owner", "reason", "created", "expires", "released",
    ]);
    for m in matters {
        t.add_row(vec![
            m.matter_id.to_string(),
            covers(m),
            m.tenant_id
                .map_or_else(|| "-".to_owned(), |t| t.to_string()),
            m.owner.clone(),
            m.reason.clone(),
            m.created_at.clone(),
            opt(m.expires_at.as_deref()),
            opt(m.released_at.as_deref()),
        ]);
    }
    output::line(t.to_string())
}

/// `matters show` as JSON.
#[derive(Debug, Serialize)]
struct ReportJson {
    matter: MatterJson,
    tables: Vec<TableJson>,
}

#[derive(Debug, Serialize)]
struct TableJson {
    entity: String,
    protected_rows: u64,
    note: Option<String>,
}

fn report_json(r: &MatterReport, model: &Model) -> ReportJson {
    let names = names(model);
    ReportJson {
        matter: matter_json(&r.matter, model),
        tables: r
            .types
            .iter()
            .map(|t| TableJson {
                entity: names
                    .get(&t.entity_id)
                    .cloned()
                    .unwrap_or_else(|| t.entity_type.clone()),
                protected_rows: t.protected_rows,
                note: t.note.clone(),
            })
            .collect(),
    }
}

/// `matters ...`.
pub(crate) async fn run(ctx: &Ctx, cmd: &MattersCommand) -> CliResult {
    let model = ctx.model()?;
    let pool = ctx.pool().await?;
    let cohort = ctx.cohort(&pool, &model, None).await?;
    let mut conn = pool.acquire().await?;
    match cmd {
        MattersCommand::Add(a) => {
            let mut request = match &a.subject {
                Some(subject) => {
                    let mut r = MatterRequest::subject(
                        subject.clone(),
                        a.tenant,
                        a.reason.clone(),
                        a.owner.clone(),
                    );
                    if !a.entities.is_empty() {
                        let ids = a
                            .entities
                            .iter()
                            .map(|n| entity_id(&model, n))
                            .collect::<CliResult<Vec<_>>>()?;
                        r = r.entities(ids);
                    }
                    r
                }
                None => {
                    let [name] = a.entities.as_slice() else {
                        return Err(CliError::Usage(
                            "a matter needs --subject, or exactly one --entity (the table it covers)"
                                .to_owned(),
                        ));
                    };
                    MatterRequest::retained_type(
                        entity_id(&model, name)?,
                        a.tenant,
                        a.reason.clone(),
                        a.owner.clone(),
                    )
                    .anchor_window(a.from, a.to)
                }
            };
            if let Some(expires) = a.expires {
                request = request.expires_at(expires);
            }
            if let Some(id) = a.id {
                request = request.matter_id(id);
            }
            let matter = cohort
                .matters()
                .create(&mut conn, request)
                .await
                .map_err(|e| spoken(e, &model))?;
            let json = matter_json(&matter, &model);
            let said = format!(
                "matter {} created: it protects {}, rows written later included",
                matter.matter_id,
                covers(&json)
            );
            one_matter(ctx, json, &said)
        }
        MattersCommand::List(a) => {
            let now = Utc::now();
            let all = cohort.matters().list(&mut conn).await?;
            let json: Vec<MatterJson> = all
                .iter()
                .filter(|m| a.all || m.is_active_at(now))
                .map(|m| matter_json(m, &model))
                .collect();
            if ctx.json() {
                output::json(&json)
            } else {
                if a.all {
                    output::line(format!("{} matter(s), active or not", json.len()))?;
                } else {
                    output::line(format!("{} active matter(s) at {}", json.len(), time(&now)))?;
                }
                print_matters(&json)
            }
        }
        MattersCommand::Show(a) => {
            let report = cohort
                .matters()
                .report(&mut conn, a.matter_id)
                .await
                .map_err(|e| spoken(e, &model))?;
            let json = report_json(&report, &model);
            if ctx.json() {
                output::json(&json)
            } else {
                print_matters(std::slice::from_ref(&json.matter))?;
                let mut t = output::table(&["table", "rows protected now", "note"]);
                for x in &json.tables {
                    t.add_row(vec![
                        x.entity.clone(),
                        x.protected_rows.to_string(),
                        x.note.clone().unwrap_or_default(),
                    ]);
                }
                output::line(t.to_string())
            }
        }
        MattersCommand::Extend(a) => {
            let matter = cohort
                .matters()
                .extend(&mut conn, a.matter_id, a.expires)
                .await
                .map_err(|e| spoken(e, &model))?;
            let json = matter_json(&matter, &model);
            let said = format!(
                "matter {} now protects until {}",
                matter.matter_id,
                json.expires_at.as_deref().unwrap_or("released")
            );
            one_matter(ctx, json, &said)
        }
        MattersCommand::Release(a) => {
            let matter = cohort
                .matters()
                .release(&mut conn, a.matter_id)
                .await
                .map_err(|e| spoken(e, &model))?;
            let json = matter_json(&matter, &model);
            let said = format!(
                "matter {} released: what it covered is no longer protected by it",
                matter.matter_id
            );
            one_matter(ctx, json, &said)
        }
    }
}

/// The end of `add`, `extend` and `release`: the matter as JSON, or what
/// happened in a sentence and the matter as a table.
fn one_matter(ctx: &Ctx, json: MatterJson, said: &str) -> CliResult {
    if ctx.json() {
        output::json(&json)
    } else {
        output::line(said)?;
        print_matters(&[json])
    }
}
