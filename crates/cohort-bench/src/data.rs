//! The data every measurement runs on: two template tables built once per
//! benchmark run, and a fresh copy (`notes`) made for each measurement.

use std::fmt;

use sqlx::{AssertSqlSafe, PgPool};

use crate::model::ENTITY_ID;

/// The tenant whose rows are swept.
pub(crate) const TENANT_A: &str = "11111111-1111-1111-1111-111111111111";
/// The other tenant, whose rows no measurement may touch.
pub(crate) const TENANT_B: &str = "22222222-2222-2222-2222-222222222222";
/// How many of tenant A's rows are under an active hold unless `--holds`
/// says otherwise.
pub(crate) const HOLDS: u64 = 1_000;

/// The holds of a benchmark run: how many, and whether the planner knows of them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Holds {
    /// How many of tenant A's rows are under an active hold.
    pub(crate) count: u64,
    /// Whether the holds table is never analysed nor vacuumed (autovacuum
    /// off for it), so the planner knows nothing of the holds for the whole
    /// run: what a new install that writes many holds and sweeps at once
    /// looks like (the 544 s sweep of issue 23).
    pub(crate) stale: bool,
}

/// Which copy of the data a measurement runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Data {
    /// Rows inserted in anchor order; index on `(tenant_id, created_at, id)`.
    Ordered,
    /// The same rows inserted in random order (physical order differs from
    /// anchor order); the same index.
    Random,
    /// The ordered rows with the primary key only: no `(tenant, anchor)` index.
    NoIndex,
}

impl Data {
    /// The name used on the command line and in the JSON lines.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Data::Ordered => "ordered",
            Data::Random => "random",
            Data::NoIndex => "noindex",
        }
    }
}

impl fmt::Display for Data {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Runs `sql` (one or more statements, no parameters).
pub(crate) async fn exec(pool: &PgPool, sql: &str) -> Result<(), sqlx::Error> {
    sqlx::raw_sql(AssertSqlSafe(sql.to_owned()))
        .execute(pool)
        .await
        .map(|_| ())
}

/// Builds Cohort's tables and the two templates: `template` in anchor order,
/// `template_random` with the same rows in random order. `rows` expired rows
/// of tenant A (created 400 to 100 days ago, so all past a 30-day cutoff),
/// `rows / 10` of tenant B, and `holds.count` active holds on random rows of A,
/// analysed, or (`holds.stale`) never analysed.
pub(crate) async fn setup(pool: &PgPool, rows: u64, holds: Holds) -> Result<(), sqlx::Error> {
    let count = holds.count;
    let schema = cohort::schema::SchemaName::public();
    exec(pool, &cohort::schema::ddl(&schema)).await?;
    if holds.stale {
        exec(
            pool,
            "ALTER TABLE retention_holds SET (autovacuum_enabled = false)",
        )
        .await?;
    }
    exec(
        pool,
        &format!(
            "CREATE TABLE template (id uuid NOT NULL, tenant_id uuid NOT NULL, created_at timestamptz NOT NULL, \
               anonymised_at timestamptz, is_deleted boolean NOT NULL DEFAULT false, deleted_at timestamptz, \
               email text, body text NOT NULL);
             INSERT INTO template (id, tenant_id, created_at, email, body) SELECT gen_random_uuid(), '{TENANT_A}', \
               now() - interval '400 days' + (i::float / {rows}) * interval '300 days', 'person@example.org', repeat('x', 100) \
               FROM generate_series(1, {rows}) i;
             INSERT INTO template (id, tenant_id, created_at, email, body) SELECT gen_random_uuid(), '{TENANT_B}', \
               now() - interval '400 days', 'person@example.org', repeat('x', 100) FROM generate_series(1, {rows} / 10) i;
             -- The holds are written with plain SQL: their type must be
             -- registered (as a handle's build does), and its table exist
             -- (each measurement replaces it with a fresh copy).
             CREATE TABLE notes (LIKE template INCLUDING ALL);
             INSERT INTO retention_entities VALUES ('{ENTITY_ID}', 'Note', 'public', 'notes', 'id', 'uuid', \
               'pg_catalog', '=', 'tenant_id', now(), 0);
             INSERT INTO retention_holds (hold_id, retained_entity_id, record_id, tenant_id, reason, created_at) \
               SELECT gen_random_uuid(), '{ENTITY_ID}', id::text, tenant_id, 'bench', now() - interval '1 day' \
               FROM template WHERE tenant_id = '{TENANT_A}' ORDER BY random() LIMIT {count};
             CREATE TABLE template_random (LIKE template INCLUDING ALL);
             INSERT INTO template_random SELECT * FROM template ORDER BY random();"
        ),
    )
    .await?;
    if holds.stale {
        Ok(())
    } else {
        exec(pool, "VACUUM ANALYZE retention_holds").await
    }
}

/// A fresh copy of the template of `data` as `notes`, with its indexes,
/// vacuumed, analysed and checkpointed.
pub(crate) async fn fresh_copy(pool: &PgPool, data: Data) -> Result<(), sqlx::Error> {
    let (source, index) = match data {
        Data::Ordered => ("template", true),
        Data::Random => ("template_random", true),
        Data::NoIndex => ("template", false),
    };
    let index = if index {
        "CREATE INDEX notes_tenant_anchor ON notes (tenant_id, created_at, id);"
    } else {
        ""
    };
    exec(
        pool,
        &format!(
            "DROP TABLE IF EXISTS notes;
             CREATE TABLE notes (LIKE {source} INCLUDING ALL);
             INSERT INTO notes SELECT * FROM {source};
             ALTER TABLE notes ADD PRIMARY KEY (id);
             {index}"
        ),
    )
    .await?;
    exec(pool, "VACUUM ANALYZE notes").await?;
    exec(pool, "CHECKPOINT").await
}
