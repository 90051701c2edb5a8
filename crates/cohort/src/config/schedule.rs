//! The worker's schedule: a cron pattern (parsed by `croner`) read in an
//! IANA time zone (`chrono-tz`).

use std::fmt;
use std::str::FromStr;

use chrono::{DateTime, Utc};
use chrono_tz::Tz;
use croner::Cron;

use super::WorkerOptions;
use crate::error::validation::ValidationProblem;

/// A parsed schedule: when the worker's occurrences fall.
///
/// ```
/// use chrono::{TimeZone, Utc};
/// let mut options = cohort::WorkerOptions::default();
/// options.schedule = "0 2 * * *".into();
/// options.time_zone = Some("Europe/Berlin".into());
/// let schedule = cohort::worker::Schedule::parse(&options).expect("valid");
/// // 02:00 in Berlin is 01:00 UTC in winter.
/// let next = schedule.next_after(Utc.with_ymd_and_hms(2026, 12, 1, 12, 0, 0).unwrap());
/// assert_eq!(next, Some(Utc.with_ymd_and_hms(2026, 12, 2, 1, 0, 0).unwrap()));
/// ```
#[derive(Clone)]
pub struct Schedule {
    cron: Cron,
    pattern: String,
    zone: Option<Tz>,
}

impl fmt::Debug for Schedule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Schedule")
            .field("pattern", &self.pattern)
            .field("time_zone", &self.zone.map(|z| z.name()))
            .finish()
    }
}

impl Schedule {
    /// The schedule of `options`, or every problem with it, each naming the
    /// option at fault ([`crate::Options::validate`] lists them with the
    /// others).
    pub fn parse(options: &WorkerOptions) -> Result<Schedule, Vec<ValidationProblem>> {
        let cron = Cron::from_str(&options.schedule).map_err(|e| {
            ValidationProblem::option(
                "worker.schedule",
                format!(
                    "worker.schedule {:?} is not a cron pattern: {e}",
                    options.schedule
                ),
                "use five fields (minute hour day-of-month month day-of-week), e.g. \"0 2 * * *\"",
            )
        });
        let zone = match &options.time_zone {
            None => Ok(None),
            Some(name) => Tz::from_str(name).map(Some).map_err(|_| {
                ValidationProblem::option(
                    "worker.time_zone",
                    format!("worker.time_zone {name:?} is not an IANA time zone"),
                    "use a name such as \"Europe/Berlin\" or \"America/New_York\", or leave it out for UTC",
                )
            }),
        };
        match (cron, zone) {
            (Ok(cron), Ok(zone)) => Ok(Schedule {
                cron,
                pattern: options.schedule.clone(),
                zone,
            }),
            (cron, zone) => Err(cron.err().into_iter().chain(zone.err()).collect()),
        }
    }

    /// The first occurrence strictly after `now`, in UTC; `None` when the
    /// pattern has none left (a pattern naming a date that never comes).
    pub fn next_after(&self, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
        match self.zone {
            None => self.cron.find_next_occurrence(&now, false).ok(),
            Some(zone) => self
                .cron
                .find_next_occurrence(&now.with_timezone(&zone), false)
                .ok()
                .map(|t| t.with_timezone(&Utc)),
        }
    }
}

#[cfg(test)]
mod tests {
    use chrono::TimeZone;

    use super::*;

    fn options(schedule: &str, zone: Option<&str>) -> WorkerOptions {
        WorkerOptions {
            schedule: schedule.into(),
            time_zone: zone.map(Into::into),
            ..WorkerOptions::default()
        }
    }

    #[test]
    fn the_default_is_two_in_the_morning_utc() {
        let s = Schedule::parse(&WorkerOptions::default()).expect("default");
        let at = Utc.with_ymd_and_hms(2026, 11, 30, 2, 0, 0).unwrap();
        // Strictly after: the occurrence at `now` itself is not next.
        assert_eq!(s.next_after(at), Some(at + chrono::Duration::days(1)));
        assert_eq!(s.next_after(at - chrono::Duration::seconds(1)), Some(at));
    }

    #[test]
    fn a_time_zone_moves_occurrences_with_daylight_saving() {
        let s = Schedule::parse(&options("0 2 * * *", Some("Europe/Berlin"))).expect("valid");
        // Summer: 02:00 CEST is 00:00 UTC.
        let summer = s.next_after(Utc.with_ymd_and_hms(2026, 7, 1, 12, 0, 0).unwrap());
        assert_eq!(
            summer,
            Some(Utc.with_ymd_and_hms(2026, 7, 2, 0, 0, 0).unwrap())
        );
        // Winter: 02:00 CET is 01:00 UTC.
        let winter = s.next_after(Utc.with_ymd_and_hms(2026, 12, 1, 12, 0, 0).unwrap());
        assert_eq!(
            winter,
            Some(Utc.with_ymd_and_hms(2026, 12, 2, 1, 0, 0).unwrap())
        );
    }

    #[test]
    fn bad_patterns_and_zones_name_their_option() {
        let named = |e: Vec<ValidationProblem>| e.iter().map(|p| p.option).collect::<Vec<_>>();
        let e = Schedule::parse(&options("every night", None)).expect_err("bad pattern");
        assert_eq!(named(e), vec![Some("worker.schedule")]);
        let e = Schedule::parse(&options("0 2 * * *", Some("Mars/Olympus"))).expect_err("bad zone");
        assert_eq!(named(e), vec![Some("worker.time_zone")]);
        let e = Schedule::parse(&options("61 2 * * *", Some("Nowhere"))).expect_err("both");
        assert_eq!(
            named(e),
            vec![Some("worker.schedule"), Some("worker.time_zone")]
        );
    }
}
