//! Human tables and JSON on stdout.

use std::io::Write;

use chrono::{DateTime, SecondsFormat, Utc};
use comfy_table::{ContentArrangement, Table, presets};
use serde::Serialize;

use crate::error::{CliError, CliResult};

/// A table with the command's look: condensed borders, no colours, one line
/// per row, as wide as its content (stable in pipes and snapshots).
pub(crate) fn table(header: &[&str]) -> Table {
    let mut t = Table::new();
    t.load_style(presets::UTF8_FULL_CONDENSED)
        .set_content_arrangement(ContentArrangement::Disabled)
        .set_header(header.iter().copied());
    t
}

/// Prints a line on stdout (a closed pipe ends the command quietly).
pub(crate) fn line(text: impl AsRef<str>) -> CliResult {
    let mut out = std::io::stdout().lock();
    match writeln!(out, "{}", text.as_ref()) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        Err(e) => Err(CliError::io(
            "cannot write to",
            std::path::Path::new("stdout"),
            e,
        )),
    }
}

/// Prints `value` as pretty JSON on stdout.
pub(crate) fn json<T: Serialize>(value: &T) -> CliResult {
    let text = serde_json::to_string_pretty(value)
        .map_err(|e| CliError::Internal(format!("cannot serialise the output: {e}")))?;
    line(text)
}

/// Prints `value` as compact JSON on one line of stdout (JSON Lines, for
/// output that goes on, like the worker's).
pub(crate) fn json_line<T: Serialize>(value: &T) -> CliResult {
    let text = serde_json::to_string(value)
        .map_err(|e| CliError::Internal(format!("cannot serialise the output: {e}")))?;
    line(text)
}

/// A time as RFC 3339 in UTC, always to the microsecond (PostgreSQL's
/// precision; a fixed width keeps tables steady).
pub(crate) fn time(t: &DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Micros, true)
}

/// An optional time, `-` when absent.
pub(crate) fn opt_time(t: Option<&DateTime<Utc>>) -> String {
    t.map_or_else(|| "-".to_owned(), time)
}

/// An optional text, `-` when absent.
pub(crate) fn opt(t: Option<&str>) -> String {
    t.map_or_else(|| "-".to_owned(), str::to_owned)
}
