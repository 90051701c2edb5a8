//! Per-statement timings measured from the client (`--profile`).
//!
//! sqlx reports every statement it runs as a `tracing` event (target
//! `sqlx::query`) carrying its text and `elapsed_secs`, measured from the
//! moment the statement is sent until its last row is read: server time plus
//! one round trip. This layer sums them by kind of statement, so an
//! instrumented child can say where a sweep's time goes (fence and `BEGIN`,
//! range statement, `COMMIT`, ...). Cohort's own `tracing` events (for
//! example "a range met a locked row") are counted by message.
//!
//! Only installed with `--profile`: the measured runs have no subscriber, and
//! sqlx then skips the events.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Mutex;

use tracing::field::{Field, Visit};
use tracing::{Event, Subscriber};
use tracing_subscriber::layer::{Context, Layer};

/// Count and total seconds of one kind of statement (or one message).
#[derive(Debug, Clone, Default)]
pub(crate) struct Tally {
    /// How many.
    pub(crate) count: u64,
    /// Their summed elapsed time, in seconds.
    pub(crate) seconds: f64,
    /// The text of the first one (for `EXPLAIN`).
    pub(crate) sample: Option<String>,
}

/// Statement tallies by kind, and Cohort's own messages by text.
#[derive(Debug, Default)]
pub(crate) struct Profile {
    /// By kind of statement ([`classify`]).
    pub(crate) statements: BTreeMap<String, Tally>,
    /// Cohort's `tracing` events, by message.
    pub(crate) messages: BTreeMap<String, Tally>,
}

static PROFILE: Mutex<Option<Profile>> = Mutex::new(None);

/// Installs the layer as the process's subscriber and starts collecting.
pub(crate) fn install() {
    use tracing_subscriber::layer::SubscriberExt as _;
    use tracing_subscriber::util::SubscriberInitExt as _;
    if let Ok(mut p) = PROFILE.lock() {
        *p = Some(Profile::default());
    }
    let filter = tracing_subscriber::filter::Targets::new()
        .with_target("sqlx::query", tracing::Level::TRACE)
        .with_target("cohort", tracing::Level::TRACE);
    tracing_subscriber::registry()
        .with(StatementLayer.with_filter(filter))
        .init();
}

/// Forgets what was collected so far (e.g. the setup's statements).
pub(crate) fn reset() {
    if let Ok(mut p) = PROFILE.lock()
        && p.is_some()
    {
        *p = Some(Profile::default());
    }
}

/// What was collected since the last [`reset`], if profiling is on.
pub(crate) fn take() -> Option<Profile> {
    PROFILE.lock().ok().and_then(|mut p| p.take())
}

/// The kind of a statement, from its text.
pub(crate) fn classify(sql: &str) -> String {
    let s = sql.trim_start();
    let kind = if s.starts_with("BEGIN ISOLATION LEVEL READ COMMITTED") {
        "BEGIN + entity fence (one message)"
    } else if s.contains("WITH hi AS MATERIALIZED") {
        "range statement (upper key + mutation + progress)"
    } else if s.starts_with("COMMIT") {
        "COMMIT"
    } else if s.starts_with("ROLLBACK") {
        "ROLLBACK"
    } else if s.contains("FOR UPDATE OF t") {
        "locked path: select FOR UPDATE"
    } else if s.starts_with("WITH v AS") {
        "locked path: mutate by (tableoid, ctid)"
    } else if s.contains("count(*) FILTER") {
        "counts (eligible, held, NULL anchor)"
    } else if s.contains("set_config('plan_cache_mode'") {
        "counts: BEGIN settings"
    } else if s.starts_with("BEGIN") {
        "BEGIN (other)"
    } else {
        let short: String = s.split_whitespace().take(6).collect::<Vec<_>>().join(" ");
        return format!("other: {short}");
    };
    kind.to_owned()
}

struct StatementLayer;

#[derive(Default)]
struct Fields {
    summary: Option<String>,
    statement: Option<String>,
    elapsed: Option<f64>,
    message: Option<String>,
}

impl Visit for Fields {
    fn record_str(&mut self, field: &Field, value: &str) {
        match field.name() {
            "summary" => self.summary = Some(value.to_owned()),
            "db.statement" => self.statement = Some(value.to_owned()),
            "message" => self.message = Some(value.to_owned()),
            _ => {}
        }
    }

    fn record_f64(&mut self, field: &Field, value: f64) {
        if field.name() == "elapsed_secs" {
            self.elapsed = Some(value);
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        if field.name() == "message" {
            self.message = Some(format!("{value:?}"));
        }
    }
}

impl<S: Subscriber> Layer<S> for StatementLayer {
    fn on_event(&self, event: &Event<'_>, _ctx: Context<'_, S>) {
        let mut f = Fields::default();
        event.record(&mut f);
        let Ok(mut guard) = PROFILE.lock() else {
            return;
        };
        let Some(profile) = guard.as_mut() else {
            return;
        };
        if event.metadata().target() == "sqlx::query" {
            // sqlx puts the full text in `db.statement` only when it differs
            // from the four-word summary.
            let text = match (&f.statement, &f.summary) {
                (Some(s), _) if !s.trim().is_empty() => s.as_str(),
                (_, Some(s)) => s.as_str(),
                _ => "",
            };
            let t = profile.statements.entry(classify(text)).or_default();
            t.count += 1;
            t.seconds += f.elapsed.unwrap_or(0.0);
            if t.sample.is_none() {
                t.sample = Some(text.trim().to_owned());
            }
        } else if let Some(m) = f.message {
            profile.messages.entry(m).or_default().count += 1;
        }
    }
}
