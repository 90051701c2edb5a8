//! Rule providers and audit observers that panic before returning their
//! future (contract X21): only the provider's own type fails; the run
//! settles.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use crate::support::fixtures::{
    build_notes_and_contacts, contact_anonymised, contact_days_old, db_with_tables, fixed_now,
    ledger_summary, note_days_old, note_exists, preview_entry, readme_rules, run_status, scope_a,
    tenant_a,
};
use crate::support::models::*;
use crate::support::{TestRules, count};
use cohort::ledger::{AuditEvent, AuditObserver, FailureKind};
use cohort::policy::ProviderError;
use cohort::{Capabilities, Cohort, Options, ResolutionContext, Rule, RuleProvider, RunStatus};
use futures_util::future::BoxFuture;

/// Answers like `inner`, but panics synchronously (before building a future)
/// for `category`.
struct PanicsBeforeItsFuture {
    inner: TestRules,
    category: &'static str,
}

impl RuleProvider for PanicsBeforeItsFuture {
    fn capabilities(&self, category: &str) -> Option<Capabilities> {
        self.inner.capabilities(category)
    }

    fn resolve<'a>(
        &'a self,
        ctx: ResolutionContext<'a>,
    ) -> BoxFuture<'a, Result<Option<Rule>, ProviderError>> {
        if ctx.category == self.category {
            panic!("provider bug, before any future");
        }
        self.inner.resolve(ctx)
    }
}

// contract: X21, X5
#[tokio::test]
async fn a_provider_that_panics_synchronously_fails_only_its_own_entity() {
    let db = db_with_tables().await;
    let provider = PanicsBeforeItsFuture {
        inner: readme_rules(),
        category: "session-notes",
    };
    let cohort = build_notes_and_contacts(&db, provider, Options::default()).await;
    let old = note_days_old(&db, tenant_a(), 40).await;
    let old_contact = contact_days_old(&db, tenant_a(), 400).await;

    let preview = cohort
        .preview(&scope_a(), fixed_now())
        .await
        .expect("preview");
    assert_eq!(
        preview_entry(&preview, "SessionNote")
            .failure
            .as_ref()
            .map(|f| f.kind),
        Some(FailureKind::RuleProviderPanic)
    );
    assert_eq!(preview_entry(&preview, "CaseContact").eligible, 1);

    // Spawned, so that a panic escaping the sweep fails this test with a
    // message instead of unwinding through it.
    let sweeping = cohort.clone();
    let result = tokio::spawn(async move { sweeping.sweep(&scope_a(), fixed_now()).await })
        .await
        .expect("the provider's panic does not escape the sweep")
        .expect("sweep");
    assert_eq!(result.status, RunStatus::PartiallyFailed, "{result:#?}");
    assert_eq!(result.entity_failures.len(), 1, "{result:#?}");
    assert_eq!(result.entity_failures[0].entity_type, "SessionNote");
    assert_eq!(
        result.entity_failures[0].failure.kind,
        FailureKind::RuleProviderPanic
    );
    assert!(
        note_exists(&db, old).await,
        "the failed entity is untouched"
    );
    assert!(
        contact_anonymised(&db, old_contact).await,
        "the other entity is swept"
    );
    assert_eq!(run_status(&db, result.run_id).await, "PartiallyFailed");
    let (status, ..) = ledger_summary(&db, result.run_id, "SessionNote").await;
    assert_eq!(status, "Failed");
    let (status, affected, ..) = ledger_summary(&db, result.run_id, "CaseContact").await;
    assert_eq!((status.as_str(), affected), ("Succeeded", 1));
}

/// Panics in `on_event` itself, before returning a future; counts its calls.
struct ObserverPanicsBeforeItsFuture(Arc<AtomicUsize>);

impl AuditObserver for ObserverPanicsBeforeItsFuture {
    fn on_event<'a>(&'a self, _event: &'a AuditEvent) -> BoxFuture<'a, Result<(), ProviderError>> {
        self.0.fetch_add(1, Ordering::SeqCst);
        panic!("observer bug, before any future");
    }
}

/// Records the kind of every event it hears.
#[derive(Clone, Default)]
struct Recorder(Arc<Mutex<Vec<&'static str>>>);

impl AuditObserver for Recorder {
    fn on_event<'a>(&'a self, event: &'a AuditEvent) -> BoxFuture<'a, Result<(), ProviderError>> {
        let kind = match event {
            AuditEvent::Started { .. } => "Started",
            AuditEvent::EntityProgress { .. } => "EntityProgress",
            AuditEvent::RowDetail { .. } => "RowDetail",
            AuditEvent::EntitySummary { .. } => "EntitySummary",
            AuditEvent::Settled { .. } => "Settled",
            _ => "other",
        };
        self.0.lock().expect("events").push(kind);
        Box::pin(async { Ok(()) })
    }
}

// contract: X21, A7
#[tokio::test]
async fn an_observer_that_panics_synchronously_changes_nothing_and_the_run_settles() {
    let db = db_with_tables().await;
    let calls = Arc::new(AtomicUsize::new(0));
    let healthy = Recorder::default();
    let cohort = Cohort::builder(db.pool().clone())
        .options(Options {
            batch_size: 2,
            ..Options::default()
        })
        .rules(readme_rules())
        .entity::<SessionNote>()
        .entity::<CaseContact>()
        .observer(ObserverPanicsBeforeItsFuture(calls.clone()))
        .observer(healthy.clone())
        .build()
        .await
        .expect("model");
    for _ in 0..3 {
        note_days_old(&db, tenant_a(), 40).await;
    }
    let old_contact = contact_days_old(&db, tenant_a(), 400).await;

    let sweeping = cohort.clone();
    let result = tokio::spawn(async move { sweeping.sweep(&scope_a(), fixed_now()).await })
        .await
        .expect("the observer's panic does not escape the sweep")
        .expect("sweep");
    assert_eq!(result.status, RunStatus::Succeeded, "{result:#?}");
    assert_eq!(result.affected(), 4);
    assert_eq!(count(&db, "SELECT count(*) FROM session_notes").await, 0);
    assert!(contact_anonymised(&db, old_contact).await);
    assert_eq!(run_status(&db, result.run_id).await, "Succeeded");
    // The other observer heard the whole run, in order; the panicking one
    // was offered every event too (each panic is caught on its own).
    let heard = healthy.0.lock().expect("events").clone();
    assert_eq!(
        calls.load(Ordering::SeqCst),
        heard.len(),
        "the panicking observer was called for every event: {heard:?}"
    );
    assert_eq!(heard.first(), Some(&"Started"), "{heard:?}");
    assert_eq!(heard.last(), Some(&"Settled"), "{heard:?}");
    assert_eq!(
        heard.iter().filter(|k| **k == "EntitySummary").count(),
        2,
        "{heard:?}"
    );
}
