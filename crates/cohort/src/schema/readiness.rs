//! Readiness: proving from `pg_catalog` that Cohort's tables have the shape it
//! relies on. Every problem is collected before reporting.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use sqlx::{Acquire, PgConnection, Row};

use super::{SchemaName, TABLES};
use crate::error::Error;
use crate::sql::{pin_search_path, restore_search_path};

/// One column Cohort reads or writes.
struct ColumnSpec {
    name: &'static str,
    /// As printed by `pg_catalog.format_type`.
    ty: &'static str,
    not_null: bool,
}

struct TableSpec {
    name: &'static str,
    columns: &'static [ColumnSpec],
    primary_key: &'static [&'static str],
    /// Keys Cohort relies on for `ON CONFLICT` and for correctness.
    unique: &'static [&'static [&'static str]],
    /// CHECK constraints, by name.
    checks: &'static [&'static str],
    /// Indexes that only make Cohort fast: missing ones are warnings.
    speed: &'static [&'static [&'static str]],
}

const fn col(name: &'static str, ty: &'static str, not_null: bool) -> ColumnSpec {
    ColumnSpec { name, ty, not_null }
}

const UUID: &str = "uuid";
const TEXT: &str = "text";
const TS: &str = "timestamp with time zone";
const BIGINT: &str = "bigint";
const INT: &str = "integer";
const BOOL: &str = "boolean";
const JSONB: &str = "jsonb";

const SPEC: [TableSpec; 5] = [
    TableSpec {
        name: "sweep_run",
        columns: &[
            col("run_id", UUID, true),
            col("run_kind", TEXT, true),
            col("trigger", TEXT, true),
            col("dry_run", BOOL, true),
            col("tenant_id", UUID, true),
            col("logical_now", TS, true),
            col("status", TEXT, true),
            col("started_at", TS, true),
            col("settled_at", TS, false),
            col("error", TEXT, false),
        ],
        primary_key: &["run_id"],
        unique: &[],
        checks: &[
            "sweep_run_kind_check",
            "sweep_run_trigger_check",
            "sweep_run_status_check",
            "sweep_run_settled_check",
        ],
        speed: &[&["status", "started_at"]],
    },
    TableSpec {
        name: "sweep_run_entity_summary",
        columns: &[
            col("summary_id", BIGINT, true),
            col("run_id", UUID, true),
            col("retained_entity_id", UUID, true),
            col("entity_type", TEXT, true),
            col("category", TEXT, true),
            col("tenant_id", UUID, true),
            col("strategy", TEXT, true),
            col("status", TEXT, true),
            col("affected_count", BIGINT, true),
            col("held_count", BIGINT, true),
            col("skipped_count", BIGINT, true),
            col("null_anchor_count", BIGINT, true),
            col("applied_period", TEXT, false),
            col("cutoff", TS, false),
            col("rule_source", TEXT, false),
            col("rule_reason", TEXT, false),
            col("error", TEXT, false),
            col("updated_at", TS, true),
        ],
        primary_key: &["summary_id"],
        unique: &[&[
            "run_id",
            "retained_entity_id",
            "category",
            "tenant_id",
            "strategy",
        ]],
        checks: &[
            "sweep_run_entity_summary_strategy_check",
            "sweep_run_entity_summary_status_check",
            "sweep_run_entity_summary_counts_check",
        ],
        speed: &[],
    },
    TableSpec {
        name: "sweep_run_row_detail",
        columns: &[
            col("detail_id", BIGINT, true),
            col("run_id", UUID, true),
            col("retained_entity_id", UUID, true),
            col("entity_type", TEXT, true),
            col("record_id", TEXT, true),
            col("tenant_id", UUID, true),
            col("action", TEXT, true),
            col("captured_payload", JSONB, false),
            col("created_at", TS, true),
        ],
        primary_key: &["detail_id"],
        unique: &[&["run_id", "retained_entity_id", "record_id"]],
        checks: &["sweep_run_row_detail_action_check"],
        speed: &[&["created_at"]],
    },
    TableSpec {
        name: "sweep_row_handler_status",
        columns: &[
            col("work_id", BIGINT, true),
            col("detail_id", BIGINT, true),
            col("run_id", UUID, true),
            col("retained_entity_id", UUID, true),
            col("record_id", TEXT, true),
            col("tenant_id", UUID, true),
            col("handler_id", TEXT, true),
            col("priority", INT, true),
            col("state", TEXT, true),
            col("attempts", INT, true),
            col("claim_token", UUID, false),
            col("claim_expires_at", TS, false),
            col("not_before", TS, true),
            col("after_sweep_settled", BOOL, true),
            col("last_error", TEXT, false),
            col("created_at", TS, true),
            col("updated_at", TS, true),
        ],
        primary_key: &["work_id"],
        unique: &[&["detail_id", "handler_id"]],
        checks: &[
            "sweep_row_handler_status_state_check",
            "sweep_row_handler_status_attempts_check",
            "sweep_row_handler_status_claim_check",
        ],
        speed: &[&["state", "not_before"]],
    },
    TableSpec {
        name: "retention_holds",
        columns: &[
            col("hold_id", UUID, true),
            col("retained_entity_id", UUID, true),
            col("record_id", TEXT, true),
            col("tenant_id", UUID, false),
            col("reason", TEXT, true),
            col("created_at", TS, true),
            col("expires_at", TS, false),
            col("removed_at", TS, false),
        ],
        primary_key: &["hold_id"],
        unique: &[],
        checks: &[
            "retention_holds_record_id_check",
            "retention_holds_expiry_check",
        ],
        speed: &[&["retained_entity_id", "record_id"]],
    },
];

/// Something that stops Cohort from running against the installed tables.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ReadinessProblem {
    /// The table does not exist in the schema (or is not an ordinary or partitioned table).
    MissingTable {
        /// The table.
        table: &'static str,
    },
    /// A column Cohort reads or writes is missing.
    MissingColumn {
        /// The table.
        table: &'static str,
        /// The column.
        column: &'static str,
    },
    /// A column has another type than Cohort writes.
    WrongColumnType {
        /// The table.
        table: &'static str,
        /// The column.
        column: &'static str,
        /// The type Cohort needs.
        expected: &'static str,
        /// The type installed.
        found: String,
    },
    /// A column's NOT NULL constraint differs from what Cohort needs.
    WrongNullability {
        /// The table.
        table: &'static str,
        /// The column.
        column: &'static str,
        /// Whether Cohort needs the column NOT NULL.
        expected_not_null: bool,
    },
    /// The primary key is missing or on other columns.
    MissingPrimaryKey {
        /// The table.
        table: &'static str,
        /// The key columns Cohort needs.
        columns: &'static [&'static str],
    },
    /// A unique key Cohort relies on is missing (or partial, or on expressions).
    MissingUniqueIndex {
        /// The table.
        table: &'static str,
        /// The key columns.
        columns: &'static [&'static str],
    },
    /// The unique key exists but is deferrable, which `ON CONFLICT` cannot use
    /// and which lets duplicates exist until commit.
    DeferrableUniqueIndex {
        /// The table.
        table: &'static str,
        /// The key columns.
        columns: &'static [&'static str],
    },
    /// A named CHECK constraint is missing.
    MissingCheck {
        /// The table.
        table: &'static str,
        /// The constraint's name.
        constraint: &'static str,
    },
}

impl fmt::Display for ReadinessProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReadinessProblem::MissingTable { table } => write!(f, "table {table} is missing"),
            ReadinessProblem::MissingColumn { table, column } => {
                write!(f, "column {table}.{column} is missing")
            }
            ReadinessProblem::WrongColumnType {
                table,
                column,
                expected,
                found,
            } => {
                write!(f, "column {table}.{column} is {found}, expected {expected}")
            }
            ReadinessProblem::WrongNullability {
                table,
                column,
                expected_not_null,
            } => {
                if *expected_not_null {
                    write!(f, "column {table}.{column} must be NOT NULL")
                } else {
                    write!(f, "column {table}.{column} must allow NULL")
                }
            }
            ReadinessProblem::MissingPrimaryKey { table, columns } => {
                write!(
                    f,
                    "table {table} needs PRIMARY KEY ({})",
                    columns.join(", ")
                )
            }
            ReadinessProblem::MissingUniqueIndex { table, columns } => write!(
                f,
                "table {table} needs a unique index or constraint on ({}), not partial, not on expressions",
                columns.join(", ")
            ),
            ReadinessProblem::DeferrableUniqueIndex { table, columns } => write!(
                f,
                "the unique constraint on {table} ({}) must not be deferrable",
                columns.join(", ")
            ),
            ReadinessProblem::MissingCheck { table, constraint } => {
                write!(f, "table {table} lacks CHECK constraint {constraint}")
            }
        }
    }
}

/// Something that makes Cohort slower but not wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ReadinessWarning {
    /// No index has these leading key columns.
    MissingIndex {
        /// The table.
        table: &'static str,
        /// The key columns an index should start with.
        columns: &'static [&'static str],
    },
}

impl fmt::Display for ReadinessWarning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReadinessWarning::MissingIndex { table, columns } => write!(
                f,
                "table {table} has no index on ({}); Cohort works but is slower",
                columns.join(", ")
            ),
        }
    }
}

/// The outcome of a readiness check: every problem and every warning at once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadinessReport {
    /// The schema checked.
    pub schema: SchemaName,
    /// What stops Cohort from running. Empty when ready.
    pub problems: Vec<ReadinessProblem>,
    /// What only slows it down.
    pub warnings: Vec<ReadinessWarning>,
}

impl ReadinessReport {
    /// True when there are no problems (warnings do not count).
    pub fn is_ready(&self) -> bool {
        self.problems.is_empty()
    }

    /// `Ok(self)` when ready, otherwise [`Error::SchemaNotReady`].
    pub fn into_result(self) -> Result<ReadinessReport, Error> {
        if self.is_ready() {
            Ok(self)
        } else {
            Err(Error::SchemaNotReady(self))
        }
    }
}

impl fmt::Display for ReadinessReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_ready() {
            writeln!(f, "schema {:?}: ready", self.schema.as_str())?;
        } else {
            writeln!(
                f,
                "schema {:?}: {} problem(s)",
                self.schema.as_str(),
                self.problems.len()
            )?;
        }
        for p in &self.problems {
            writeln!(f, "  - {p}")?;
        }
        for w in &self.warnings {
            writeln!(f, "  ! {w}")?;
        }
        Ok(())
    }
}

/// An index or key as the catalog has it.
struct IndexInfo {
    table: String,
    columns: Vec<String>,
    unique: bool,
    primary: bool,
    partial_or_expression: bool,
    deferrable: bool,
}

/// Reads the catalog and reports whether Cohort's five tables in `schema` have
/// every column, key, unique index and CHECK constraint Cohort relies on.
///
/// Missing speed-only indexes are returned as warnings and logged with
/// `tracing::warn!`. The check runs in a transaction of its own (a savepoint
/// when `conn` is already in one) with `search_path` pinned to `pg_catalog`, and
/// reads only `pg_catalog`, so a hostile `search_path` or a same-named table in
/// another schema cannot change the answer.
pub async fn check_readiness(
    conn: &mut PgConnection,
    schema: &SchemaName,
) -> Result<ReadinessReport, Error> {
    let mut tx = conn.begin().await?;
    let previous_path = pin_search_path(&mut tx).await?;
    let names: Vec<&str> = TABLES.to_vec();

    let tables: BTreeSet<String> = sqlx::query(
        "SELECT c.relname::text AS relname \
         FROM pg_catalog.pg_class c \
         JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) c.relnamespace \
         WHERE n.nspname OPERATOR(pg_catalog.=) $1::text::pg_catalog.name \
           AND c.relname::text OPERATOR(pg_catalog.=) ANY ($2::text[]) \
           AND c.relkind OPERATOR(pg_catalog.=) ANY (ARRAY['r', 'p']::\"char\"[])",
    )
    .bind(schema.as_str())
    .bind(&names)
    .fetch_all(&mut *tx)
    .await?
    .iter()
    .map(|r| r.try_get::<String, _>("relname"))
    .collect::<Result<_, _>>()?;

    let mut columns: BTreeMap<(String, String), (String, bool)> = BTreeMap::new();
    for r in sqlx::query(
        "SELECT c.relname::text AS relname, a.attname::text AS attname, \
                pg_catalog.format_type(a.atttypid, a.atttypmod) AS ty, a.attnotnull \
         FROM pg_catalog.pg_class c \
         JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) c.relnamespace \
         JOIN pg_catalog.pg_attribute a ON a.attrelid OPERATOR(pg_catalog.=) c.oid \
         WHERE n.nspname OPERATOR(pg_catalog.=) $1::text::pg_catalog.name \
           AND c.relname::text OPERATOR(pg_catalog.=) ANY ($2::text[]) \
           AND a.attnum OPERATOR(pg_catalog.>) 0 AND NOT a.attisdropped",
    )
    .bind(schema.as_str())
    .bind(&names)
    .fetch_all(&mut *tx)
    .await?
    {
        columns.insert(
            (r.try_get("relname")?, r.try_get("attname")?),
            (r.try_get("ty")?, r.try_get("attnotnull")?),
        );
    }

    let checks: BTreeSet<(String, String)> = sqlx::query(
        "SELECT c.relname::text AS relname, con.conname::text AS conname \
         FROM pg_catalog.pg_constraint con \
         JOIN pg_catalog.pg_class c ON c.oid OPERATOR(pg_catalog.=) con.conrelid \
         JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) c.relnamespace \
         WHERE n.nspname OPERATOR(pg_catalog.=) $1::text::pg_catalog.name \
           AND c.relname::text OPERATOR(pg_catalog.=) ANY ($2::text[]) \
           AND con.contype OPERATOR(pg_catalog.=) 'c'::\"char\"",
    )
    .bind(schema.as_str())
    .bind(&names)
    .fetch_all(&mut *tx)
    .await?
    .iter()
    .map(|r| Ok((r.try_get("relname")?, r.try_get("conname")?)))
    .collect::<Result<_, sqlx::Error>>()?;

    // Every index with its key columns in order; expression columns show as NULL.
    let mut indexes = Vec::new();
    for r in sqlx::query(
        "SELECT c.relname::text AS relname, ix.indisunique, ix.indisprimary, \
                (ix.indpred IS NOT NULL OR ix.indexprs IS NOT NULL) AS partial_or_expression, \
                COALESCE(con.condeferrable, false) AS deferrable, \
                ARRAY(SELECT a.attname::text \
                        FROM pg_catalog.unnest(ix.indkey::pg_catalog.int2[]) WITH ORDINALITY AS k(attnum, ord) \
                        LEFT JOIN pg_catalog.pg_attribute a \
                          ON a.attrelid OPERATOR(pg_catalog.=) c.oid AND a.attnum OPERATOR(pg_catalog.=) k.attnum \
                       WHERE k.ord OPERATOR(pg_catalog.<=) ix.indnkeyatts \
                       ORDER BY k.ord) AS columns \
         FROM pg_catalog.pg_index ix \
         JOIN pg_catalog.pg_class c ON c.oid OPERATOR(pg_catalog.=) ix.indrelid \
         JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) c.relnamespace \
         LEFT JOIN pg_catalog.pg_constraint con ON con.conindid OPERATOR(pg_catalog.=) ix.indexrelid \
              AND con.conrelid OPERATOR(pg_catalog.=) c.oid \
         WHERE n.nspname OPERATOR(pg_catalog.=) $1::text::pg_catalog.name \
           AND c.relname::text OPERATOR(pg_catalog.=) ANY ($2::text[])",
    )
    .bind(schema.as_str())
    .bind(&names)
    .fetch_all(&mut *tx)
    .await?
    {
        let columns: Vec<Option<String>> = r.try_get("columns")?;
        let has_expression = columns.iter().any(Option::is_none);
        indexes.push(IndexInfo {
            table: r.try_get("relname")?,
            columns: columns.into_iter().flatten().collect(),
            unique: r.try_get("indisunique")?,
            primary: r.try_get("indisprimary")?,
            partial_or_expression: r.try_get::<bool, _>("partial_or_expression")? || has_expression,
            deferrable: r.try_get("deferrable")?,
        });
    }
    restore_search_path(&mut tx, &previous_path).await?;
    tx.commit().await?;

    let mut report = ReadinessReport {
        schema: schema.clone(),
        problems: Vec::new(),
        warnings: Vec::new(),
    };
    for spec in &SPEC {
        judge_table(spec, &tables, &columns, &checks, &indexes, &mut report);
    }
    for w in &report.warnings {
        tracing::warn!(schema = schema.as_str(), "{w}");
    }
    Ok(report)
}

fn same_set(a: &[String], b: &[&str]) -> bool {
    a.len() == b.len() && b.iter().all(|c| a.iter().any(|x| x == c))
}

fn judge_table(
    spec: &TableSpec,
    tables: &BTreeSet<String>,
    columns: &BTreeMap<(String, String), (String, bool)>,
    checks: &BTreeSet<(String, String)>,
    indexes: &[IndexInfo],
    report: &mut ReadinessReport,
) {
    let t = spec.name;
    if !tables.contains(t) {
        report
            .problems
            .push(ReadinessProblem::MissingTable { table: t });
        return;
    }
    for c in spec.columns {
        match columns.get(&(t.to_owned(), c.name.to_owned())) {
            None => report.problems.push(ReadinessProblem::MissingColumn {
                table: t,
                column: c.name,
            }),
            Some((ty, not_null)) => {
                if ty != c.ty {
                    report.problems.push(ReadinessProblem::WrongColumnType {
                        table: t,
                        column: c.name,
                        expected: c.ty,
                        found: ty.clone(),
                    });
                }
                if *not_null != c.not_null {
                    report.problems.push(ReadinessProblem::WrongNullability {
                        table: t,
                        column: c.name,
                        expected_not_null: c.not_null,
                    });
                }
            }
        }
    }
    let on_table = || indexes.iter().filter(|i| i.table == t);
    if !on_table().any(|i| i.primary && same_set(&i.columns, spec.primary_key)) {
        report.problems.push(ReadinessProblem::MissingPrimaryKey {
            table: t,
            columns: spec.primary_key,
        });
    }
    for key in spec.unique {
        let usable: Vec<&IndexInfo> = on_table()
            .filter(|i| i.unique && !i.partial_or_expression && same_set(&i.columns, key))
            .collect();
        if usable.is_empty() {
            report.problems.push(ReadinessProblem::MissingUniqueIndex {
                table: t,
                columns: key,
            });
        } else if usable.iter().all(|i| i.deferrable) {
            report
                .problems
                .push(ReadinessProblem::DeferrableUniqueIndex {
                    table: t,
                    columns: key,
                });
        }
    }
    for name in spec.checks {
        if !checks.contains(&(t.to_owned(), (*name).to_owned())) {
            report.problems.push(ReadinessProblem::MissingCheck {
                table: t,
                constraint: name,
            });
        }
    }
    for key in spec.speed {
        let served = on_table().any(|i| {
            !i.partial_or_expression
                && i.columns.len() >= key.len()
                && i.columns.iter().zip(key.iter()).all(|(a, b)| a == b)
        });
        if !served {
            report.warnings.push(ReadinessWarning::MissingIndex {
                table: t,
                columns: key,
            });
        }
    }
}
