//! Replaying erasures after a restore (contract SA2): the erasures of the
//! register ([`crate::evidence::write_erasure_register`]) that settled since
//! a time are run again, each subject taken from a list the host provides
//! (the register holds only keyed hashes).

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use serde::Serialize;
use uuid::Uuid;

use super::ErasureRequest;
use super::erasure::check_subject;
use crate::engine::Engine;
use crate::error::Error;
use crate::evidence::RegisterEntry;
use crate::ledger::RunStatus;
use crate::policy::{Scope, TenantContext};

/// One erasure of the register run again.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct ReplayedErasure {
    /// The erasure run the register recorded.
    pub original_run: Uuid,
    /// The new erasure run (certify it with
    /// [`crate::evidence::certificate`] and the same subject).
    pub run_id: Uuid,
    /// The tenant (nil for tenantless).
    pub tenant_id: Uuid,
    /// Rows the replay erased: what the restore brought back (0 when there
    /// was nothing left to erase, as on a second replay).
    pub affected: u64,
    /// How the replay run ended.
    pub status: RunStatus,
}

/// An erasure of the register that could not be replayed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct ReplayFailure {
    /// The erasure run the register recorded.
    pub original_run: Uuid,
    /// Why (the erasure's error).
    pub reason: String,
}

/// What [`crate::Cohort::replay_erasures`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct ReplayReport {
    /// The erasures run again, in the register's order.
    pub replayed: Vec<ReplayedErasure>,
    /// Erasures of the register (since the time) whose subject is in none
    /// of the host's subjects: not replayed.
    pub unmatched: Vec<Uuid>,
    /// Erasures whose replay failed.
    pub failed: Vec<ReplayFailure>,
}

impl ReplayReport {
    /// Whether the register held nothing to replay since the time.
    pub fn is_empty(&self) -> bool {
        self.replayed.is_empty() && self.unmatched.is_empty() && self.failed.is_empty()
    }

    /// Rows erased again, all replays together.
    pub fn affected(&self) -> u64 {
        self.replayed.iter().map(|r| r.affected).sum()
    }
}

impl Engine {
    /// See [`crate::Cohort::replay_erasures`].
    pub(crate) async fn run_replay(
        &self,
        register: &[RegisterEntry],
        subjects: impl IntoIterator<Item = (Option<Uuid>, String)>,
        since: DateTime<Utc>,
        now: DateTime<Utc>,
    ) -> Result<ReplayReport, Error> {
        let Some(key) = self.subject_key.as_deref() else {
            return Err(Error::SubjectKeyMissing);
        };
        // The host's subjects by (tenant, keyed hash): the register's side.
        // A subject no erasure could have taken is a mistake in the list:
        // refused before anything is replayed.
        let mut by_hash: HashMap<(Uuid, String), String> = HashMap::new();
        for (tenant, subject) in subjects {
            check_subject(&subject)?;
            let hash = crate::evidence::subject_hmac(key, &subject);
            by_hash.insert((tenant.unwrap_or(Uuid::nil()), hash), subject);
        }
        let mut due: Vec<&RegisterEntry> =
            register.iter().filter(|e| e.settled_at >= since).collect();
        due.sort_by_key(|e| (e.settled_at, e.run_id));
        let mut report = ReplayReport::default();
        for entry in due {
            let Some(subject) = by_hash.get(&(entry.tenant_id, entry.subject_hmac.clone())) else {
                report.unmatched.push(entry.run_id);
                continue;
            };
            let scope = if entry.tenant_id.is_nil() {
                Scope::Tenantless
            } else {
                Scope::Tenant(TenantContext::new(entry.tenant_id))
            };
            // The recorded erasure ran, so whatever it accepted (soft-delete
            // included) the replay accepts too.
            let request = ErasureRequest::new(subject.as_str())
                .allow_soft_delete()
                .replaying(entry.run_id);
            match self.run_erasure(&scope, now, request).await {
                Ok(run) => report.replayed.push(ReplayedErasure {
                    original_run: entry.run_id,
                    run_id: run.run_id,
                    tenant_id: entry.tenant_id,
                    affected: run.affected(),
                    status: run.status,
                }),
                Err(e) => report.failed.push(ReplayFailure {
                    original_run: entry.run_id,
                    reason: e.to_string(),
                }),
            }
        }
        Ok(report)
    }
}
