//! `demo`: the whole story on a throwaway database. It finds or starts a
//! PostgreSQL server the way the test harness does (`DATABASE_URL`, a
//! server on 127.0.0.1:5432, or a private cluster started with
//! `initdb`/`pg_ctl`), creates a fresh database, loads a small sample
//! application and walks preview, hold, sweep, erasure and the ledger with
//! the same code the commands use.

use chrono::{Duration, Utc};
use cohort::holds::HoldRequest;
use cohort::{ErasureRequest, Scope, SweepOptions, TenantContext};
use cohort_testdb::{Server, TestDb};
use sqlx::{AssertSqlSafe, PgPool};
use uuid::Uuid;

use super::{Ctx, sweep};
use crate::cli::{DemoArgs, Global, RunsShowArgs};
use crate::error::{CliError, CliResult};
use crate::model::{Model, ParseOptions};
use crate::output;
use crate::progress::Progress;
use crate::sample;
use crate::settings::Settings;

const TENANT_A: Uuid = Uuid::from_u128(0x2b0c6e1e_5d4c_4a8e_9a59_1f3c1d0e7a21);
const TENANT_B: Uuid = Uuid::from_u128(0x7f3e9d2c_1b0a_4f8e_8d7c_6b5a4f3e2d1c);
const ALICE: Uuid = Uuid::from_u128(0xa11ce000_0000_4000_8000_000000000001);
const BOB: Uuid = Uuid::from_u128(0xb0b00000_0000_4000_8000_000000000002);
const CAROL: Uuid = Uuid::from_u128(0xca201000_0000_4000_8000_000000000003);
const DAVE: Uuid = Uuid::from_u128(0xda7e0000_0000_4000_8000_000000000004);
const EVE: Uuid = Uuid::from_u128(0xe7e00000_0000_4000_8000_000000000005);
const FRANK: Uuid = Uuid::from_u128(0xf2a4c000_0000_4000_8000_000000000006);

fn step(n: u32, title: &str) -> CliResult {
    output::line(format!("\n== {n}. {title}"))
}

fn say(text: &str) -> CliResult {
    output::line(text)
}

/// The sample data: two tenants, five users in tenant A (one recent, two
/// long gone, one held later, one without activity), their orders,
/// sessions and audit notes, and reference data.
async fn load(pool: &PgPool) -> CliResult {
    sqlx::raw_sql(sample::TABLES).execute(pool).await?;
    let data = r#"
INSERT INTO users (id, tenant_id, email, full_name, phone, last_seen_at) VALUES
  ($1, $7, 'alice@example.org', 'Alice Archer', '+44 20 7946 0001', now() - interval '3 years'),
  ($2, $7, 'bob@example.org',   'Bob Baker',    '+44 20 7946 0002', now() - interval '10 days'),
  ($3, $7, 'carol@example.org', 'Carol Cooper', '+44 20 7946 0003', now() - interval '3 years'),
  ($4, $7, 'dave@example.org',  'Dave Dyer',    '+44 20 7946 0004', now() - interval '90 days'),
  ($5, $7, 'eve@example.org',   'Eve Evans',    NULL,               NULL),
  ($6, $8, 'frank@example.org', 'Frank Fisher', '+49 30 0000 0006', now() - interval '3 years');
"#;
    let mut q = sqlx::query(AssertSqlSafe(data.trim().trim_end_matches(';').to_owned()));
    for id in [ALICE, BOB, CAROL, DAVE, EVE, FRANK, TENANT_A, TENANT_B] {
        q = q.bind(id);
    }
    q.execute(pool).await?;
    let rest = [
        // Orders: two older than seven years (purged), the rest kept.
        "INSERT INTO orders (id, tenant_id, user_id, total_cents, shipping_address, placed_at) VALUES \
           (1, $1, $3, 4200, '1 Archer Road', now() - interval '8 years'), \
           (2, $1, $3, 1500, '1 Archer Road', now() - interval '2 years'), \
           (3, $1, $4,  990, '4 Dyer Street', now() - interval '100 days'), \
           (4, $1, $4, 2500, '4 Dyer Street', now() - interval '6 years'), \
           (5, $1, $5, 7300, '2 Baker Lane',  now() - interval '1 day'), \
           (6, $1, $6,  100, '9 Old Way',     now() - interval '9 years'), \
           (7, $2, $7, 5000, '6 Fisher Platz', now() - interval '9 years')",
        // Sessions: one a day for 200 days, shared among tenant A's users;
        // 50 old ones in tenant B.
        "INSERT INTO sessions (id, tenant_id, user_id, ip, user_agent, created_at) \
         SELECT gen_random_uuid(), $1, (ARRAY[$3, $4, $5, $6]::uuid[])[1 + i % 4], \
                ('10.0.' || (i / 250) || '.' || (i % 250))::inet, 'Mozilla/5.0', now() - i * interval '1 day' \
         FROM generate_series(0, 199) AS i",
        "INSERT INTO sessions (id, tenant_id, user_id, ip, user_agent, created_at) \
         SELECT gen_random_uuid(), $2, $7, '10.9.0.1'::inet, 'Mozilla/5.0', now() - interval '1 year' - i * interval '1 day' \
         FROM generate_series(1, 50) AS i",
        // Audit notes: one a month for ten months and four older ones.
        "INSERT INTO audit_notes (id, tenant_id, body, created_at) \
         SELECT i, $1, 'note ' || i, now() - i * interval '5 weeks' FROM generate_series(1, 14) AS i",
        "INSERT INTO countries (code, name) VALUES ('DE', 'Germany'), ('FR', 'France'), ('GB', 'United Kingdom')",
    ];
    for sql in rest {
        let needed = [TENANT_A, TENANT_B, ALICE, DAVE, BOB, EVE, FRANK];
        let n = (1..=needed.len())
            .rev()
            .find(|i| sql.contains(&format!("${i}")))
            .unwrap_or(0);
        let mut q = sqlx::query(AssertSqlSafe(sql.to_owned()));
        for id in &needed[..n] {
            q = q.bind(*id);
        }
        q.execute(pool).await?;
    }
    Ok(())
}

async fn count(pool: &PgPool, sql: &'static str, tenant: Uuid) -> CliResult<i64> {
    Ok(sqlx::query_scalar(sql).bind(tenant).fetch_one(pool).await?)
}

/// `demo`.
pub(crate) async fn run(ctx: &Ctx, args: &DemoArgs) -> CliResult {
    step(1, "A throwaway database")?;
    let server = Server::shared()
        .await
        .map_err(|e| CliError::Settings(format!("cannot find or start PostgreSQL: {e}")))?;
    let db = TestDb::try_new()
        .await
        .map_err(|e| CliError::Settings(format!("cannot create the demo database: {e}")))?;
    say(&format!(
        "server: {}; database: {}",
        server.origin,
        db.name()
    ))?;
    let pool = db.pool().clone();

    let settings = Settings {
        database_url: Some(db.url()),
        hash_key: Some(format!("{}", Uuid::new_v4().simple())),
        ..ctx.settings.clone()
    };
    let demo = Ctx {
        global: Global {
            config: None,
            model: None,
            database_url: None,
            json: false,
            verbose: ctx.global.verbose,
        },
        settings: Settings {
            schema: "public".into(),
            default_table_schema: "public".into(),
            ..settings
        },
    };

    step(2, "Cohort's tables (`cohort schema migrate`)")?;
    let schema = demo.settings.schema_name()?;
    for (v, name) in super::schema::migrate(&pool, &schema).await? {
        say(&format!("applied migration {v} ({name})"))?;
    }
    say(
        "Cohort never creates or changes tables by itself: only `schema migrate` does, when asked.",
    )?;

    step(
        3,
        "The sample application: users, orders, sessions, audit notes, countries",
    )?;
    load(&pool).await?;
    say(&format!(
        "tenant A {TENANT_A}: 5 users (alice and carol last seen 3 years ago, dave 90 days ago, bob 10 days ago, eve never), \
         6 orders, 200 sessions (one a day), 14 audit notes (one every 5 weeks)"
    ))?;
    say(&format!(
        "tenant B {TENANT_B}: 1 user, 1 order and 50 sessions, all old; nothing below touches them"
    ))?;

    step(
        4,
        "The model (`cohort init` writes this same file) and `cohort validate`",
    )?;
    let model: Model = crate::model::parse(
        "cohort-model.toml",
        sample::MODEL,
        &ParseOptions {
            default_table_schema: "public".into(),
            hash_key_set: true,
        },
    )
    .map_err(CliError::Model)?;
    for r in &model.rules {
        say(&format!(
            "  {:<12} -> {} after {}{}",
            r.category,
            crate::model::strategy_name(r.base.strategy),
            crate::model::period::human(&r.base.period),
            r.base
                .legal_minimum
                .map(|m| format!(" (legal minimum {})", crate::model::period::human(&m)))
                .unwrap_or_default()
        ))?;
    }
    let progress = Progress::new(super::names(&model));
    let cohort = demo.cohort(&pool, &model, Some(progress.clone())).await?;
    say(
        "valid: every table, column and type fits the live catalog, and Cohort's tables are ready.",
    )?;

    let now = Utc::now();
    let scope = Scope::Tenant(TenantContext::new(TENANT_A));

    step(
        5,
        &format!("`cohort preview --tenant {TENANT_A}`: what a sweep would do"),
    )?;
    let p = cohort.preview(&scope, now).await?;
    sweep::print_preview(&sweep::preview_json(&p, &scope, &model))?;
    say(
        "users: alice and carol are past 2 years; eve has no last_seen_at (kept, counted as null anchor).",
    )?;
    say(
        "orders: two orders are older than 7 years. sessions: everything older than 30 days. audit notes: older than a year.",
    )?;

    step(6, "`cohort holds add`: a legal hold on carol's account")?;
    let users = model
        .entity("users")
        .map(|e| e.id)
        .ok_or_else(|| CliError::Internal("the sample model has no users".into()))?;
    let mut conn = pool.acquire().await?;
    let hold = cohort
        .holds()
        .create(
            &mut conn,
            HoldRequest::new(
                users,
                CAROL.to_string(),
                Some(TENANT_A),
                "Litigation hold - case #12345",
                now,
            )
            .expires_at(now + Duration::days(365)),
        )
        .await?;
    drop(conn);
    say(&format!(
        "hold {} on users/{CAROL}: no sweep and no erasure changes that row until the hold expires or is removed.",
        hold.hold_id
    ))?;
    let p = cohort.preview(&scope, now).await?;
    sweep::print_preview(&sweep::preview_json(&p, &scope, &model))?;
    say("users now shows 1 eligible and 1 held.")?;

    step(7, &format!("`cohort sweep --tenant {TENANT_A}`"))?;
    let r = cohort
        .sweep_with(&scope, now, SweepOptions::default())
        .await?;
    progress.finish();
    sweep::print_run(&sweep::run_json(&r, &model))?;
    let alice: (Option<String>, String, Option<String>) =
        sqlx::query_as("SELECT email, full_name, phone FROM users WHERE id = $1")
            .bind(ALICE)
            .fetch_one(&pool)
            .await?;
    say(&format!(
        "alice's row is kept but anonymised: email {:?} (keyed hash), full_name {:?}, phone {:?}.",
        alice.0.as_deref().unwrap_or("NULL"),
        alice.1,
        alice.2.as_deref().unwrap_or("NULL")
    ))?;
    say(
        "carol's row is untouched (held); the sessions and orders past their periods are gone; old notes are soft-deleted.",
    )?;

    step(
        8,
        &format!("`cohort erase --tenant {TENANT_A} --subject {DAVE}`: dave asks to be forgotten"),
    )?;
    let r = cohort.erase(&scope, now, ErasureRequest::new(DAVE)).await?;
    progress.finish();
    sweep::print_run(&sweep::run_json(&r, &model))?;
    say("dave's user row is anonymised and his sessions purged at once, whatever their age.")?;
    say(
        "his two orders stay: orders keep a 7-year legal minimum (tax law), which erasure respects; the ledger records it (period P7Y, cutoff).",
    )?;

    step(
        9,
        "`cohort runs show <run>` and `cohort runs list`: the audit ledger",
    )?;
    let shown = super::runs::show(
        &pool,
        &schema,
        &RunsShowArgs {
            run: r.run_id.to_string(),
            rows: 0,
            wide: false,
            output: None,
        },
    )
    .await?;
    super::runs::print_show(&shown, false)?;
    let runs = super::runs::list(
        &pool,
        &schema,
        &crate::cli::RunsListArgs {
            limit: 10,
            status: None,
            kind: None,
            tenant: None,
            wide: false,
            output: None,
        },
    )
    .await?;
    say("`cohort runs list`:")?;
    super::runs::print_list(&runs, false)?;

    step(10, "Tenant B was never touched")?;
    let b_sessions = count(
        &pool,
        "SELECT count(*) FROM sessions WHERE tenant_id = $1",
        TENANT_B,
    )
    .await?;
    let b_orders = count(
        &pool,
        "SELECT count(*) FROM orders WHERE tenant_id = $1",
        TENANT_B,
    )
    .await?;
    say(&format!(
        "tenant B still has {b_sessions} sessions and {b_orders} order: every statement carries the tenant predicate."
    ))?;

    if args.keep {
        say(&format!(
            "\nkept the database {} ({}). A private throwaway cluster stops when this command exits.",
            db.name(),
            crate::db::redact_url(&db.url())
        ))?;
        std::mem::forget(db);
    } else {
        say(
            "\nThe demo database is dropped now. Next: `cohort init` in your project, then `cohort validate`.",
        )?;
        drop(pool);
        drop(db);
    }
    Ok(())
}
