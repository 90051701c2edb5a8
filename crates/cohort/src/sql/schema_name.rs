//! The schema Cohort's tables live in: a quoted identifier. Its validating
//! constructor, `SchemaName::new`, is in the `schema` module (it returns the
//! crate's error, which this layer does not know).

use super::{Ident, QualifiedName};

/// A validated PostgreSQL schema name: non-empty, at most 63 bytes, no NUL.
/// Any other character (capitals, spaces, quotes) is fine: it is always
/// written quoted.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SchemaName(pub(crate) Ident);

impl SchemaName {
    /// The `public` schema.
    pub fn public() -> SchemaName {
        SchemaName(Ident::known("public"))
    }

    /// The raw name.
    pub fn as_str(&self) -> &str {
        self.0.as_str()
    }

    pub(crate) fn ident(&self) -> &Ident {
        &self.0
    }

    /// One of Cohort's tables in this schema.
    pub(crate) fn table(&self, table: &'static str) -> QualifiedName {
        QualifiedName::new(self.0.clone(), Ident::known(table))
    }
}

impl Default for SchemaName {
    fn default() -> Self {
        SchemaName::public()
    }
}

impl std::fmt::Display for SchemaName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}
