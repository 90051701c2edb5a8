//! Human tables and JSON on stdout.

use std::io::Write;

use chrono::{DateTime, SecondsFormat, Utc};
use comfy_table::{ContentArrangement, Table, presets};
use serde::Serialize;

use crate::error::{CliError, CliResult};

/// A table with the command's look: condensed borders, no colours, one line
/// per row. On a terminal it fits the terminal's width (long cells wrap);
/// in a pipe or a file it is as wide as its content (stable for scripts
/// and snapshots).
pub(crate) fn table(header: &[&str]) -> Table {
    let mut t = Table::new();
    let arrangement = if std::io::IsTerminal::is_terminal(&std::io::stdout()) {
        ContentArrangement::Dynamic
    } else {
        ContentArrangement::Disabled
    };
    t.load_style(presets::UTF8_FULL_CONDENSED)
        .set_content_arrangement(arrangement)
        .set_header(header.iter().copied());
    t
}

/// The first 8 characters of an id (as `git` abbreviates commits): what a
/// table shows by default; `runs show` takes such a prefix back.
pub(crate) fn short_id(id: &uuid::Uuid) -> String {
    id.simple().to_string()[..8].to_owned()
}

/// An RFC 3339 time as [`time`] writes it, to the second, for narrow
/// tables: `2026-11-30 10:45:20Z`. Anything else is returned as it is.
pub(crate) fn short_time(t: &str) -> String {
    match (t.get(..10), t.get(11..19)) {
        (Some(date), Some(clock)) if t.len() >= 20 && t.as_bytes().get(10) == Some(&b'T') => {
            format!("{date} {clock}Z")
        }
        _ => t.to_owned(),
    }
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
