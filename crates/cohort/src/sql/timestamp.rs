//! `timestamptz` values exactly as PostgreSQL keeps them.
//!
//! PostgreSQL stores a `timestamptz` as microseconds since 2000-01-01 UTC,
//! from 4714-11-24 BC to 294276 AD, plus `-infinity` and `infinity`. chrono
//! covers a different range (about ±262,000 years) with nanoseconds and no
//! infinities, so decoding a row's anchor straight into chrono panics on
//! `-infinity`, and binding a chrono value before 4714 BC fails with SQLSTATE
//! 22008. Every timestamp Cohort reads from a host row, or binds as a cutoff,
//! goes through [`PgTime`] instead, which represents all of PostgreSQL's
//! values and none of chrono's extras.

use chrono::{DateTime, TimeZone, Utc};
use sqlx::decode::Decode;
use sqlx::encode::{Encode, IsNull};
use sqlx::error::BoxDynError;
use sqlx::postgres::{PgArgumentBuffer, PgTypeInfo, PgValueFormat, PgValueRef, Postgres};
use sqlx::types::Type;

/// Microseconds between the Unix epoch and PostgreSQL's (2000-01-01 UTC).
const PG_EPOCH_UNIX_MICROS: i64 = 946_684_800_000_000;
/// PostgreSQL's earliest `timestamptz` (4714-11-24 00:00 BC), in its microseconds.
const MIN_FINITE: i64 = -211_813_488_000_000_000;
/// One past PostgreSQL's latest `timestamptz` (294277-01-01), in its microseconds.
const END_FINITE: i64 = 9_223_371_331_200_000_000;

/// A `timestamptz` as PostgreSQL stores it: microseconds since 2000-01-01 UTC,
/// or one of the infinities.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct PgTime(i64);

impl PgTime {
    /// `-infinity`: earlier than every other value.
    pub(crate) const NEG_INFINITY: PgTime = PgTime(i64::MIN);
    /// `infinity`: later than every other value.
    pub(crate) const INFINITY: PgTime = PgTime(i64::MAX);

    /// The instant `t` at PostgreSQL's precision (sub-microseconds dropped,
    /// rounding towards the past), or `None` when PostgreSQL cannot hold it.
    pub(crate) fn from_utc<Tz: TimeZone>(t: &DateTime<Tz>) -> Option<PgTime> {
        // chrono's range fits in i64 microseconds since the Unix epoch.
        let micros = t.timestamp_micros().checked_sub(PG_EPOCH_UNIX_MICROS)?;
        (MIN_FINITE..END_FINITE)
            .contains(&micros)
            .then_some(PgTime(micros))
    }

    /// `t` for a cutoff: an instant before PostgreSQL's earliest timestamp
    /// becomes `-infinity`, so `anchor < cutoff` holds for no row at all.
    pub(crate) fn cutoff(t: &DateTime<Utc>) -> PgTime {
        PgTime::from_utc(t).unwrap_or(PgTime::NEG_INFINITY)
    }

    /// The same instant in chrono, `None` for the infinities (and for finite
    /// values past chrono's range, which PostgreSQL allows and chrono does not).
    pub(crate) fn to_utc(self) -> Option<DateTime<Utc>> {
        if self == PgTime::NEG_INFINITY || self == PgTime::INFINITY {
            return None;
        }
        let unix = self.0.checked_add(PG_EPOCH_UNIX_MICROS)?;
        DateTime::<Utc>::from_timestamp_micros(unix)
    }

    /// The instant in chrono, with the infinities and out-of-range values
    /// clamped to chrono's ends (for reporting a stored value that a plain
    /// SQL write may have set).
    pub(crate) fn to_utc_clamped(self) -> DateTime<Utc> {
        match self.to_utc() {
            Some(t) => t,
            None if self.0 < 0 => DateTime::<Utc>::MIN_UTC,
            None => DateTime::<Utc>::MAX_UTC,
        }
    }
}

/// `t` truncated to PostgreSQL's precision (microseconds), or `None` when
/// PostgreSQL cannot hold it: the normalisation every caller time gets at the
/// public boundary.
pub(crate) fn to_pg_precision<Tz: TimeZone>(t: &DateTime<Tz>) -> Option<DateTime<Utc>> {
    PgTime::from_utc(t).and_then(PgTime::to_utc)
}

impl Type<Postgres> for PgTime {
    fn type_info() -> PgTypeInfo {
        // By OID (chrono's), never by name: a type named at bind time makes
        // sqlx look it up with an unqualified catalog query, which a hostile
        // search_path could answer.
        <DateTime<Utc> as Type<Postgres>>::type_info()
    }

    fn compatible(ty: &PgTypeInfo) -> bool {
        <DateTime<Utc> as Type<Postgres>>::compatible(ty)
    }
}

impl sqlx::postgres::PgHasArrayType for PgTime {
    fn array_type_info() -> PgTypeInfo {
        <DateTime<Utc> as sqlx::postgres::PgHasArrayType>::array_type_info()
    }
}

impl Encode<'_, Postgres> for PgTime {
    fn encode_by_ref(&self, buf: &mut PgArgumentBuffer) -> Result<IsNull, BoxDynError> {
        <i64 as Encode<'_, Postgres>>::encode_by_ref(&self.0, buf)
    }

    fn size_hint(&self) -> usize {
        std::mem::size_of::<i64>()
    }
}

impl<'r> Decode<'r, Postgres> for PgTime {
    fn decode(value: PgValueRef<'r>) -> Result<Self, BoxDynError> {
        match value.format() {
            PgValueFormat::Binary => {
                let bytes: [u8; 8] = value
                    .as_bytes()?
                    .try_into()
                    .map_err(|_| "a timestamptz is 8 bytes")?;
                Ok(PgTime(i64::from_be_bytes(bytes)))
            }
            PgValueFormat::Text => match value.as_str()? {
                "infinity" => Ok(PgTime::INFINITY),
                "-infinity" => Ok(PgTime::NEG_INFINITY),
                _ => {
                    let t = <DateTime<Utc> as Decode<'r, Postgres>>::decode(value)?;
                    PgTime::from_utc(&t).ok_or_else(|| "timestamp out of range".into())
                }
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    #[test]
    fn instants_round_trip_at_microsecond_precision() {
        let t = Utc
            .with_ymd_and_hms(2026, 11, 30, 12, 0, 0)
            .single()
            .expect("valid")
            + chrono::Duration::nanoseconds(1_234_567);
        let pg = PgTime::from_utc(&t).expect("in range");
        let back = pg.to_utc().expect("finite");
        assert_eq!(back, t - chrono::Duration::nanoseconds(567));
        assert_eq!(
            PgTime::from_utc(&Utc.timestamp_opt(946_684_800, 0).unwrap()),
            Some(PgTime(0))
        );
    }

    #[test]
    fn instants_before_postgresql_are_refused_and_cutoffs_saturate() {
        assert_eq!(PgTime::from_utc(&DateTime::<Utc>::MIN_UTC), None);
        assert_eq!(
            PgTime::cutoff(&DateTime::<Utc>::MIN_UTC),
            PgTime::NEG_INFINITY
        );
        // chrono's latest instant is inside PostgreSQL's range.
        assert!(PgTime::from_utc(&DateTime::<Utc>::MAX_UTC).is_some());
        assert_eq!(PgTime::NEG_INFINITY.to_utc(), None);
        assert_eq!(PgTime::INFINITY.to_utc(), None);
        assert_eq!(
            PgTime::NEG_INFINITY.to_utc_clamped(),
            DateTime::<Utc>::MIN_UTC
        );
        assert_eq!(PgTime::INFINITY.to_utc_clamped(), DateTime::<Utc>::MAX_UTC);
        // Finite values beyond chrono's range do not panic either.
        assert_eq!(PgTime(END_FINITE - 1).to_utc(), None);
    }
}
