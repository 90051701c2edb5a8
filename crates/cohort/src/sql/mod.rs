//! Everything that writes SQL text. Names go through [`ident`]; values are
//! always bind parameters; catalog relations and built-in functions are
//! written `pg_catalog.`-qualified.

pub(crate) mod ident;

pub(crate) use ident::{Ident, QualifiedName};

/// Pins `search_path` to `pg_catalog` for the rest of the current transaction,
/// so that even an unqualified operator cannot resolve to a host's (or an
/// attacker's) schema. Every statement Cohort writes is qualified as well; this
/// is the second wall.
pub(crate) const PIN_SEARCH_PATH: &str = "SELECT pg_catalog.set_config('search_path', 'pg_catalog', true)";
