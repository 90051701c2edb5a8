//! Live progress of a sweep or an erasure, from the ledger's own events.
//!
//! An [`AuditObserver`] hears each committed batch (`EntityProgress`): on a
//! terminal it draws one line per table with rows done and rows per second
//! (indicatif, on stderr); otherwise it writes plain log lines on stderr, at
//! most one per table per second plus one when the table is done.

use std::collections::HashMap;
use std::io::IsTerminal;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use cohort::BoxFuture;
use cohort::ledger::{AuditEvent, AuditObserver};
use cohort::policy::ProviderError;
use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};
use uuid::Uuid;

/// How often a plain log line is written per table while it progresses.
const LOG_EVERY: Duration = Duration::from_secs(1);

/// The progress display; clone it into the builder as an observer.
#[derive(Clone)]
pub(crate) struct Progress {
    state: Arc<Mutex<State>>,
}

struct Entity {
    name: String,
    bar: Option<ProgressBar>,
    started: Instant,
    last_log: Option<Instant>,
    total: u64,
}

struct State {
    multi: Option<MultiProgress>,
    names: HashMap<Uuid, String>,
    entities: HashMap<Uuid, Entity>,
    /// When the previous table finished (or the run started): the next
    /// table's clock starts there, so its first rate is meaningful.
    mark: Instant,
    /// Whether the run is a dry run: its rows would change, they do not.
    dry_run: bool,
}

impl Progress {
    /// A display for runs over the tables named in `names` (id → name).
    pub(crate) fn new(names: HashMap<Uuid, String>) -> Progress {
        let multi = std::io::stderr()
            .is_terminal()
            .then(|| MultiProgress::with_draw_target(ProgressDrawTarget::stderr()));
        Progress {
            state: Arc::new(Mutex::new(State {
                multi,
                names,
                entities: HashMap::new(),
                mark: Instant::now(),
                dry_run: false,
            })),
        }
    }

    /// Writes a line on stderr without tearing the bars.
    pub(crate) fn note(&self, text: &str) {
        let multi = self.state.lock().ok().and_then(|s| s.multi.clone());
        match multi {
            Some(m) => {
                let _ = m.println(text);
            }
            None => eprintln!("{text}"),
        }
    }

    /// Removes the bars (before the result is printed).
    pub(crate) fn finish(&self) {
        if let Ok(mut s) = self.state.lock() {
            for e in s.entities.values_mut() {
                if let Some(bar) = e.bar.take() {
                    bar.finish();
                }
            }
            if let Some(m) = &s.multi {
                let _ = m.clear();
            }
        }
    }

    fn handle(&self, event: &AuditEvent) {
        let Ok(mut s) = self.state.lock() else {
            return;
        };
        let s = &mut *s;
        match event {
            AuditEvent::Started {
                run_id, dry_run, ..
            } => {
                s.mark = Instant::now();
                s.entities.clear();
                s.dry_run = *dry_run;
                let dry = if *dry_run {
                    " (dry run: nothing changes)"
                } else {
                    ""
                };
                log(s, &format!("run {run_id} started{dry}"));
            }
            AuditEvent::EntityProgress {
                entity_id,
                total_affected,
                ..
            } => {
                let name = s
                    .names
                    .get(entity_id)
                    .cloned()
                    .unwrap_or_else(|| entity_id.to_string());
                let multi = s.multi.clone();
                let mark = s.mark;
                let verb = changed(s.dry_run);
                let e = s.entities.entry(*entity_id).or_insert_with(|| Entity {
                    bar: multi.map(|m| {
                        let bar = m.add(ProgressBar::new_spinner());
                        bar.set_style(
                            ProgressStyle::with_template(&format!(
                                "{{spinner}} {{prefix:<24}} {{pos:>10}} {verb}  {{msg:>14}}  {{elapsed}}"
                            ))
                            .unwrap_or_else(|_| ProgressStyle::default_spinner()),
                        );
                        bar.set_prefix(name.clone());
                        bar.enable_steady_tick(Duration::from_millis(120));
                        bar
                    }),
                    name,
                    started: mark,
                    last_log: None,
                    total: 0,
                });
                e.total = *total_affected;
                if let Some(bar) = &e.bar {
                    bar.set_position(*total_affected);
                    bar.set_message(format!("{} rows/s", rate(e.total, e.started.elapsed())));
                } else if e.last_log.is_none_or(|t| t.elapsed() >= LOG_EVERY) {
                    e.last_log = Some(Instant::now());
                    let rate = rate(e.total, e.started.elapsed());
                    eprintln!(
                        "progress: {}: {} {} ({rate} rows/s)",
                        e.name,
                        e.total,
                        changed(s.dry_run)
                    );
                }
            }
            AuditEvent::EntitySummary { summary, .. } => {
                let name = s
                    .names
                    .get(&summary.entity_id)
                    .cloned()
                    .unwrap_or_else(|| summary.entity_type.to_owned());
                let elapsed = s.mark.elapsed();
                s.mark = Instant::now();
                if let Some(bar) = s
                    .entities
                    .get_mut(&summary.entity_id)
                    .and_then(|e| e.bar.take())
                {
                    bar.finish_and_clear();
                }
                let strategy = summary.strategy.map_or("no rule", |s| s.as_str());
                let rate = rate(summary.affected, elapsed);
                let failed = if summary.error.is_some() {
                    ", FAILED"
                } else {
                    ""
                };
                let legal = if summary.legal_minimum > 0 {
                    format!(", {} kept by the legal minimum", summary.legal_minimum)
                } else {
                    String::new()
                };
                let verb = changed(s.dry_run);
                log(
                    s,
                    &format!(
                        "done: {name}: {} {verb} ({strategy}), {} held{legal}, {} skipped, {rate} rows/s{failed}",
                        summary.affected, summary.held, summary.skipped
                    ),
                );
            }
            AuditEvent::Settled { run_id, status, .. } => {
                log(s, &format!("run {run_id} settled: {status}"));
            }
            _ => {}
        }
    }
}

fn log(s: &State, text: &str) {
    match &s.multi {
        Some(m) => {
            let _ = m.println(text);
        }
        None => eprintln!("{text}"),
    }
}

fn rate(rows: u64, elapsed: Duration) -> u64 {
    let secs = elapsed.as_secs_f64();
    if secs <= 0.0 {
        return rows;
    }
    (rows as f64 / secs).round() as u64
}

impl AuditObserver for Progress {
    fn on_event<'a>(&'a self, event: &'a AuditEvent) -> BoxFuture<'a, Result<(), ProviderError>> {
        self.handle(event);
        Box::pin(async { Ok(()) })
    }
}

/// How a row count reads: a dry run's rows would change; they do not.
fn changed(dry_run: bool) -> &'static str {
    if dry_run {
        "rows would change"
    } else {
        "rows changed"
    }
}
