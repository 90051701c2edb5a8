//! Identifiers: the only way a table, schema or column name reaches SQL text.
//!
//! An [`Ident`] is validated once (non-empty, at most 63 bytes, no NUL) and is
//! always written double-quoted with embedded quotes doubled, so no name can end
//! the identifier early. Relations are always written schema-qualified through
//! [`QualifiedName`]. Values never go through here: they are bind parameters.

use std::fmt;

/// PostgreSQL's identifier limit (NAMEDATALEN - 1), in bytes.
pub(crate) const MAX_IDENT_BYTES: usize = 63;

/// Why a name cannot be used as a PostgreSQL identifier.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IdentProblem {
    /// The name is empty.
    Empty,
    /// The name is longer than PostgreSQL's 63-byte limit (it would be truncated silently).
    TooLong,
    /// The name contains a NUL byte, which PostgreSQL cannot store.
    ContainsNul,
}

impl fmt::Display for IdentProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            IdentProblem::Empty => "is empty",
            IdentProblem::TooLong => "is longer than 63 bytes (PostgreSQL would truncate it)",
            IdentProblem::ContainsNul => "contains a NUL byte",
        })
    }
}

/// A validated SQL identifier, written quoted.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct Ident(String);

impl Ident {
    /// Validates a raw name.
    pub(crate) fn new(name: &str) -> Result<Ident, IdentProblem> {
        if name.is_empty() {
            Err(IdentProblem::Empty)
        } else if name.len() > MAX_IDENT_BYTES {
            Err(IdentProblem::TooLong)
        } else if name.contains('\0') {
            Err(IdentProblem::ContainsNul)
        } else {
            Ok(Ident(name.to_owned()))
        }
    }

    /// A name known at compile time to be valid (one of Cohort's own table or
    /// column names). Never use it for input.
    pub(crate) fn known(name: &'static str) -> Ident {
        debug_assert!(Ident::new(name).is_ok());
        Ident(name.to_owned())
    }

    /// The raw (unquoted) name, for binding as a value (catalog lookups) and for messages.
    pub(crate) fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Ident {
    /// Writes the identifier double-quoted, doubling embedded quotes.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("\"")?;
        f.write_str(&self.0.replace('"', "\"\""))?;
        f.write_str("\"")
    }
}

/// A schema-qualified relation name, written `"schema"."name"`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct QualifiedName {
    pub(crate) schema: Ident,
    pub(crate) name: Ident,
}

impl QualifiedName {
    pub(crate) fn new(schema: Ident, name: Ident) -> QualifiedName {
        QualifiedName { schema, name }
    }

    /// `schema.name` unquoted, for people and reports (never for SQL).
    pub(crate) fn unquoted(&self) -> String {
        format!("{}.{}", self.schema.as_str(), self.name.as_str())
    }
}

impl fmt::Display for QualifiedName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.schema, self.name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quotes_are_doubled_so_a_name_cannot_close_the_identifier() {
        let i = Ident::new(r#"x"; DROP TABLE t; --"#).expect("valid");
        assert_eq!(i.to_string(), r#""x""; DROP TABLE t; --""#);
    }

    #[test]
    fn bad_names_are_rejected() {
        assert_eq!(Ident::new(""), Err(IdentProblem::Empty));
        assert_eq!(Ident::new("a\0b"), Err(IdentProblem::ContainsNul));
        assert_eq!(Ident::new(&"a".repeat(64)), Err(IdentProblem::TooLong));
        assert!(Ident::new(&"a".repeat(63)).is_ok());
        // 63 bytes is the limit, not 63 characters.
        assert_eq!(Ident::new(&"é".repeat(32)), Err(IdentProblem::TooLong));
    }

    #[test]
    fn qualified_names_quote_both_parts() {
        let q = QualifiedName::new(
            Ident::new("My Schema").expect("valid"),
            Ident::new("t").expect("valid"),
        );
        assert_eq!(q.to_string(), r#""My Schema"."t""#);
    }
}
