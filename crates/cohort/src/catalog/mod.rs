//! Reading `pg_catalog`: what the live database says about host tables.
//!
//! Every query here reads only `pg_catalog`, writes every catalog relation,
//! function, operator and type `pg_catalog.`-qualified, binds every name as a
//! value, and joins on OIDs, so neither `search_path` nor a same-named table in
//! another schema can change an answer. Callers pin `search_path` to
//! `pg_catalog` as well (so `format_type` prints names qualified where needed).
//!
//! One job per file: [`tables`] (relations and their columns), [`types`] (the
//! closure of column types through domains, arrays and ranges), [`equality`]
//! (how a column compares with a value given as text), [`indexes`]
//! (primary keys and unique indexes), [`inheritance`] (`pg_inherits`),
//! [`foreign_keys`] (the foreign-key graph between partition roots) and
//! [`privileges`] (what the session's role may do, and row-level security),
//! [`bounds`] (which values a column can hold: enum labels, a `CHECK` list).

mod bounds;
mod equality;
mod foreign_keys;
mod indexes;
mod inheritance;
mod privileges;
mod tables;
mod types;

pub(crate) use bounds::{Bounds, bounds};
pub(crate) use equality::{Equality, equalities};
pub(crate) use foreign_keys::{ForeignKey, OnDelete, foreign_keys};
pub(crate) use indexes::{CatalogIndex, indexes};
pub(crate) use inheritance::{InheritanceLink, inheritance};
pub(crate) use privileges::{
    Ask, Privilege, RowSecurity, RuntimeRole, privileges, row_security, runtime_role, type_schemas,
};
pub(crate) use tables::{CatalogColumn, CatalogTable, RelationLookup, lookup_tables};
pub(crate) use types::{CatalogType, TypeKind, types};

/// A relation as named in messages: its schema and name, unquoted.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct RelationName {
    pub(crate) schema: String,
    pub(crate) name: String,
}

impl std::fmt::Display for RelationName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}", self.schema, self.name)
    }
}
