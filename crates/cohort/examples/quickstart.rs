//! Cohort's quick start, end to end, on a throwaway PostgreSQL database.
//!
//! Run it with `cargo run -p cohort --example quickstart`. With no
//! configuration it uses `DATABASE_URL` if set, else a server on
//! 127.0.0.1:5432, else it starts a private PostgreSQL cluster with the
//! system's `initdb`/`pg_ctl`; either way it works in a fresh database that
//! is dropped at the end.
//!
//! It installs Cohort's tables in the schema `retention`, prints the readiness
//! report, then runs the README's scenario: session notes purged after 30 days,
//! case contacts anonymised after 365 days, another tenant untouched, a note
//! under a legal hold kept; it prints the preview, the sweep result and the
//! ledger rows. Then the hold keeps protecting its row from a host deletion
//! and from an erasure of its author, while the author's other notes go.

// The example's row types mirror tables; their fields need no prose.
#![allow(missing_docs)]

use chrono::{DateTime, Duration, Utc};
use cohort::holds::{DeletionOutcome, HoldRequest, Target};
use cohort::policy::ProviderError;
use cohort::schema::{SchemaName, check_readiness, ddl};
use cohort::{
    Capabilities, Cohort, ErasureRequest, Options, Period, ResolutionContext, Rule, RuleProvider,
    Scope, Strategy, TenantContext,
};
use futures_util::future::BoxFuture;
use sqlx::Row;
use uuid::Uuid;

/// Short-lived operational data: purged after 30 days.
#[derive(Debug, cohort::Retained)]
#[cohort(category = "session-notes", anchor = "created_at")]
#[cohort(id = "a3f467fe-c5d0-4f17-9897-83c373cc1dc8", table = "session_notes")]
pub struct SessionNote {
    pub id: Uuid,
    pub tenant_id: Uuid,
    pub created_at: DateTime<Utc>,
    #[cohort(erasure_subject)]
    pub author_id: Uuid,
    pub body: String,
}

/// A business record kept, but with personal fields scrubbed after 365 days.
#[derive(Debug, cohort::Retained)]
#[cohort(category = "case-contacts", anchor = "created_at")]
#[cohort(id = "b7316df4-7db5-46ad-aea7-f65c4b430f73", table = "case_contacts")]
pub struct CaseContact {
    pub id: Uuid,
    pub tenant_id: Uuid,
    pub created_at: DateTime<Utc>,
    pub anonymised_at: Option<DateTime<Utc>>,
    #[cohort(anonymise = "null")]
    pub email: Option<String>,
    #[cohort(anonymise = "empty")]
    pub full_name: String,
}

/// The host's policy.
struct RetentionRules;

impl RuleProvider for RetentionRules {
    fn capabilities(&self, category: &str) -> Option<Capabilities> {
        match category {
            "session-notes" => Some(Capabilities::only(Strategy::Purge)),
            "case-contacts" => Some(Capabilities::only(Strategy::Anonymise)),
            _ => None,
        }
    }

    fn resolve<'a>(
        &'a self,
        ctx: ResolutionContext<'a>,
    ) -> BoxFuture<'a, Result<Option<Rule>, ProviderError>> {
        Box::pin(async move {
            Ok(match ctx.category {
                "session-notes" => {
                    Some(Rule::new(Period::days(30), Strategy::Purge).with_per_row_audit())
                }
                "case-contacts" => Some(Rule::new(Period::days(365), Strategy::Anonymise)),
                _ => None,
            })
        })
    }
}

const APP_TABLES: &str = r#"
CREATE TABLE public.session_notes (
    id uuid PRIMARY KEY, tenant_id uuid NOT NULL, created_at timestamptz NOT NULL, author_id uuid NOT NULL,
    body text NOT NULL);
CREATE INDEX ON public.session_notes (tenant_id, created_at, id);
CREATE TABLE public.case_contacts (
    id uuid PRIMARY KEY, tenant_id uuid NOT NULL, created_at timestamptz NOT NULL,
    anonymised_at timestamptz, email text, full_name text NOT NULL);
CREATE INDEX ON public.case_contacts (tenant_id, created_at, id);
"#;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let db = cohort_testdb::TestDb::try_new().await?;
    let pool = db.pool().clone();
    println!("database: {} (dropped at exit)", db.name());

    // 1. The host's migration: its own tables and Cohort's five, in `retention`.
    let schema = SchemaName::new("retention")?;
    sqlx::raw_sql(APP_TABLES).execute(&pool).await?;
    sqlx::raw_sql(sqlx::AssertSqlSafe(ddl(&schema)))
        .execute(&pool)
        .await?;
    let mut conn = pool.acquire().await?;
    println!(
        "\n== readiness\n{}",
        check_readiness(&mut conn, &schema).await?
    );
    drop(conn);

    // 2. Cohort, validated against the live catalog.
    let cohort = Cohort::builder(pool.clone())
        .options(Options {
            schema: "retention".into(),
            ..Options::default()
        })
        .rules(RetentionRules)
        .entity::<SessionNote>()
        .entity::<CaseContact>()
        .build()
        .await?;

    // 3. Some data: two tenants, old and young rows, one note under a legal hold.
    let (acme, globex) = (Uuid::new_v4(), Uuid::new_v4());
    let (ann, bob) = (Uuid::new_v4(), Uuid::new_v4());
    let now = Utc::now();
    let old_note = insert_note(&pool, acme, ann, now - Duration::days(40), "old note").await?;
    insert_note(
        &pool,
        acme,
        bob,
        now - Duration::days(5),
        "recent note by bob",
    )
    .await?;
    insert_note(
        &pool,
        acme,
        ann,
        now - Duration::days(5),
        "recent note by ann",
    )
    .await?;
    let held_note = insert_note(
        &pool,
        acme,
        ann,
        now - Duration::days(90),
        "note under litigation",
    )
    .await?;
    insert_note(
        &pool,
        globex,
        ann,
        now - Duration::days(400),
        "another tenant's note",
    )
    .await?;
    insert_contact(
        &pool,
        acme,
        now - Duration::days(400),
        "ann@example.org",
        "Ann Example",
    )
    .await?;
    insert_contact(
        &pool,
        acme,
        now - Duration::days(30),
        "bob@example.org",
        "Bob Example",
    )
    .await?;
    let note_entity = Uuid::parse_str("a3f467fe-c5d0-4f17-9897-83c373cc1dc8")?;
    let mut conn = pool.acquire().await?;
    let hold = cohort
        .holds()
        .create(
            &mut conn,
            HoldRequest::new(
                note_entity,
                held_note.to_string(),
                Some(acme),
                "Litigation hold - case #12345",
                now,
            )
            .expires_at(now + Duration::days(365)),
        )
        .await?;
    println!(
        "\n== legal hold {} on note {} (expires {})",
        hold.hold_id,
        hold.record_id,
        hold.expires_at
            .map_or_else(|| "never".to_owned(), |t| t.to_rfc3339())
    );

    // 4. Preview, then sweep, the tenant "acme".
    let scope = Scope::Tenant(TenantContext::new(acme));
    let preview = cohort.preview(&scope, now).await?;
    println!("== preview (changes nothing)");
    for e in &preview.entries {
        println!(
            "  {:<12} {:<10} eligible={} held={} null_anchor={}",
            e.entity_type,
            e.strategy.map(|s| s.to_string()).unwrap_or_default(),
            e.eligible,
            e.held,
            e.null_anchor
        );
    }
    let result = cohort.sweep(&scope, now).await?;
    println!("\n== sweep {} -> {}", result.run_id, result.status);
    for s in &result.summaries {
        println!(
            "  {:<12} {:<10} affected={} held={} skipped={} period={}",
            s.entity_type,
            s.strategy.map(|s| s.to_string()).unwrap_or_default(),
            s.affected,
            s.held,
            s.skipped,
            s.applied_period
                .map(|p| p.to_string())
                .unwrap_or_else(|| "-".into())
        );
    }

    // 5. What is left, and the ledger.
    println!("\n== rows left");
    for r in
        sqlx::query("SELECT tenant_id = $1 AS acme, body FROM session_notes ORDER BY created_at")
            .bind(acme)
            .fetch_all(&pool)
            .await?
    {
        let who = if r.get::<bool, _>("acme") {
            "acme"
        } else {
            "globex"
        };
        println!("  note    [{who}] {}", r.get::<String, _>("body"));
    }
    for r in sqlx::query("SELECT email, full_name, anonymised_at IS NOT NULL AS scrubbed FROM case_contacts ORDER BY created_at")
        .fetch_all(&pool)
        .await?
    {
        println!(
            "  contact email={:?} name={:?} anonymised={}",
            r.get::<Option<String>, _>("email"),
            r.get::<String, _>("full_name"),
            r.get::<bool, _>("scrubbed")
        );
    }
    assert!(!exists(&pool, old_note).await?, "the old note was purged");
    assert!(exists(&pool, held_note).await?, "the held note was kept");

    println!("\n== ledger: retention.sweep_run");
    for r in sqlx::query("SELECT run_id, run_kind, trigger, status, dry_run, settled_at IS NOT NULL AS settled FROM retention.sweep_run")
        .fetch_all(&pool)
        .await?
    {
        println!(
            "  {} {} {} {} dry_run={} settled={}",
            r.get::<Uuid, _>("run_id"),
            r.get::<String, _>("run_kind"),
            r.get::<String, _>("trigger"),
            r.get::<String, _>("status"),
            r.get::<bool, _>("dry_run"),
            r.get::<bool, _>("settled")
        );
    }
    println!("== ledger: retention.sweep_run_entity_summary");
    for r in sqlx::query(
        "SELECT entity_type, category, strategy, affected_count, held_count, applied_period \
         FROM retention.sweep_run_entity_summary ORDER BY entity_type",
    )
    .fetch_all(&pool)
    .await?
    {
        println!(
            "  {} {} {} affected={} held={} period={}",
            r.get::<String, _>("entity_type"),
            r.get::<String, _>("category"),
            r.get::<String, _>("strategy"),
            r.get::<i64, _>("affected_count"),
            r.get::<i64, _>("held_count"),
            r.get::<Option<String>, _>("applied_period")
                .unwrap_or_default()
        );
    }
    println!("== ledger: retention.sweep_run_row_detail (per-row audit of session notes)");
    for r in
        sqlx::query("SELECT entity_type, record_id, action FROM retention.sweep_run_row_detail")
            .fetch_all(&pool)
            .await?
    {
        println!(
            "  {} {} {}",
            r.get::<String, _>("entity_type"),
            r.get::<String, _>("record_id"),
            r.get::<String, _>("action")
        );
    }

    // 6. The host's own deletions respect the hold...
    let mut conn = pool.acquire().await?;
    for (label, id) in [
        ("held note", held_note),
        (
            "bob's recent note",
            note_id(&pool, "recent note by bob").await?,
        ),
    ] {
        let outcome = cohort
            .deletion()
            .execute(
                &mut conn,
                &[Target::new(note_entity, id.to_string(), Some(acme))],
                move |tx| {
                    Box::pin(async move {
                        sqlx::query("DELETE FROM session_notes WHERE id = $1")
                            .bind(id)
                            .execute(&mut *tx)
                            .await?;
                        Ok::<_, sqlx::Error>(())
                    })
                },
            )
            .await?;
        match outcome {
            DeletionOutcome::Deleted(()) => println!("\n== host deletion of the {label}: deleted"),
            DeletionOutcome::Protected { held } => {
                println!(
                    "\n== host deletion of the {label}: protected by a hold ({} target)",
                    held.len()
                )
            }
        }
    }
    drop(conn);

    // 7. ...and so does the right to erasure: every note by ann in acme goes, except the held one.
    let erasure = cohort
        .erase(&scope, Utc::now(), ErasureRequest::new(ann))
        .await?;
    println!("\n== erasure of ann's data in acme -> {}", erasure.status);
    for s in &erasure.summaries {
        println!(
            "  {:<12} affected={} held={}",
            s.entity_type, s.affected, s.held
        );
    }
    println!("== notes left");
    for r in
        sqlx::query("SELECT tenant_id = $1 AS acme, body FROM session_notes ORDER BY created_at")
            .bind(acme)
            .fetch_all(&pool)
            .await?
    {
        let who = if r.get::<bool, _>("acme") {
            "acme"
        } else {
            "globex"
        };
        println!("  note    [{who}] {}", r.get::<String, _>("body"));
    }
    assert!(
        exists(&pool, held_note).await?,
        "the held note survived the sweep, the deletion and the erasure"
    );
    Ok(())
}

async fn note_id(pool: &sqlx::PgPool, body: &str) -> Result<Uuid, sqlx::Error> {
    sqlx::query_scalar("SELECT id FROM session_notes WHERE body = $1")
        .bind(body)
        .fetch_one(pool)
        .await
}

async fn insert_note(
    pool: &sqlx::PgPool,
    tenant: Uuid,
    author: Uuid,
    at: DateTime<Utc>,
    body: &str,
) -> Result<Uuid, sqlx::Error> {
    let id = Uuid::new_v4();
    sqlx::query(
        "INSERT INTO session_notes (id, tenant_id, created_at, author_id, body) VALUES ($1, $2, $3, $4, $5)",
    )
    .bind(id)
    .bind(tenant)
    .bind(at)
    .bind(author)
    .bind(body)
    .execute(pool)
    .await?;
    Ok(id)
}

async fn insert_contact(
    pool: &sqlx::PgPool,
    tenant: Uuid,
    at: DateTime<Utc>,
    email: &str,
    name: &str,
) -> Result<(), sqlx::Error> {
    sqlx::query("INSERT INTO case_contacts (id, tenant_id, created_at, email, full_name) VALUES ($1, $2, $3, $4, $5)")
        .bind(Uuid::new_v4())
        .bind(tenant)
        .bind(at)
        .bind(email)
        .bind(name)
        .execute(pool)
        .await?;
    Ok(())
}

async fn exists(pool: &sqlx::PgPool, id: Uuid) -> Result<bool, sqlx::Error> {
    sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM session_notes WHERE id = $1)")
        .bind(id)
        .fetch_one(pool)
        .await
}
