//! Erasure certificates (contract EV4).

use std::fmt;

use ed25519_dalek::{Signature, Signer, SigningKey, Verifier, VerifyingKey};
use hmac::{Hmac, KeyInit, Mac};
use serde::{Deserialize, Serialize};
use sha2::Sha256;
use sqlx::{PgConnection, Row};
use uuid::Uuid;

use super::physical::PhysicalState;
use super::{ChainHead, EvidenceError, to_hex};
use crate::error::Error;
use crate::schema::SchemaName;
use crate::sql::AssertSqlSafe;

/// The format version of certificates this library writes.
pub const CERTIFICATE_VERSION: &str = "cohort-erasure-certificate/1";

/// A count of rows left in place, with its reason.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BlockedCount {
    /// How many rows.
    pub count: i64,
    /// Why they were left: `hold` (an active legal hold),
    /// `legal_minimum` (the legal minimum had not passed) or `null_anchor`
    /// (no anchor, so the legal minimum cannot be judged passed).
    pub reason: String,
}

/// What an erasure did to one retained type (one ledger summary).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CertificateType {
    /// The retained-entity id.
    pub entity_id: Uuid,
    /// The Rust type's name.
    pub entity_type: String,
    /// Its category.
    pub category: String,
    /// The strategy applied (`Purge`, `Anonymise`, `SoftDelete`,
    /// `Exempt`, `Unresolved`).
    pub strategy: String,
    /// The summary's status (`Succeeded`, `Failed`, `Cancelled`).
    pub status: String,
    /// Rows erased (in a dry run: that would have been).
    pub erased: i64,
    /// Rows left in place, each count with its reason.
    pub blocked: Vec<BlockedCount>,
    /// The period applied (the legal minimum, ISO 8601), if any.
    pub applied_period: Option<String>,
    /// The cutoff applied (RFC 3339), if any.
    pub cutoff: Option<String>,
    /// The rule's provenance.
    pub rule_source: Option<String>,
    /// The rule's reason.
    pub rule_reason: Option<String>,
    /// The sanitized failure, when this type failed.
    pub error: Option<String>,
    /// Whether the erased rows' old versions may still be in the table's
    /// files, as read when the certificate was built (contract SA3); only
    /// for a type with erased rows in a real run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub physical: Option<PhysicalState>,
}

/// The run's link in the install's chain: the chain's head right after the
/// run settled.
pub type ChainLink = ChainHead;

/// An erasure certificate: what one erasure run did, per retained type.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Certificate {
    /// [`CERTIFICATE_VERSION`].
    pub version: String,
    /// The erasure run.
    pub run_id: Uuid,
    /// The run's status.
    pub status: String,
    /// Whether it was a dry run (nothing changed; counts are what would have).
    pub dry_run: bool,
    /// The tenant (nil for tenantless).
    pub tenant_id: Uuid,
    /// The subject as HMAC-SHA256 under the host's key, lower-case hex.
    pub subject_hmac: String,
    /// The subject in clear, only when the host asked for it.
    pub subject: Option<String>,
    /// The run's logical time (RFC 3339, UTC).
    pub logical_now: String,
    /// When the run started (RFC 3339, UTC).
    pub started_at: String,
    /// When it settled (RFC 3339, UTC).
    pub settled_at: Option<String>,
    /// The run's sanitized error, if any.
    pub error: Option<String>,
    /// Per retained type.
    pub types: Vec<CertificateType>,
    /// The run's link in the install's chain (the chain head at settle).
    pub chain_head: ChainLink,
    /// The matter holds in force during the run that kept rows of it: a
    /// matter over this subject, or over a type whose rows were held
    /// (contract MH3). Absent when none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub matters: Vec<CertificateMatter>,
    /// When this erasure replays, after a restore, the erasure run the
    /// register recorded (contract SA2): the certificate of a replay says
    /// so. Absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replay_of: Option<Uuid>,
}

/// A matter hold that kept rows of an erasure ([`Certificate::matters`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CertificateMatter {
    /// The matter's id.
    pub matter_id: Uuid,
    /// `Subject` (a matter over this data subject) or `Type` (over a table).
    pub scope: String,
    /// Why it was put on hold.
    pub reason: String,
    /// Who asked for it.
    pub owner: String,
}

/// What [`certificate`] needs from the host.
#[derive(Debug, Clone, Copy)]
pub struct CertificateOptions<'a> {
    /// The subject the erasure was for, as the host passed it to
    /// [`crate::ErasureRequest`]. The ledger stores only its keyed hash, so
    /// this must be the erased subject: any other is refused.
    pub subject: &'a str,
    /// The host's HMAC key, the one the handle that erased had
    /// ([`crate::CohortBuilder::subject_key`]): the certificate keeps the
    /// subject only as HMAC-SHA256(key, subject), so it can be matched by
    /// whoever holds the key and read by no one else.
    pub subject_key: &'a [u8],
    /// Also put the subject in clear (off unless the host asks).
    pub subject_in_clear: bool,
}

fn time_text(prefix: &str, c: &str) -> String {
    format!(
        "CASE WHEN {prefix}.{c} IS NULL THEN NULL WHEN pg_catalog.isfinite({prefix}.{c}) THEN \
           pg_catalog.to_char({prefix}.{c} AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"') \
         WHEN {prefix}.{c} OPERATOR(pg_catalog.>) 'epoch'::pg_catalog.timestamptz THEN 'infinity' \
         ELSE '-infinity' END AS {c}"
    )
}

/// Builds the certificate of erasure run `run_id` from the ledger.
///
/// The run must have been erasing `options.subject`: an erasure records
/// HMAC-SHA256 of its subject under the host's key
/// ([`crate::CohortBuilder::subject_key`]), and the certificate is refused
/// with [`EvidenceError::SubjectMismatch`] when `options.subject` under
/// `options.subject_key` hashes differently (another subject, or another
/// key), and with [`EvidenceError::SubjectNotRecorded`] when the run
/// recorded no hash (erased without a key, or before schema migration 6).
/// A subject that was erased and had no rows still gets its certificate.
///
/// Per type: the rows erased, and the rows left with their reasons: an
/// active hold (`held_count`), the legal minimum not yet passed
/// (`legal_minimum_count`) and a NULL anchor (`null_anchor_count`). The
/// run must be an erasure and must have settled (its chain link is the
/// certificate's chain head).
///
/// ```no_run
/// # async fn demo(pool: sqlx::PgPool, run_id: uuid::Uuid) -> Result<(), cohort::Error> {
/// use cohort::evidence::{CertificateOptions, certificate};
/// let mut conn = pool.acquire().await?;
/// let schema = cohort::schema::SchemaName::public();
/// let key = b"the host's certificate key, kept in its secret store";
/// let options = CertificateOptions { subject: "ann@example.com", subject_key: key, subject_in_clear: false };
/// let cert = certificate(&mut conn, &schema, run_id, &options).await?;
/// println!("{cert}");
/// # Ok(()) }
/// ```
pub async fn certificate(
    conn: &mut PgConnection,
    schema: &SchemaName,
    run_id: Uuid,
    options: &CertificateOptions<'_>,
) -> Result<Certificate, Error> {
    super::ensure_ready(conn, schema).await?;
    // One read-only snapshot: the run and its summaries agree, and every
    // statement is inside a transaction (a pooler in transaction mode keeps
    // them on one server connection).
    let mut tx = super::snapshot(conn).await?;
    let certificate = read_certificate(&mut tx, schema, run_id, options).await?;
    tx.commit().await?;
    Ok(certificate)
}

async fn read_certificate(
    conn: &mut PgConnection,
    schema: &SchemaName,
    run_id: Uuid,
    options: &CertificateOptions<'_>,
) -> Result<Certificate, Error> {
    let run = crate::sql::query(AssertSqlSafe(format!(
        "SELECT r.run_kind, r.status, r.dry_run, r.tenant_id, r.error, r.chain_seq, r.subject_hmac, r.replay_of, \
                pg_catalog.encode(r.chain_hash, 'hex') AS chain_hash, {}, {}, {} \
         FROM {} AS r WHERE r.run_id OPERATOR(pg_catalog.=) $1",
        time_text("r", "logical_now"),
        time_text("r", "started_at"),
        time_text("r", "settled_at"),
        schema.table("sweep_run")
    )))
    .bind(run_id)
    .fetch_optional(&mut *conn)
    .await?
    .ok_or(EvidenceError::NoSuchRun { run_id })?;
    let kind: String = run.try_get("run_kind")?;
    if kind != "Erasure" {
        return Err(EvidenceError::NotAnErasure { run_id }.into());
    }
    let status: String = run.try_get("status")?;
    let seq: Option<i64> = run.try_get("chain_seq")?;
    let hash: Option<String> = run.try_get("chain_hash")?;
    let (Some(seq), Some(hash)) = (seq, hash) else {
        return Err(EvidenceError::NotSettled { run_id }.into());
    };
    // The run recorded its subject's keyed hash: certify only that subject.
    let recorded: Option<Vec<u8>> = run.try_get("subject_hmac")?;
    match recorded {
        None => return Err(EvidenceError::SubjectNotRecorded { run_id }.into()),
        Some(recorded) if !is_subject(options.subject_key, options.subject, &recorded) => {
            return Err(EvidenceError::SubjectMismatch { run_id }.into());
        }
        Some(_) => {}
    }

    let rows = crate::sql::query(AssertSqlSafe(format!(
        "SELECT s.retained_entity_id, s.entity_type, s.category, s.strategy, s.status, \
                s.affected_count, s.held_count, s.legal_minimum_count, s.null_anchor_count, \
                s.applied_period, s.rule_source, s.rule_reason, s.error, {} \
         FROM {} AS s WHERE s.run_id OPERATOR(pg_catalog.=) $1 ORDER BY s.summary_id",
        time_text("s", "cutoff"),
        schema.table("sweep_run_entity_summary")
    )))
    .bind(run_id)
    .fetch_all(&mut *conn)
    .await?;
    let mut types = Vec::with_capacity(rows.len());
    for r in &rows {
        let mut blocked = Vec::new();
        for (column, reason) in [
            ("held_count", "hold"),
            ("legal_minimum_count", "legal_minimum"),
            ("null_anchor_count", "null_anchor"),
        ] {
            blocked.push(BlockedCount {
                count: r.try_get(column)?,
                reason: reason.to_owned(),
            });
        }
        types.push(CertificateType {
            entity_id: r.try_get("retained_entity_id")?,
            entity_type: r.try_get("entity_type")?,
            category: r.try_get("category")?,
            strategy: r.try_get("strategy")?,
            status: r.try_get("status")?,
            erased: r.try_get("affected_count")?,
            blocked,
            applied_period: r.try_get("applied_period")?,
            cutoff: r.try_get("cutoff")?,
            rule_source: r.try_get("rule_source")?,
            rule_reason: r.try_get("rule_reason")?,
            error: r.try_get("error")?,
            physical: None,
        });
    }
    let dry_run: bool = run.try_get("dry_run")?;
    if !dry_run {
        for t in types.iter_mut().filter(|t| t.erased > 0) {
            t.physical = super::physical::physical_state(conn, schema, run_id, t.entity_id).await?;
        }
    }
    // The matters that kept rows: in force at some time during the run, of
    // the run's tenant, over this subject or over a type with held rows.
    let held_types: Vec<Uuid> = types
        .iter()
        .filter(|t| t.blocked.iter().any(|b| b.reason == "hold" && b.count > 0))
        .map(|t| t.entity_id)
        .collect();
    let matters = if held_types.is_empty() {
        Vec::new()
    } else {
        let rows = crate::sql::query(AssertSqlSafe(format!(
            "SELECT m.matter_id, m.scope_kind, m.reason, m.owner \
             FROM {matters} AS m JOIN {runs} AS r ON r.run_id OPERATOR(pg_catalog.=) $1 \
             WHERE m.tenant_id IS NOT DISTINCT FROM \
                   NULLIF(r.tenant_id, '00000000-0000-0000-0000-000000000000'::pg_catalog.uuid) \
               AND m.created_at OPERATOR(pg_catalog.<=) COALESCE(r.settled_at, pg_catalog.statement_timestamp()) \
               AND COALESCE(LEAST(m.expires_at, m.released_at), 'infinity'::pg_catalog.timestamptz) \
                   OPERATOR(pg_catalog.>) r.started_at \
               AND ((m.scope_kind OPERATOR(pg_catalog.=) 'Subject' AND m.subject OPERATOR(pg_catalog.=) $2 \
                     AND (m.entity_ids IS NULL OR m.entity_ids OPERATOR(pg_catalog.&&) $3::pg_catalog.uuid[])) \
                 OR (m.scope_kind OPERATOR(pg_catalog.=) 'Type' \
                     AND m.retained_entity_id OPERATOR(pg_catalog.=) ANY ($3::pg_catalog.uuid[]))) \
             ORDER BY m.created_at, m.matter_id",
            matters = schema.table("retention_matters"),
            runs = schema.table("sweep_run"),
        )))
        .bind(run_id)
        .bind(options.subject)
        .bind(&held_types)
        .fetch_all(&mut *conn)
        .await?;
        let mut out = Vec::with_capacity(rows.len());
        for r in rows {
            out.push(CertificateMatter {
                matter_id: r.try_get("matter_id")?,
                scope: r.try_get("scope_kind")?,
                reason: r.try_get("reason")?,
                owner: r.try_get("owner")?,
            });
        }
        out
    };
    Ok(Certificate {
        matters,
        replay_of: run.try_get("replay_of")?,
        version: CERTIFICATE_VERSION.to_owned(),
        run_id,
        status,
        dry_run,
        tenant_id: run.try_get("tenant_id")?,
        subject_hmac: subject_hmac(options.subject_key, options.subject),
        subject: options.subject_in_clear.then(|| options.subject.to_owned()),
        logical_now: run
            .try_get::<Option<String>, _>("logical_now")?
            .unwrap_or_default(),
        started_at: run
            .try_get::<Option<String>, _>("started_at")?
            .unwrap_or_default(),
        settled_at: run.try_get("settled_at")?,
        error: run.try_get("error")?,
        types,
        chain_head: ChainHead { seq, hash },
    })
}

/// HMAC-SHA256(`key`, `subject`), lower-case hex: how a certificate names its
/// subject. Whoever holds the key can check a subject against a certificate.
///
/// ```
/// let a = cohort::evidence::subject_hmac(b"key", "ann@example.com");
/// assert_eq!(a.len(), 64);
/// assert_ne!(a, cohort::evidence::subject_hmac(b"other key", "ann@example.com"));
/// ```
pub fn subject_hmac(key: &[u8], subject: &str) -> String {
    to_hex(&subject_hmac_bytes(key, subject))
}

/// HMAC-SHA256(`key`, `subject`) as bytes: what an erasure run records.
pub(crate) fn subject_hmac_bytes(key: &[u8], subject: &str) -> Vec<u8> {
    subject_mac(key, subject)
        .map(|mac| mac.finalize().into_bytes().to_vec())
        .unwrap_or_default()
}

fn subject_mac(key: &[u8], subject: &str) -> Option<Hmac<Sha256>> {
    // HMAC takes keys of any length; `new_from_slice` cannot fail for it.
    let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(key).ok()?;
    mac.update(subject.as_bytes());
    Some(mac)
}

/// Whether `recorded` (an erasure run's `subject_hmac`) is the hash of
/// `subject` under `key`, compared in constant time.
fn is_subject(key: &[u8], subject: &str, recorded: &[u8]) -> bool {
    subject_mac(key, subject).is_some_and(|mac| mac.verify_slice(recorded).is_ok())
}

impl Certificate {
    /// The certificate as compact JSON: what a signature covers.
    pub fn to_json(&self) -> String {
        // Serializing plain strings, numbers and options cannot fail.
        serde_json::to_string(self).unwrap_or_default()
    }

    /// Signs the certificate with the host's Ed25519 key.
    pub fn sign(self, key: &SigningKey) -> SignedCertificate {
        let signature = key.sign(self.to_json().as_bytes());
        SignedCertificate {
            certificate: self,
            signature: Some(CertificateSignature {
                algorithm: "Ed25519".to_owned(),
                public_key: to_hex(key.verifying_key().as_bytes()),
                value: to_hex(&signature.to_bytes()),
            }),
        }
    }

    /// An unsigned document (for hosts that keep no signing key).
    pub fn unsigned(self) -> SignedCertificate {
        SignedCertificate {
            certificate: self,
            signature: None,
        }
    }
}

impl fmt::Display for Certificate {
    /// The readable text of the certificate.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "ERASURE CERTIFICATE ({})", self.version)?;
        writeln!(f, "Run:          {}", self.run_id)?;
        writeln!(
            f,
            "Status:       {}{}",
            self.status,
            if self.dry_run {
                " (dry run: nothing was changed; counts are what would have been)"
            } else {
                ""
            }
        )?;
        writeln!(f, "Tenant:       {}", self.tenant_id)?;
        match &self.subject {
            Some(s) => writeln!(f, "Subject:      {s} (HMAC-SHA256 {})", self.subject_hmac)?,
            None => writeln!(f, "Subject:      HMAC-SHA256 {}", self.subject_hmac)?,
        }
        if let Some(original) = self.replay_of {
            writeln!(f, "Replay of:    {original} (erased again after a restore)")?;
        }
        writeln!(f, "Logical time: {}", self.logical_now)?;
        writeln!(f, "Started:      {}", self.started_at)?;
        writeln!(
            f,
            "Settled:      {}",
            self.settled_at.as_deref().unwrap_or("-")
        )?;
        if let Some(e) = &self.error {
            writeln!(f, "Error:        {e}")?;
        }
        writeln!(
            f,
            "Chain head:   {} {}",
            self.chain_head.seq, self.chain_head.hash
        )?;
        for m in &self.matters {
            writeln!(
                f,
                "Matter hold:  {} ({}, owner {}): {}",
                m.matter_id, m.scope, m.owner, m.reason
            )?;
        }
        for t in &self.types {
            writeln!(f)?;
            writeln!(
                f,
                "{} ({}), category {}, {}: {}",
                t.entity_type, t.entity_id, t.category, t.strategy, t.status
            )?;
            writeln!(f, "  erased: {}", t.erased)?;
            for b in &t.blocked {
                let why = match b.reason.as_str() {
                    "hold" => "left: an active legal hold or matter",
                    "legal_minimum" => "left: the legal minimum has not passed",
                    "null_anchor" => "left: NULL anchor",
                    other => other,
                };
                writeln!(f, "  {why}: {}", b.count)?;
            }
            if let Some(p) = &t.applied_period {
                writeln!(f, "  legal minimum applied: {p}")?;
            }
            if let Some(c) = &t.cutoff {
                writeln!(f, "  cutoff: {c}")?;
            }
            if t.rule_source.is_some() || t.rule_reason.is_some() {
                writeln!(
                    f,
                    "  rule: {} / {}",
                    t.rule_source.as_deref().unwrap_or("-"),
                    t.rule_reason.as_deref().unwrap_or("-")
                )?;
            }
            if let Some(e) = &t.error {
                writeln!(f, "  error: {e}")?;
            }
            if let Some(p) = &t.physical {
                let state = if p.dead_tuples_may_remain {
                    "the erased rows' old versions may still be in the table's files"
                } else {
                    "vacuumed since the erasure, no dead tuple left in the table"
                };
                writeln!(
                    f,
                    "  on disk ({}, checked {}): {state}",
                    p.table, p.checked_at
                )?;
                writeln!(
                    f,
                    "    last vacuum: {}; dead tuples: {}",
                    p.vacuumed_at.as_deref().unwrap_or("never"),
                    p.dead_tuples
                        .map_or("unknown".to_owned(), |d| d.to_string())
                )?;
            }
        }
        Ok(())
    }
}

/// A certificate's Ed25519 signature.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CertificateSignature {
    /// `Ed25519`.
    pub algorithm: String,
    /// The verifying key, hex (32 bytes).
    pub public_key: String,
    /// The signature over [`Certificate::to_json`], hex (64 bytes).
    pub value: String,
}

/// A certificate document: the certificate and, when the host signed it,
/// the signature.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SignedCertificate {
    /// The certificate.
    pub certificate: Certificate,
    /// Its signature, if signed.
    pub signature: Option<CertificateSignature>,
}

impl SignedCertificate {
    /// The document as compact JSON (canonical: what [`Self::verify`] accepts).
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }

    /// Checks a document: it must be exactly what [`Self::to_json`] writes
    /// (so any changed byte is refused, even one JSON would ignore), carry a
    /// signature by `key`, and that signature must verify over the
    /// certificate. One line ending after the document (`\n` or `\r\n`,
    /// as the `cohort certificate` command and most editors end a file) is
    /// not part of it. Returns the certificate.
    ///
    /// ```
    /// use cohort::evidence::{SignedCertificate};
    /// # fn demo(document: &str, key: &ed25519_dalek::VerifyingKey) -> Result<(), cohort::evidence::EvidenceError> {
    /// let certificate = SignedCertificate::verify(document, key)?;
    /// println!("run {} verified", certificate.run_id);
    /// # Ok(()) }
    /// ```
    pub fn verify(document: &str, key: &VerifyingKey) -> Result<Certificate, EvidenceError> {
        let document = document
            .strip_suffix("\r\n")
            .or_else(|| document.strip_suffix('\n'))
            .unwrap_or(document);
        let parsed: SignedCertificate =
            serde_json::from_str(document).map_err(|e| EvidenceError::MalformedCertificate {
                reason: e.to_string(),
            })?;
        if parsed.to_json() != document {
            return Err(EvidenceError::MalformedCertificate {
                reason: "the document is not in canonical form".to_owned(),
            });
        }
        let sig = parsed
            .signature
            .as_ref()
            .ok_or(EvidenceError::BadSignature)?;
        if sig.algorithm != "Ed25519" || sig.public_key != to_hex(key.as_bytes()) {
            return Err(EvidenceError::BadSignature);
        }
        let bytes: [u8; 64] = hex::decode(&sig.value)
            .ok()
            .and_then(|b| b.try_into().ok())
            .ok_or(EvidenceError::BadSignature)?;
        let signature = Signature::from_bytes(&bytes);
        key.verify(parsed.certificate.to_json().as_bytes(), &signature)
            .map_err(|_| EvidenceError::BadSignature)?;
        Ok(parsed.certificate)
    }
}
