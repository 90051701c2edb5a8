//! Periods: how long a row is kept. Never negative, by construction.

use std::fmt;
use std::time::Duration;

use chrono::{DateTime, Months, TimeDelta, Utc};
use serde::{Deserialize, Serialize};

/// How long rows are kept: a fixed duration, or a calendar period (years,
/// months, days) whose arithmetic is done in UTC, whatever the session's time
/// zone. A period can never be negative: its parts are unsigned.
///
/// ```
/// use cohort::Period;
/// use chrono::{TimeZone, Utc};
/// let now = Utc.with_ymd_and_hms(2024, 3, 31, 12, 0, 0).unwrap();
/// // Calendar months clamp to the end of a shorter month.
/// assert_eq!(Period::months(1).cutoff(now), Utc.with_ymd_and_hms(2024, 2, 29, 12, 0, 0).unwrap());
/// assert_eq!(Period::days(30).to_string(), "P30D");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Period {
    /// An exact duration.
    Fixed(Duration),
    /// A calendar period, subtracted as years, then months, then days (a day
    /// is 24 hours in UTC).
    Calendar {
        /// Whole years.
        years: u32,
        /// Whole months.
        months: u32,
        /// Whole days.
        days: u32,
    },
}

impl Period {
    /// No retention: rows are eligible at once.
    pub const ZERO: Period = Period::Fixed(Duration::ZERO);

    /// An exact duration.
    pub const fn fixed(duration: Duration) -> Period {
        Period::Fixed(duration)
    }

    /// Whole days.
    pub const fn days(days: u32) -> Period {
        Period::Calendar {
            years: 0,
            months: 0,
            days,
        }
    }

    /// Whole calendar months.
    pub const fn months(months: u32) -> Period {
        Period::Calendar {
            years: 0,
            months,
            days: 0,
        }
    }

    /// Whole calendar years.
    pub const fn years(years: u32) -> Period {
        Period::Calendar {
            years,
            months: 0,
            days: 0,
        }
    }

    /// Whether the period is zero.
    pub fn is_zero(&self) -> bool {
        match *self {
            Period::Fixed(d) => d.is_zero(),
            Period::Calendar {
                years,
                months,
                days,
            } => years == 0 && months == 0 && days == 0,
        }
    }

    /// `now - self`, the instant before which rows are old enough. Saturates
    /// at the earliest representable instant instead of overflowing (an
    /// instant before PostgreSQL's earliest timestamp means that nothing is
    /// old enough). Fixed durations apply at microsecond precision, as
    /// PostgreSQL stores time.
    pub fn cutoff(&self, now: DateTime<Utc>) -> DateTime<Utc> {
        match *self {
            // PostgreSQL keeps microseconds: so does the arithmetic.
            Period::Fixed(d) => i64::try_from(d.as_micros())
                .ok()
                .map(TimeDelta::microseconds)
                .and_then(|d| now.checked_sub_signed(d))
                .unwrap_or(DateTime::<Utc>::MIN_UTC),
            Period::Calendar {
                years,
                months,
                days,
            } => {
                let total_months = u64::from(years) * 12 + u64::from(months);
                let by_months = u32::try_from(total_months)
                    .ok()
                    .and_then(|m| now.checked_sub_months(Months::new(m)));
                by_months
                    .and_then(|t| t.checked_sub_signed(TimeDelta::days(i64::from(days))))
                    .unwrap_or(DateTime::<Utc>::MIN_UTC)
            }
        }
    }
}

impl fmt::Display for Period {
    /// ISO 8601: `P30D`, `P1Y6M`, `PT90S`, `PT0S`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Period::Fixed(d) => {
                if d.subsec_nanos() == 0 {
                    write!(f, "PT{}S", d.as_secs())
                } else {
                    write!(f, "PT{}.{:09}S", d.as_secs(), d.subsec_nanos())
                }
            }
            Period::Calendar {
                years,
                months,
                days,
            } => {
                if self.is_zero() {
                    return f.write_str("P0D");
                }
                f.write_str("P")?;
                if years > 0 {
                    write!(f, "{years}Y")?;
                }
                if months > 0 {
                    write!(f, "{months}M")?;
                }
                if days > 0 {
                    write!(f, "{days}D")?;
                }
                Ok(())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn at(y: i32, m: u32, d: u32) -> DateTime<Utc> {
        Utc.with_ymd_and_hms(y, m, d, 0, 0, 0)
            .single()
            .expect("valid date")
    }

    // contract: P2
    #[test]
    fn periods_cannot_be_negative_and_cutoffs_never_lie_in_the_future() {
        let now = at(2024, 1, 1);
        for p in [
            Period::ZERO,
            Period::days(1),
            Period::years(7),
            Period::fixed(Duration::from_secs(1)),
        ] {
            assert!(p.cutoff(now) <= now, "{p}");
        }
        // Saturation instead of overflow.
        assert_eq!(
            Period::years(u32::MAX).cutoff(now),
            DateTime::<Utc>::MIN_UTC
        );
        assert_eq!(
            Period::fixed(Duration::MAX).cutoff(now),
            DateTime::<Utc>::MIN_UTC
        );
        assert_eq!(Period::days(u32::MAX).cutoff(now), DateTime::<Utc>::MIN_UTC);
    }

    #[test]
    fn calendar_arithmetic_is_in_utc() {
        assert_eq!(Period::years(1).cutoff(at(2024, 2, 29)), at(2023, 2, 28));
        assert_eq!(Period::months(1).cutoff(at(2024, 3, 31)), at(2024, 2, 29));
        assert_eq!(Period::days(30).cutoff(at(2024, 3, 31)), at(2024, 3, 1));
        assert_eq!(
            Period::Calendar {
                years: 1,
                months: 1,
                days: 1
            }
            .cutoff(at(2024, 3, 2)),
            at(2023, 2, 1)
        );
    }

    #[test]
    fn periods_print_as_iso_8601() {
        assert_eq!(Period::days(30).to_string(), "P30D");
        assert_eq!(
            Period::Calendar {
                years: 1,
                months: 6,
                days: 0
            }
            .to_string(),
            "P1Y6M"
        );
        assert_eq!(Period::fixed(Duration::from_secs(90)).to_string(), "PT90S");
        assert_eq!(Period::ZERO.to_string(), "PT0S");
    }
}
