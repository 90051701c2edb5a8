//! Where a range batch's `COMMIT` time comes from (a probe behind a finding in
//! `docs/performance.md`, not part of the benchmark).
//!
//! On a database holding the benchmark's `notes` table (ordered, indexed) and
//! holds, runs `--batches` purge batches the engine's way (the begin message,
//! the range statement, `COMMIT`) and times each step from the client, reading
//! the range statement's reply either with `fetch_one` (as the engine does) or
//! with `fetch_all` (the whole reply, so its tail is not left for `COMMIT`).
//!
//! ```sh
//! cargo run --release -p cohort-bench --example commit_probe -- postgres://postgres@127.0.0.1/DB one 300
//! ```

use std::time::Instant;

use chrono::{DateTime, Utc};
use sqlx::{AssertSqlSafe, Connection, PgConnection, Row};
use uuid::Uuid;

const BEGIN: &str = "BEGIN ISOLATION LEVEL READ COMMITTED; SELECT pg_catalog.set_config('search_path', 'pg_catalog, ' OPERATOR(pg_catalog.||) pg_catalog.current_setting('search_path'), true), pg_catalog.set_config('synchronous_commit', 'off', true), pg_catalog.set_config('cohort.session_lock_timeout', pg_catalog.current_setting('lock_timeout'), true), pg_catalog.set_config('lock_timeout', '30000', true); SELECT pg_catalog.pg_advisory_xact_lock_shared(1131376754, 1); SELECT pg_catalog.set_config('lock_timeout', '200', true)";

const RANGE: &str = r#"WITH hi AS MATERIALIZED ( SELECT t."created_at" AS a, t."id" AS k FROM "public"."notes" AS t WHERE t."tenant_id" = $1 AND t."created_at" < $2 AND (t."created_at", t."id") > ($3::pg_catalog.timestamptz, CAST($4::pg_catalog.text AS uuid)) ORDER BY t."created_at", t."id" USING < OFFSET $5 LIMIT 1), d AS (DELETE FROM "public"."notes" AS t WHERE t."tenant_id" = $1 AND t."created_at" < $2 AND (t."created_at", t."id") > ($3::pg_catalog.timestamptz, CAST($4::pg_catalog.text AS uuid)) AND (t."created_at", t."id") <= (COALESCE((SELECT hi.a FROM hi), 'infinity'::pg_catalog.timestamptz), (SELECT hi.k FROM hi)) AND NOT EXISTS (SELECT 1 FROM "public"."retention_holds" AS h WHERE h.retained_entity_id = $6 AND h.record_id = (t."id")::pg_catalog.text AND h.tenant_id = t."tenant_id" AND h.created_at <= pg_catalog.statement_timestamp() AND (h.expires_at IS NULL OR h.expires_at > pg_catalog.statement_timestamp()) AND (h.removed_at IS NULL OR h.removed_at > pg_catalog.statement_timestamp())) RETURNING 1 AS one), p AS (UPDATE "public"."sweep_run_entity_summary" SET affected_count = affected_count OPERATOR(pg_catalog.+) (SELECT pg_catalog.count(*) FROM d), updated_at = pg_catalog.statement_timestamp() WHERE summary_id OPERATOR(pg_catalog.=) $7) SELECT (SELECT (hi.a)::pg_catalog.timestamptz FROM hi) AS hi_anchor, (SELECT (hi.k)::pg_catalog.text FROM hi) AS hi_key, (SELECT pg_catalog.count(*) FROM d) AS affected"#;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let url = args
        .get(1)
        .ok_or("usage: commit_probe URL one|all BATCHES")?;
    let all = args.get(2).is_some_and(|m| m == "all");
    let batches: u32 = args.get(3).map_or(Ok(300), |b| b.parse())?;
    let mut conn = PgConnection::connect(url).await?;
    let tenant = Uuid::parse_str("11111111-1111-1111-1111-111111111111")?;
    let entity = Uuid::parse_str("a3f467fe-c5d0-4f17-9897-83c373cc1dc8")?;
    let cutoff = Utc::now() - chrono::Duration::days(30);
    let row = sqlx::query(
        "SELECT created_at, id::text AS k FROM notes WHERE tenant_id = $1 ORDER BY created_at, id LIMIT 1",
    )
    .bind(tenant)
    .fetch_one(&mut conn)
    .await?;
    let mut lo: (DateTime<Utc>, String) = (row.try_get(0)?, row.try_get(1)?);
    let (mut begin, mut range, mut commit) = (0.0, 0.0, 0.0);
    let mut rows = 0i64;
    for _ in 0..batches {
        let t = Instant::now();
        sqlx::raw_sql(AssertSqlSafe(BEGIN))
            .execute(&mut conn)
            .await?;
        let t1 = Instant::now();
        let q = sqlx::query(AssertSqlSafe(RANGE))
            .bind(tenant)
            .bind(cutoff)
            .bind(lo.0)
            .bind(lo.1.clone())
            .bind(999i64)
            .bind(entity)
            .bind(0i64);
        let row = if all {
            q.fetch_all(&mut conn)
                .await?
                .pop()
                .ok_or("the range statement returned no row")?
        } else {
            q.fetch_one(&mut conn).await?
        };
        let t2 = Instant::now();
        sqlx::raw_sql("COMMIT").execute(&mut conn).await?;
        let t3 = Instant::now();
        begin += (t1 - t).as_secs_f64();
        range += (t2 - t1).as_secs_f64();
        commit += (t3 - t2).as_secs_f64();
        rows += row.try_get::<i64, _>("affected")?;
        let hi: (Option<DateTime<Utc>>, Option<String>) =
            (row.try_get("hi_anchor")?, row.try_get("hi_key")?);
        match hi {
            (Some(a), Some(k)) => lo = (a, k),
            _ => break,
        }
    }
    let n = f64::from(batches);
    println!(
        "{} batches ({} rows), range read with {}: begin+fence {:.3} ms, range {:.3} ms, COMMIT {:.3} ms per batch",
        batches,
        rows,
        if all { "fetch_all" } else { "fetch_one" },
        1000.0 * begin / n,
        1000.0 * range / n,
        1000.0 * commit / n
    );
    Ok(())
}
