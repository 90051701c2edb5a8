//! A detached Ed25519 signature of a report file (contract EV3), by the key
//! that signs certificates (EV4): `report.html` and `report.html.sig`.
//!
//! What is signed is the text `cohort-report-signature/1\n` followed by the
//! SHA-256 of the file's bytes in lower-case hex: domain-separated from a
//! certificate's signature (which signs a JSON document), and checkable
//! with `sha256sum` plus any Ed25519 implementation.

use ed25519_dalek::{Signature, Signer, SigningKey, Verifier, VerifyingKey};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::{EvidenceError, to_hex};

/// The format version of report signatures this library writes (the first
/// line of what is signed).
pub const REPORT_SIGNATURE_VERSION: &str = "cohort-report-signature/1";

/// A detached signature of a report file: the content of `<file>.sig`, one
/// line of JSON ([`ReportSignature::to_json`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReportSignature {
    /// [`REPORT_SIGNATURE_VERSION`].
    pub version: String,
    /// `Ed25519`.
    pub algorithm: String,
    /// The verifying key, hex (32 bytes). Informative: a signature is
    /// checked against the key the checker trusts, never this one.
    pub public_key: String,
    /// The SHA-256 of the signed file, hex.
    pub sha256: String,
    /// The signature over `<version>\n<sha256>`, hex (64 bytes).
    pub signature: String,
}

fn message(version: &str, sha256: &str) -> Vec<u8> {
    format!("{version}\n{sha256}").into_bytes()
}

/// Signs the bytes of a report file with `key` (the host's Ed25519 key, the
/// one it signs certificates with).
///
/// ```
/// use cohort::evidence::{sign_report, verify_report_signature};
/// let key = ed25519_dalek::SigningKey::from_bytes(&[7u8; 32]);
/// let html = b"<!DOCTYPE html><html>...</html>";
/// let sig = sign_report(html, &key).to_json();
/// assert!(verify_report_signature(html, &sig, &key.verifying_key()).is_ok());
/// assert!(verify_report_signature(b"<!DOCTYPE html><html>..!</html>", &sig, &key.verifying_key()).is_err());
/// ```
pub fn sign_report(file: &[u8], key: &SigningKey) -> ReportSignature {
    let sha256 = to_hex(&Sha256::digest(file));
    let signature = key.sign(&message(REPORT_SIGNATURE_VERSION, &sha256));
    ReportSignature {
        version: REPORT_SIGNATURE_VERSION.to_owned(),
        algorithm: "Ed25519".to_owned(),
        public_key: to_hex(key.verifying_key().as_bytes()),
        sha256,
        signature: to_hex(&signature.to_bytes()),
    }
}

impl ReportSignature {
    /// The signature file's content: one line of JSON and a line ending.
    pub fn to_json(&self) -> String {
        let mut text = serde_json::to_string(self).unwrap_or_default();
        text.push('\n');
        text
    }

    /// Reads a signature file's content.
    pub fn parse(text: &str) -> Result<ReportSignature, EvidenceError> {
        serde_json::from_str(text.trim()).map_err(|e| EvidenceError::MalformedSignature {
            reason: e.to_string(),
        })
    }
}

/// Checks that `signature` (the content of the `.sig` file) is `key`'s
/// signature of exactly these bytes. Any changed byte of the file, a
/// signature by another key, or a changed signature file is refused with
/// [`EvidenceError::BadSignature`]; a signature file that cannot be read
/// with [`EvidenceError::MalformedSignature`]. Returns the signature read.
pub fn verify_report_signature(
    file: &[u8],
    signature: &str,
    key: &VerifyingKey,
) -> Result<ReportSignature, EvidenceError> {
    let sig = ReportSignature::parse(signature)?;
    if sig.version != REPORT_SIGNATURE_VERSION {
        return Err(EvidenceError::MalformedSignature {
            reason: format!(
                "version {:?}, this library reads {REPORT_SIGNATURE_VERSION:?}",
                sig.version
            ),
        });
    }
    if sig.algorithm != "Ed25519" || sig.public_key != to_hex(key.as_bytes()) {
        return Err(EvidenceError::BadSignature);
    }
    if sig.sha256 != to_hex(&Sha256::digest(file)) {
        return Err(EvidenceError::BadSignature);
    }
    let bytes: [u8; 64] = hex::decode(&sig.signature)
        .ok()
        .and_then(|b| b.try_into().ok())
        .ok_or(EvidenceError::BadSignature)?;
    key.verify(
        &message(&sig.version, &sig.sha256),
        &Signature::from_bytes(&bytes),
    )
    .map_err(|_| EvidenceError::BadSignature)?;
    Ok(sig)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_changed_byte_fails() {
        let key = SigningKey::from_bytes(&[9u8; 32]);
        let file = b"<html>a report of 1,234 rows</html>".to_vec();
        let sig = sign_report(&file, &key).to_json();
        assert!(verify_report_signature(&file, &sig, &key.verifying_key()).is_ok());
        for i in 0..file.len() {
            let mut changed = file.clone();
            changed[i] ^= 0x01;
            assert!(
                matches!(
                    verify_report_signature(&changed, &sig, &key.verifying_key()),
                    Err(EvidenceError::BadSignature)
                ),
                "byte {i}"
            );
        }
        let mut longer = file.clone();
        longer.push(b'\n');
        assert!(verify_report_signature(&longer, &sig, &key.verifying_key()).is_err());
        // Another key.
        let other = SigningKey::from_bytes(&[8u8; 32]);
        assert!(verify_report_signature(&file, &sig, &other.verifying_key()).is_err());
        // A signature file whose hash was made to match another file.
        let mut forged = ReportSignature::parse(&sig).expect("parse");
        forged.sha256 = to_hex(&Sha256::digest(b"another file"));
        assert!(
            verify_report_signature(b"another file", &forged.to_json(), &key.verifying_key())
                .is_err()
        );
        assert!(matches!(
            verify_report_signature(&file, "not json", &key.verifying_key()),
            Err(EvidenceError::MalformedSignature { .. })
        ));
    }
}
