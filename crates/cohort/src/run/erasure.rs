//! Right to erasure: every row of one subject in one tenant, through the
//! sweep's execution model.

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use sqlx::{Acquire, PgConnection};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use super::execute::{Erasure, RunSpec, in_scope};
use super::plan::plan;
use super::{RunResult, VacuumOptions};
use crate::engine::Engine;
use crate::error::Error;
use crate::ledger::{RunKind, Trigger};
use crate::model::resolved::{Column, ResolvedEntity};
use crate::policy::{Scope, Strategy};
use crate::sql::AssertSqlSafe;

/// The longest subject Cohort accepts, in bytes.
pub const MAX_SUBJECT_BYTES: usize = 1024;

/// A data subject's identifier, as the text PostgreSQL would print for it.
/// Each subject column compares it through its own type (`uuid`, text,
/// integers, ...).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Subject(String);

impl Subject {
    /// The subject's text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl From<Uuid> for Subject {
    fn from(id: Uuid) -> Self {
        Subject(id.to_string())
    }
}

impl From<i64> for Subject {
    fn from(id: i64) -> Self {
        Subject(id.to_string())
    }
}

impl From<&str> for Subject {
    fn from(id: &str) -> Self {
        Subject(id.to_owned())
    }
}

impl From<String> for Subject {
    fn from(id: String) -> Self {
        Subject(id)
    }
}

/// A right-to-erasure request.
///
/// ```
/// use cohort::ErasureRequest;
/// let request = ErasureRequest::new(uuid::Uuid::new_v4()).dry_run();
/// assert!(request.is_dry_run());
/// ```
#[derive(Debug, Clone)]
pub struct ErasureRequest {
    subject: Subject,
    dry_run: bool,
    allow_soft_delete: bool,
    /// Types accepted as soft-delete erasure one by one.
    soft_delete_types: Vec<Uuid>,
    cancellation: Option<CancellationToken>,
    vacuum: Option<VacuumOptions>,
    /// The erasure run this one replays (set by the replay only).
    replay_of: Option<Uuid>,
}

impl ErasureRequest {
    /// Erase every row of `subject`.
    pub fn new(subject: impl Into<Subject>) -> ErasureRequest {
        ErasureRequest {
            subject: subject.into(),
            dry_run: false,
            allow_soft_delete: false,
            soft_delete_types: Vec::new(),
            cancellation: None,
            vacuum: None,
            replay_of: None,
        }
    }

    /// Count what would change and write the ledger, changing no row.
    pub fn dry_run(mut self) -> Self {
        self.dry_run = true;
        self
    }

    /// Accept soft-delete as erasure for categories that resolve to it
    /// (otherwise such a request is refused: a flag leaves personal data in
    /// the row).
    pub fn allow_soft_delete(mut self) -> Self {
        self.allow_soft_delete = true;
        self
    }

    /// Accept soft-delete as erasure for type `T` only (repeat for each type
    /// where a flag is enough); other soft-delete types still refuse the
    /// request.
    pub fn allow_soft_delete_for<T: crate::Retained>(mut self) -> Self {
        if let Some(id) = T::entity_id() {
            self.soft_delete_types.push(id);
        }
        self
    }

    /// Stops the run at the next batch boundary when `token` is cancelled.
    pub fn cancel_on(mut self, token: CancellationToken) -> Self {
        self.cancellation = Some(token);
        self
    }

    /// After the run, `VACUUM (ANALYZE)` every table it changed a row in,
    /// so the erased rows' old versions leave the table's heap (contract
    /// SA3; [`RunResult::tables`] says how each went, and the certificate
    /// built afterwards reports the table as vacuumed since the erasure).
    /// `VACUUM` needs the table's owner (or `MAINTAIN` on PostgreSQL 16+).
    ///
    /// ```
    /// let request = cohort::ErasureRequest::new("ann@example.com").vacuum();
    /// assert!(request.vacuums());
    /// ```
    pub fn vacuum(self) -> Self {
        self.vacuum_with(VacuumOptions::default().min_rows(1))
    }

    /// [`ErasureRequest::vacuum`] with its threshold and time bound.
    pub fn vacuum_with(mut self, options: VacuumOptions) -> Self {
        self.vacuum = Some(options);
        self
    }

    /// Whether the run ends by vacuuming the tables it changed.
    pub fn vacuums(&self) -> bool {
        self.vacuum.is_some()
    }

    /// Marks the request as the replay of erasure run `run` (contract SA2).
    pub(crate) fn replaying(mut self, run: Uuid) -> Self {
        self.replay_of = Some(run);
        self
    }

    /// Whether this is a dry run.
    pub fn is_dry_run(&self) -> bool {
        self.dry_run
    }
}

impl Engine {
    /// The erasure at `now` (already at PostgreSQL's precision).
    pub(crate) async fn run_erasure(
        &self,
        scope: &Scope,
        now: DateTime<Utc>,
        request: ErasureRequest,
    ) -> Result<RunResult, Error> {
        let subject = request.subject.as_str();
        check_subject(subject)?;
        let inner = self;
        // Detached from the pool, as for sweeps: dropping this future closes it.
        let mut conn = inner.pool.acquire().await?.detach();
        self.ensure_ready(&mut conn).await?;

        let matched = subject_columns(&mut conn, subject, &inner.model.entities, scope).await?;
        let mut entities = Vec::new();
        let mut refused = Vec::new();
        // A type whose rows take their category from a column is erased
        // category by category, each as its own rule says (contract SL3).
        let matched: Vec<(&ResolvedEntity, Vec<&Column>)> = matched
            .into_iter()
            .flat_map(|(base, columns)| {
                base.slices().into_iter().map(move |e| {
                    let columns: Vec<&Column> = e
                        .subjects
                        .iter()
                        .filter(|c| columns.iter().any(|s| s.name == c.name))
                        .collect();
                    (e, columns)
                })
            })
            .collect();
        for (e, columns) in matched {
            let planned = plan(inner.provider.as_ref(), e, scope.tenant(), now).await;
            let soft_delete = planned
                .as_ref()
                .is_ok_and(|p| p.rule.strategy == Strategy::SoftDelete);
            let allowed =
                request.allow_soft_delete || request.soft_delete_types.contains(&e.entity_id);
            if soft_delete && !allowed {
                refused.push(e.type_name());
            }
            // An archiving type's archived rows of the subject go too, as
            // a purge of its archive table (contract SL2).
            let archived = e.archive.as_ref().map(|archive| {
                let columns: Vec<&Column> = archive
                    .entity
                    .subjects
                    .iter()
                    .filter(|c| columns.iter().any(|s| s.name == c.name))
                    .collect();
                let planned = planned.clone().map(|mut p| {
                    p.rule.strategy = Strategy::Purge;
                    p
                });
                (&archive.entity, columns, planned)
            });
            entities.push((e, columns, planned));
            entities.extend(archived);
        }
        if !refused.is_empty() {
            return Err(Error::SoftDeleteErasureRefused {
                entity_types: refused,
            });
        }
        let spec = RunSpec {
            kind: RunKind::Erasure,
            trigger: Trigger::Manual,
            dry_run: request.dry_run,
            cancellation: request.cancellation.clone(),
            erasure: Some(Erasure {
                subject,
                subject_hmac: inner
                    .subject_key
                    .as_deref()
                    .map(|key| crate::evidence::subject_hmac_bytes(key, subject)),
                replay_of: request.replay_of,
                entities,
            }),
        };
        let mut result = self.execute(&mut conn, scope, now, spec).await;
        if let Ok(run) = &mut result {
            run.tables = self
                .after_run(&mut conn, run, request.vacuum.as_ref())
                .await;
        }
        super::sweep::close(conn).await;
        result
    }
}

/// Refuses a subject that is empty, longer than [`MAX_SUBJECT_BYTES`] or
/// holds a NUL.
pub(super) fn check_subject(subject: &str) -> Result<(), Error> {
    if subject.is_empty() || subject.len() > MAX_SUBJECT_BYTES || subject.contains('\0') {
        return Err(Error::InvalidSubject {
            reason: "the subject must be 1 to 1024 bytes of text without NUL",
        });
    }
    Ok(())
}

/// The retained types of `scope` with the erasure-subject columns whose
/// type accepts `subject`, in model order (types where none does are left
/// out): the rows an erasure and a subject access export both match (E9).
/// [`Error::InvalidSubject`] when no type is left.
pub(super) async fn subject_columns<'e>(
    conn: &mut PgConnection,
    subject: &str,
    entities: &'e [ResolvedEntity],
    scope: &Scope,
) -> Result<Vec<(&'e ResolvedEntity, Vec<&'e Column>)>, Error> {
    let candidates: Vec<&ResolvedEntity> = entities
        .iter()
        .filter(|e| in_scope(e, scope) && !e.subjects.is_empty())
        .collect();
    let usable = usable_types(conn, subject, &candidates).await?;
    let matched: Vec<_> = candidates
        .into_iter()
        .filter_map(|e| {
            let columns: Vec<&Column> = e
                .subjects
                .iter()
                .filter(|c| usable.get(&c.cmp_type).copied().unwrap_or(false))
                .collect();
            (!columns.is_empty()).then_some((e, columns))
        })
        .collect();
    if matched.is_empty() {
        return Err(Error::InvalidSubject {
            reason: "no erasure-subject column of this scope's retained types accepts the subject",
        });
    }
    Ok(matched)
}

/// Which subject column types accept `subject` (cast under a savepoint each,
/// so a wrong-shaped subject is simply not a match for that column).
async fn usable_types(
    conn: &mut PgConnection,
    subject: &str,
    entities: &[&ResolvedEntity],
) -> Result<HashMap<String, bool>, Error> {
    let mut usable = HashMap::new();
    let mut tx = conn.begin().await?;
    crate::sql::query(crate::sql::PIN_SEARCH_PATH)
        .execute(&mut *tx)
        .await?;
    for e in entities {
        for c in &e.subjects {
            if usable.contains_key(&c.cmp_type) {
                continue;
            }
            let mut savepoint = tx.begin().await?;
            // The comparison type, with no modifier: a subject a varchar(5)
            // cannot hold is still readable as text, and then simply equals
            // no value of the column. The statement returns a boolean, not
            // the host's type: sqlx looks an unknown result type up with a
            // simple query, which would drop this unnamed statement before
            // it runs ("unnamed prepared statement does not exist").
            let ok = crate::sql::query(AssertSqlSafe(format!(
                "SELECT CAST($1::pg_catalog.text AS {}) IS NOT NULL",
                c.cmp_type
            )))
            .bind(subject)
            .execute(&mut *savepoint)
            .await
            .is_ok();
            if ok {
                savepoint.commit().await?;
            } else {
                savepoint.rollback().await?;
            }
            usable.insert(c.cmp_type.clone(), ok);
        }
    }
    tx.commit().await?;
    Ok(usable)
}
