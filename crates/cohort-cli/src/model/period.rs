//! Periods as people write them: `30d`, `18 months`, `1y 6mo`, ISO 8601
//! `P1Y6M`, `PT12H`, `0`.
//!
//! Cohort's [`Period`] is either calendar (years, months, days, subtracted in
//! UTC) or an exact duration; a text mixing both kinds is refused rather
//! than guessed.

use std::time::Duration;

use cohort::Period;

/// The parts a period text names.
#[derive(Debug, Default)]
struct Parts {
    years: u64,
    months: u64,
    days: u64,
    /// Exact seconds (hours, minutes, seconds), with a fraction.
    seconds: f64,
    calendar: bool,
    clock: bool,
}

impl Parts {
    fn into_period(self, text: &str) -> Result<Period, String> {
        if self.calendar && self.clock {
            return Err(format!(
                "{text:?} mixes calendar parts (years, months, weeks, days) with clock parts (hours, minutes, seconds); \
                 use one kind, for example \"30d\" or \"720h\""
            ));
        }
        if self.clock {
            return Duration::try_from_secs_f64(self.seconds)
                .map(Period::fixed)
                .map_err(|_| format!("{text:?} is too long"));
        }
        let fit = |v: u64, what: &str| {
            u32::try_from(v).map_err(|_| format!("{text:?}: {v} {what} is too many"))
        };
        Ok(Period::Calendar {
            years: fit(self.years, "years")?,
            months: fit(self.months, "months")?,
            days: fit(self.days, "days")?,
        })
    }

    fn add(&mut self, number: &str, unit: &str, text: &str) -> Result<(), String> {
        let unit = unit.to_ascii_lowercase();
        let whole = || {
            number.parse::<u64>().map_err(|_| {
                format!("{text:?}: {number:?} is not a whole number (only seconds take a fraction)")
            })
        };
        let add = |slot: &mut u64, v: u64| {
            *slot = slot
                .checked_add(v)
                .ok_or_else(|| format!("{text:?} is too long"))?;
            Ok::<(), String>(())
        };
        match unit.as_str() {
            "y" | "yr" | "yrs" | "year" | "years" => {
                self.calendar = true;
                add(&mut self.years, whole()?)
            }
            "mo" | "mon" | "mons" | "month" | "months" => {
                self.calendar = true;
                add(&mut self.months, whole()?)
            }
            "w" | "wk" | "wks" | "week" | "weeks" => {
                self.calendar = true;
                let weeks = whole()?;
                let days = weeks
                    .checked_mul(7)
                    .ok_or_else(|| format!("{text:?} is too long"))?;
                add(&mut self.days, days)
            }
            "d" | "day" | "days" => {
                self.calendar = true;
                add(&mut self.days, whole()?)
            }
            "h" | "hr" | "hrs" | "hour" | "hours" => {
                self.clock = true;
                self.seconds += whole()? as f64 * 3600.0;
                Ok(())
            }
            "min" | "mins" | "minute" | "minutes" => {
                self.clock = true;
                self.seconds += whole()? as f64 * 60.0;
                Ok(())
            }
            "s" | "sec" | "secs" | "second" | "seconds" => {
                self.clock = true;
                let v: f64 = number
                    .parse()
                    .map_err(|_| format!("{text:?}: {number:?} is not a number"))?;
                self.seconds += v;
                Ok(())
            }
            "m" => Err(format!(
                "{text:?}: \"m\" is ambiguous; write \"mo\" (months) or \"min\" (minutes)"
            )),
            "" => Err(format!(
                "{text:?}: {number} has no unit; add one (d, mo, y, h, min, s), or write 0"
            )),
            other => Err(format!(
                "{text:?}: unknown unit {other:?}; use y, mo, w, d, h, min or s (or ISO 8601 such as P1Y6M)"
            )),
        }
    }
}

/// Parses a period. Accepted: `0`; one or more `<number><unit>` parts with
/// optional spaces (`30d`, `18 months`, `1y 6mo`, `2 weeks`, `12h`,
/// `90 min`, `1.5s`); ISO 8601 durations (`P30D`, `P1Y6M`, `P2W`, `PT12H`,
/// `PT0.5S`).
pub(crate) fn parse_period(text: &str) -> Result<Period, String> {
    let t = text.trim();
    if t.is_empty() {
        return Err("a period cannot be empty; write for example \"30d\" or \"P1Y\"".into());
    }
    if t == "0" {
        return Ok(Period::ZERO);
    }
    if t.starts_with('-') {
        return Err(format!("{text:?}: a period cannot be negative"));
    }
    // People's forms start with a number; ISO 8601 with P.
    if t.starts_with(['P', 'p']) {
        return parse_iso(t, text);
    }
    parse_human(t, text)
}

fn parse_human(t: &str, text: &str) -> Result<Period, String> {
    let mut parts = Parts::default();
    let mut rest = t;
    let mut any = false;
    loop {
        rest = rest.trim_start_matches(|c: char| c.is_whitespace() || c == ',');
        if rest.is_empty() {
            break;
        }
        let number_end = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        if number_end == 0 {
            return Err(format!(
                "{text:?} is not a period; write for example \"30d\", \"18 months\" or \"P1Y\""
            ));
        }
        let number = &rest[..number_end];
        rest = rest[number_end..].trim_start();
        let unit_end = rest
            .find(|c: char| !c.is_alphabetic())
            .unwrap_or(rest.len());
        let unit = &rest[..unit_end];
        rest = &rest[unit_end..];
        parts.add(number, unit, text)?;
        any = true;
    }
    if !any {
        return Err(format!("{text:?} is not a period"));
    }
    parts.into_period(text)
}

fn parse_iso(t: &str, text: &str) -> Result<Period, String> {
    let bad = || {
        format!("{text:?} is not an ISO 8601 duration; write for example P30D, P1Y6M, P2W or PT12H")
    };
    let body = &t[1..];
    if body.is_empty() {
        return Err(bad());
    }
    let (date, time) = match body.find(['T', 't']) {
        Some(i) => (&body[..i], Some(&body[i + 1..])),
        None => (body, None),
    };
    let mut parts = Parts::default();
    let mut scan = |s: &str, in_time: bool| -> Result<(), String> {
        let mut number = String::new();
        for c in s.chars() {
            if c.is_ascii_digit() || c == '.' || c == ',' {
                number.push(if c == ',' { '.' } else { c });
                continue;
            }
            if number.is_empty() {
                return Err(bad());
            }
            let unit = match (c.to_ascii_uppercase(), in_time) {
                ('Y', false) => "y",
                ('M', false) => "mo",
                ('W', false) => "w",
                ('D', false) => "d",
                ('H', true) => "h",
                ('M', true) => "min",
                ('S', true) => "s",
                _ => return Err(bad()),
            };
            parts.add(&number, unit, text)?;
            number.clear();
        }
        if number.is_empty() {
            Ok(())
        } else {
            Err(bad())
        }
    };
    scan(date, false)?;
    if let Some(time) = time {
        if time.is_empty() {
            return Err(bad());
        }
        scan(time, true)?;
    }
    if !parts.calendar && !parts.clock {
        return Err(bad());
    }
    parts.into_period(text)
}

/// A period for people: `30 days`, `1 year 6 months`, `12 hours`, `none`.
pub(crate) fn human(period: &Period) -> String {
    match *period {
        Period::Fixed(d) => {
            if d.is_zero() {
                return "0 (at once)".into();
            }
            let secs = d.as_secs();
            if d.subsec_nanos() == 0 && secs % 3600 == 0 {
                plural(secs / 3600, "hour")
            } else if d.subsec_nanos() == 0 && secs % 60 == 0 {
                plural(secs / 60, "minute")
            } else {
                format!("{} seconds", d.as_secs_f64())
            }
        }
        Period::Calendar {
            years,
            months,
            days,
        } => {
            let mut out = Vec::new();
            if years > 0 {
                out.push(plural(years.into(), "year"));
            }
            if months > 0 {
                out.push(plural(months.into(), "month"));
            }
            if days > 0 {
                out.push(plural(days.into(), "day"));
            }
            if out.is_empty() {
                "0 (at once)".into()
            } else {
                out.join(" ")
            }
        }
    }
}

fn plural(n: u64, unit: &str) -> String {
    if n == 1 {
        format!("1 {unit}")
    } else {
        format!("{n} {unit}s")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cal(years: u32, months: u32, days: u32) -> Period {
        Period::Calendar {
            years,
            months,
            days,
        }
    }

    #[test]
    fn people_and_iso_forms_parse() {
        for (text, want) in [
            ("30d", Period::days(30)),
            ("30 days", Period::days(30)),
            ("1 day", Period::days(1)),
            ("18 months", Period::months(18)),
            ("18mo", Period::months(18)),
            ("1y 6mo", cal(1, 6, 0)),
            ("1 year, 6 months", cal(1, 6, 0)),
            ("2 weeks", Period::days(14)),
            ("7 years", Period::years(7)),
            ("P1Y", Period::years(1)),
            ("P1Y6M", cal(1, 6, 0)),
            ("P30D", Period::days(30)),
            ("P2W", Period::days(14)),
            ("p1y2m3d", cal(1, 2, 3)),
            ("0", Period::ZERO),
            ("P0D", cal(0, 0, 0)),
            ("12h", Period::fixed(Duration::from_secs(12 * 3600))),
            ("90 min", Period::fixed(Duration::from_secs(5400))),
            ("1.5s", Period::fixed(Duration::from_millis(1500))),
            ("PT12H", Period::fixed(Duration::from_secs(12 * 3600))),
            ("PT1H30M", Period::fixed(Duration::from_secs(5400))),
            ("PT0.5S", Period::fixed(Duration::from_millis(500))),
        ] {
            assert_eq!(parse_period(text), Ok(want), "{text}");
        }
    }

    #[test]
    fn mistakes_are_refused_with_a_reason() {
        for (text, says) in [
            ("", "empty"),
            ("-30d", "negative"),
            ("30", "no unit"),
            ("30m", "ambiguous"),
            ("30 fortnights", "unknown unit"),
            ("soon", "not a period"),
            ("P", "ISO 8601"),
            ("P1H", "ISO 8601"),
            ("PT", "ISO 8601"),
            ("P1Y2", "ISO 8601"),
            ("1d 12h", "mixes"),
            ("P1DT12H", "mixes"),
            ("1.5d", "whole number"),
            ("99999999999 years", "too many"),
        ] {
            let e = parse_period(text).expect_err(text);
            assert!(e.contains(says), "{text}: {e}");
        }
    }

    #[test]
    fn periods_print_for_people() {
        assert_eq!(human(&Period::days(30)), "30 days");
        assert_eq!(human(&cal(1, 6, 0)), "1 year 6 months");
        assert_eq!(human(&Period::ZERO), "0 (at once)");
        assert_eq!(human(&Period::fixed(Duration::from_secs(7200))), "2 hours");
    }
}
