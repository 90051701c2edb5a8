//! `events add|list|withdraw`: the library's events API (contract SL4).

use chrono::Utc;
use cohort::events::{Event, EventError, EventFilter, EventRequest};
use serde::Serialize;
use uuid::Uuid;

use super::Ctx;
use crate::cli::EventsCommand;
use crate::error::{CliError, CliResult};
use crate::output::{self, opt, time};

/// An event as JSON.
#[derive(Debug, Serialize)]
struct EventJson {
    event_id: Uuid,
    event_type: String,
    subject_key: String,
    tenant_id: Option<Uuid>,
    occurred_at: String,
    recorded_by: String,
    recorded_at: String,
    withdrawn_at: Option<String>,
    withdrawn_by: Option<String>,
    withdrawn_reason: Option<String>,
}

fn event_json(e: &Event) -> EventJson {
    EventJson {
        event_id: e.event_id,
        event_type: e.event_type.clone(),
        subject_key: e.subject_key.clone(),
        tenant_id: e.tenant,
        occurred_at: time(&e.occurred_at),
        recorded_by: e.recorded_by.clone(),
        recorded_at: time(&e.recorded_at),
        withdrawn_at: e.withdrawn_at.as_ref().map(time),
        withdrawn_by: e.withdrawn_by.clone(),
        withdrawn_reason: e.withdrawn_reason.clone(),
    }
}

fn print_events(events: &[EventJson]) -> CliResult {
    let mut t = output::table(&[
        "event",
        "type",
        "subject",
        "tenant",
        "occurred",
        "recorded by",
        "withdrawn",
    ]);
    for e in events {
        t.add_row(vec![
            e.event_id.to_string(),
            e.event_type.clone(),
            e.subject_key.clone(),
            e.tenant_id
                .map_or_else(|| "-".to_owned(), |t| t.to_string()),
            e.occurred_at.clone(),
            e.recorded_by.clone(),
            opt(e.withdrawn_at.as_deref()),
        ]);
    }
    output::line(t.to_string())
}

/// A refused request in the command's words: its own mistakes are usage
/// errors (exit 2), the event's state a refusal (exit 1).
fn spoken(e: cohort::Error) -> CliError {
    let cohort::Error::Event(event) = &e else {
        return e.into();
    };
    let text = match event {
        EventError::UndeclaredType { .. } => format!(
            "{event}; a rule counts from an event with after_event = \"<type>\" in [rules.<category>]"
        ),
        other => other.to_string(),
    };
    match event {
        EventError::NotFound { .. } | EventError::AlreadyWithdrawn { .. } => {
            CliError::Refused(text)
        }
        _ => CliError::Usage(text),
    }
}

fn one(ctx: &Ctx, e: &Event, said: &str) -> CliResult {
    if ctx.json() {
        return output::json(&event_json(e));
    }
    output::line(format!("{said} event {}", e.event_id))?;
    print_events(&[event_json(e)])
}

/// `events ...`.
pub(crate) async fn run(ctx: &Ctx, cmd: &EventsCommand) -> CliResult {
    let model = ctx.model()?;
    let pool = ctx.pool().await?;
    let cohort = ctx.cohort(&pool, &model, None).await?;
    let events = cohort.events();
    match cmd {
        EventsCommand::Add(a) => {
            let at = a.at.map_or_else(Utc::now, |t| t.with_timezone(&Utc));
            let mut request = EventRequest::new(&a.event_type, &a.subject, at, &a.by);
            if let Some(t) = a.tenant {
                request = request.tenant(t);
            }
            let e = events.record(request).await.map_err(spoken)?;
            one(ctx, &e, "recorded")
        }
        EventsCommand::List(a) => {
            let mut filter = EventFilter::new().limit(a.limit);
            if let Some(t) = &a.event_type {
                filter = filter.event_type(t.clone());
            }
            if let Some(s) = &a.subject {
                filter = filter.subject_key(s.clone());
            }
            if let Some(t) = a.tenant {
                filter = filter.tenant(t);
            }
            if a.all {
                filter = filter.with_withdrawn();
            }
            let list: Vec<EventJson> = events
                .list(&filter)
                .await
                .map_err(spoken)?
                .iter()
                .map(event_json)
                .collect();
            if ctx.json() {
                output::json(&list)
            } else if list.is_empty() {
                output::line("no event")
            } else {
                print_events(&list)
            }
        }
        EventsCommand::Withdraw(a) => {
            let e = events
                .withdraw(a.event_id, &a.by, &a.reason)
                .await
                .map_err(spoken)?;
            one(ctx, &e, "withdrew")
        }
    }
}
