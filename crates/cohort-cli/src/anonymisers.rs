//! The built-in anonymise functions of the model file: a keyed hash and a
//! mask. Each is registered with `CohortBuilder::anonymiser` under a name
//! and named on its columns with `AnonymiseMethod::Named`, exactly as a host
//! registers a stateful anonymiser for `#[cohort(anonymise_with = "name")]`.

use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

use crate::model::Mask;

/// The name the keyed hash is registered under.
pub(crate) const HASH_NAME: &str = "cohort-cli.hash";

/// The name a mask is registered under (one per distinct set of parameters).
pub(crate) fn mask_name(m: &Mask) -> String {
    format!(
        "cohort-cli.mask(keep_first={},keep_last={},with={:?})",
        m.keep_first, m.keep_last, m.with
    )
}

/// HMAC-SHA256 of `value` under `key`, as lowercase hex (64 characters).
/// The same value always gives the same text, so joins on the column still
/// work, but the value cannot be read back without the key. NULL stays NULL.
pub(crate) fn keyed_hash(key: &[u8], value: Option<&str>) -> Option<String> {
    let value = value?;
    // HMAC takes keys of any length: new_from_slice cannot fail.
    let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(key).ok()?;
    mac.update(value.as_bytes());
    Some(hex::encode(mac.finalize().into_bytes()))
}

/// `value` with every character but the first `keep_first` and the last
/// `keep_last` replaced by `with`. A value too short to keep anything
/// without revealing all of it is replaced entirely. NULL stays NULL.
pub(crate) fn mask(m: &Mask, value: Option<&str>) -> Option<String> {
    let value = value?;
    let chars: Vec<char> = value.chars().collect();
    let n = chars.len();
    if n <= m.keep_first + m.keep_last {
        return Some(std::iter::repeat_n(m.with, n).collect());
    }
    let mut out = String::with_capacity(value.len());
    out.extend(&chars[..m.keep_first]);
    out.extend(std::iter::repeat_n(m.with, n - m.keep_first - m.keep_last));
    out.extend(&chars[n - m.keep_last..]);
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_keyed_hash_is_hmac_sha256_hex() {
        // RFC 4231 test case 2.
        assert_eq!(
            keyed_hash(b"Jefe", Some("what do ya want for nothing?")).as_deref(),
            Some("5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843")
        );
        assert_eq!(keyed_hash(b"k", None), None);
        assert_ne!(keyed_hash(b"k1", Some("a")), keyed_hash(b"k2", Some("a")));
    }

    #[test]
    fn masks_keep_only_the_ends() {
        let m = Mask::default();
        assert_eq!(
            mask(&m, Some("ann@example.org")).as_deref(),
            Some("a*************g")
        );
        let card = Mask {
            keep_first: 0,
            keep_last: 4,
            with: '#',
        };
        assert_eq!(
            mask(&card, Some("4111111111111111")).as_deref(),
            Some("############1111")
        );
        // Too short to keep anything: all masked, same length.
        assert_eq!(mask(&card, Some("1234")).as_deref(), Some("####"));
        assert_eq!(mask(&m, Some("ü")).as_deref(), Some("*"));
        assert_eq!(mask(&m, Some("")).as_deref(), Some(""));
        assert_eq!(mask(&m, None), None);
    }
}
