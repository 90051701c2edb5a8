//! The TOML side of the model file: the text parsed into toml's spanned
//! document tree, typed reads of its values (a non-empty string, a boolean,
//! a UUID, a table, an array of tables), unknown keys with a suggestion, and
//! every mistake recorded as a [`Diagnostic`] with file, line, column and
//! key. What the values mean is [`super::entities`]' and
//! [`super::categories`]' job.

use std::ops::Range;

use toml::Spanned;
use toml::de::{DeTable, DeValue};
use uuid::Uuid;

use crate::model::{Diagnostic, Severity};

/// A value of the document tree, with its span.
pub(super) type Value<'i> = Spanned<DeValue<'i>>;

/// The file being read, and the mistakes and warnings found so far.
pub(super) struct Parser<'s> {
    /// The file, as given (for diagnostics).
    pub(super) file: String,
    /// Its text.
    pub(super) src: &'s str,
    /// Mistakes, in the order found (sorted by position at the end).
    pub(super) errors: Vec<Diagnostic>,
    /// Oddities that are not mistakes.
    pub(super) warnings: Vec<Diagnostic>,
}

/// A string value with where it is.
#[derive(Debug, Clone)]
pub(super) struct Text {
    /// The string.
    pub(super) value: String,
    /// Its span in the file.
    pub(super) span: Range<usize>,
}

impl<'s> Parser<'s> {
    pub(super) fn position(&self, offset: usize) -> (usize, usize) {
        let offset = offset.min(self.src.len());
        let before = self.src.get(..offset).unwrap_or("");
        let line = before.matches('\n').count() + 1;
        let line_start = before.rfind('\n').map_or(0, |i| i + 1);
        let column = before.get(line_start..).map_or(0, |s| s.chars().count()) + 1;
        (line, column)
    }

    pub(super) fn diagnostic(
        &self,
        span: &Range<usize>,
        key: &str,
        message: String,
        severity: Severity,
    ) -> Diagnostic {
        let (line, column) = self.position(span.start);
        Diagnostic {
            file: self.file.clone(),
            line,
            column,
            key: key.to_owned(),
            message,
            severity,
        }
    }

    pub(super) fn error(&mut self, span: &Range<usize>, key: &str, message: impl Into<String>) {
        let d = self.diagnostic(span, key, message.into(), Severity::Error);
        self.errors.push(d);
    }

    pub(super) fn warn(&mut self, span: &Range<usize>, key: &str, message: impl Into<String>) {
        let d = self.diagnostic(span, key, message.into(), Severity::Warning);
        self.warnings.push(d);
    }

    /// Reports keys of `table` that are not `allowed`.
    pub(super) fn known_keys(&mut self, table: &DeTable<'_>, path: &str, allowed: &[&str]) {
        for (k, _) in table.iter() {
            let name = k.get_ref().as_ref();
            if !allowed.contains(&name) {
                let hint = closest(name, allowed)
                    .map(|c| format!("did you mean `{c}`? "))
                    .unwrap_or_default();
                self.error(
                    &k.span(),
                    &join(path, name),
                    format!(
                        "unknown key `{name}`; {hint}expected one of: {}",
                        allowed.join(", ")
                    ),
                );
            }
        }
    }

    pub(super) fn string(&mut self, v: &Value<'_>, key: &str) -> Option<Text> {
        match v.get_ref() {
            DeValue::String(s) if s.trim().is_empty() => {
                self.error(&v.span(), key, "must not be empty");
                None
            }
            DeValue::String(s) if s.contains('\0') => {
                self.error(&v.span(), key, "must not contain a NUL character");
                None
            }
            DeValue::String(s) => Some(Text {
                value: s.to_string(),
                span: v.span(),
            }),
            other => {
                self.error(
                    &v.span(),
                    key,
                    format!("expected a string, found {}", kind(other)),
                );
                None
            }
        }
    }

    pub(super) fn opt_string(&mut self, t: &DeTable<'_>, path: &str, name: &str) -> Option<Text> {
        get(t, name).and_then(|v| self.string(v, &join(path, name)))
    }

    pub(super) fn req_string(
        &mut self,
        t: &DeTable<'_>,
        span: &Range<usize>,
        path: &str,
        name: &str,
        what: &str,
    ) -> Option<Text> {
        match get(t, name) {
            Some(v) => self.string(v, &join(path, name)),
            None => {
                self.error(span, &join(path, name), format!("missing: {what}"));
                None
            }
        }
    }

    pub(super) fn boolean(&mut self, t: &DeTable<'_>, path: &str, name: &str) -> Option<bool> {
        let v = get(t, name)?;
        match v.get_ref() {
            DeValue::Boolean(b) => Some(*b),
            other => {
                self.error(
                    &v.span(),
                    &join(path, name),
                    format!("expected true or false, found {}", kind(other)),
                );
                None
            }
        }
    }

    pub(super) fn uuid(&mut self, text: &Text, key: &str) -> Option<Uuid> {
        match Uuid::parse_str(text.value.trim()) {
            Ok(id) if id.is_nil() => {
                self.error(
                    &text.span,
                    key,
                    format!(
                        "the nil UUID is not an identity; use a new random UUID, for example {}",
                        Uuid::new_v4()
                    ),
                );
                None
            }
            Ok(id) => Some(id),
            Err(e) => {
                self.error(
                    &text.span,
                    key,
                    format!(
                        "{:?} is not a UUID ({e}); use a new random UUID, for example {}",
                        text.value,
                        Uuid::new_v4()
                    ),
                );
                None
            }
        }
    }

    pub(super) fn table_of<'t, 'i>(
        &mut self,
        v: &'t Value<'i>,
        key: &str,
    ) -> Option<&'t DeTable<'i>> {
        match v.get_ref() {
            DeValue::Table(t) => Some(t),
            other => {
                self.error(
                    &v.span(),
                    key,
                    format!("expected a table, found {}", kind(other)),
                );
                None
            }
        }
    }

    /// An array of tables (`[[entity]]`), each with its span.
    pub(super) fn tables_of<'t, 'i>(
        &mut self,
        v: &'t Value<'i>,
        key: &str,
    ) -> Vec<(usize, &'t DeTable<'i>, Range<usize>)> {
        let DeValue::Array(items) = v.get_ref() else {
            self.error(
                &v.span(),
                key,
                format!(
                    "expected an array of tables ([[{key}]]), found {}",
                    kind(v.get_ref())
                ),
            );
            return Vec::new();
        };
        let mut out = Vec::new();
        for (i, item) in items.iter().enumerate() {
            let path = format!("{key}[{i}]");
            if let Some(t) = self.table_of(item, &path) {
                out.push((i, t, item.span()));
            }
        }
        out
    }
}

pub(super) fn get<'t, 'i>(t: &'t DeTable<'i>, key: &str) -> Option<&'t Value<'i>> {
    t.iter()
        .find(|(k, _)| k.get_ref().as_ref() == key)
        .map(|(_, v)| v)
}

pub(super) fn kind(v: &DeValue<'_>) -> &'static str {
    match v {
        DeValue::String(_) => "a string",
        DeValue::Integer(_) => "an integer",
        DeValue::Float(_) => "a float",
        DeValue::Boolean(_) => "a boolean",
        DeValue::Datetime(_) => "a date-time",
        DeValue::Array(_) => "an array",
        DeValue::Table(_) => "a table",
    }
}

/// A key as it is written in a path: bare when it can be, quoted otherwise.
pub(super) fn key_segment(key: &str) -> String {
    if !key.is_empty()
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
    {
        key.to_owned()
    } else {
        format!("{key:?}")
    }
}

pub(super) fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key_segment(key)
    } else {
        format!("{path}.{}", key_segment(key))
    }
}

/// The allowed key closest to a mistyped one, if it is close.
pub(crate) fn closest<'a>(name: &str, allowed: &[&'a str]) -> Option<&'a str> {
    allowed
        .iter()
        .map(|a| (distance(name, a), *a))
        .filter(|(d, a)| *d <= 2.max(a.len() / 4))
        .min_by_key(|(d, _)| *d)
        .map(|(_, a)| a)
}

fn distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.iter().enumerate() {
        let mut cur = vec![i + 1];
        for (j, cb) in b.iter().enumerate() {
            let cost = usize::from(ca != cb);
            let v = (prev[j] + cost).min(prev[j + 1] + 1).min(cur[j] + 1);
            cur.push(v);
        }
        prev = cur;
    }
    prev[b.len()]
}
