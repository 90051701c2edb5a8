//! The model as the library sees it: `&'static EntityDescriptor`s, built
//! at start-up through the hidden `cohort::__private` constructors that
//! `#[derive(Retained)]`'s output calls.
//!
//! That path is internal to the workspace: `cohort-derive` is pinned to the
//! library's exact version and so is this crate (a path dependency of the
//! same workspace), so the constructors and this code change together. The
//! strings and slices are leaked once, at start-up, because descriptors are
//! `'static` (a derived type's live in the binary's read-only data).
//!
//! Each descriptor lists every column of its table as a field (field name =
//! column name), as if a struct declared them all, so the conventions
//! (`id`, `tenant_id`, `is_deleted`, `deleted_at`, `anonymised_at`, or the
//! settings' `conventions`) find their columns exactly as they find a
//! derived type's fields. Columns the model names but the table lacks are
//! listed too, so the library's live-catalog validation reports them by
//! name.

use std::sync::Arc;

use cohort::__private as ctor;
use cohort::model::{AnonymisedField, EntityDescriptor, FieldDescriptor};
use cohort::{Cohort, CohortBuilder};
use sqlx::{PgPool, Row};

use super::rules::FileRules;
use super::{Anonymise, Entity, Exempt, Model};
use crate::anonymisers::{HASH_NAME, keyed_hash, mask, mask_name};
use crate::error::CliResult;
use crate::settings::Settings;

fn leak(s: &str) -> &'static str {
    Box::leak(s.to_owned().into_boxed_str())
}

fn leak_opt(s: Option<&str>) -> Option<&'static str> {
    s.map(leak)
}

/// A column of a table, as the catalog has it.
#[derive(Debug, Clone)]
pub(crate) struct CatalogColumn {
    /// Its name.
    pub(crate) name: String,
    /// Its type, as `format_type` prints it.
    pub(crate) sql_type: String,
    /// Whether it accepts NULL.
    pub(crate) nullable: bool,
}

/// The columns of `schema.table` in order; empty when there is no such
/// table. Reads `pg_catalog` only, with the names bound as values.
pub(crate) async fn table_columns(
    pool: &PgPool,
    schema: &str,
    table: &str,
) -> CliResult<Vec<CatalogColumn>> {
    let rows = sqlx::query(
        "SELECT a.attname::pg_catalog.text AS name, \
                pg_catalog.format_type(a.atttypid, a.atttypmod) AS sql_type, \
                NOT a.attnotnull AS nullable \
         FROM pg_catalog.pg_attribute a \
         JOIN pg_catalog.pg_class c ON c.oid OPERATOR(pg_catalog.=) a.attrelid \
         JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) c.relnamespace \
         WHERE n.nspname OPERATOR(pg_catalog.=) $1::pg_catalog.name \
           AND c.relname OPERATOR(pg_catalog.=) $2::pg_catalog.name \
           AND a.attnum OPERATOR(pg_catalog.>) 0 AND NOT a.attisdropped \
         ORDER BY a.attnum",
    )
    .bind(schema)
    .bind(table)
    .fetch_all(pool)
    .await?;
    rows.iter()
        .map(|r| {
            Ok(CatalogColumn {
                name: r.try_get("name")?,
                sql_type: r.try_get("sql_type")?,
                nullable: r.try_get("nullable")?,
            })
        })
        .collect::<Result<Vec<_>, sqlx::Error>>()
        .map_err(Into::into)
}

/// The descriptor of a retained table.
fn retained(e: &Entity, columns: &[CatalogColumn]) -> &'static EntityDescriptor {
    let mut fields: Vec<FieldDescriptor> = columns
        .iter()
        .map(|c| {
            let name = leak(&c.name);
            ctor::field_descriptor(name, name, c.nullable, leak(&c.sql_type))
        })
        .collect();
    let mut named: Vec<&str> = vec![e.anchor.as_str()];
    named.extend(
        [
            &e.record_id,
            &e.tenant,
            &e.soft_delete,
            &e.deleted_at,
            &e.anonymised_at,
        ]
        .into_iter()
        .flatten()
        .map(String::as_str),
    );
    named.extend(e.anonymise.iter().map(|(c, _)| c.as_str()));
    named.extend(e.erasure_subjects.iter().map(String::as_str));
    for n in named {
        if !fields.iter().any(|f| f.field() == n) {
            let name = leak(n);
            fields.push(ctor::field_descriptor(name, name, true, "(missing)"));
        }
    }
    let anonymise: Vec<AnonymisedField> = e
        .anonymise
        .iter()
        .map(|(column, method)| {
            let method = match method {
                Anonymise::Null => ctor::anonymise_null(),
                Anonymise::Empty => ctor::anonymise_empty_string(),
                Anonymise::Literal(text) => ctor::anonymise_literal(leak(text)),
                Anonymise::Hash => ctor::anonymise_named(HASH_NAME),
                Anonymise::Mask(m) => ctor::anonymise_named(leak(&mask_name(m))),
            };
            ctor::anonymised_field(leak(column), method)
        })
        .collect();
    let subjects: Vec<&'static str> = e.erasure_subjects.iter().map(|s| leak(s)).collect();
    let markers = ctor::markers(
        leak_opt(e.record_id.as_deref()),
        leak_opt(e.tenant.as_deref()),
        leak_opt(e.soft_delete.as_deref()),
        leak_opt(e.deleted_at.as_deref()),
        leak_opt(e.anonymised_at.as_deref()),
    );
    Box::leak(Box::new(ctor::entity_descriptor(
        leak(&e.name),
        ctor::retained(leak(&e.category), leak(&e.anchor)),
        Some(e.id),
        leak(&e.table),
        leak_opt(e.schema.as_deref()),
        e.tenantless,
        Box::leak(fields.into_boxed_slice()),
        markers,
        Box::leak(anonymise.into_boxed_slice()),
        Box::leak(subjects.into_boxed_slice()),
    )))
}

/// The descriptor of an exempt table.
fn exempt(x: &Exempt) -> &'static EntityDescriptor {
    Box::leak(Box::new(ctor::entity_descriptor(
        leak(&x.name),
        ctor::exempt(leak(&x.reason)),
        x.id,
        leak(&x.table),
        leak_opt(x.schema.as_deref()),
        false,
        &[],
        ctor::markers(None, None, None, None, None),
        &[],
        &[],
    )))
}

/// A builder with the model's descriptors, rules, anonymisers and the
/// settings' options: add observers, then `build()` validates everything
/// against the live catalog.
pub(crate) async fn builder(
    pool: &PgPool,
    model: &Model,
    settings: &Settings,
) -> CliResult<CohortBuilder> {
    let mut b = Cohort::builder(pool.clone())
        .options(settings.options()?)
        .rules(FileRules::new(model));
    let mut masks: Vec<String> = Vec::new();
    for e in &model.entities {
        let schema = e
            .schema
            .as_deref()
            .unwrap_or(&settings.default_table_schema);
        let columns = table_columns(pool, schema, &e.table).await?;
        b = ctor::register_descriptor(b, retained(e, &columns));
        for (_, method) in &e.anonymise {
            if let Anonymise::Mask(m) = method {
                let name = mask_name(m);
                if !masks.contains(&name) {
                    masks.push(name.clone());
                    let m = *m;
                    b = b.anonymiser(name, move |v: Option<&str>| mask(&m, v));
                }
            }
        }
    }
    for x in &model.exempt {
        b = ctor::register_descriptor(b, exempt(x));
    }
    if let Some(key) = &settings.hash_key {
        let key: Arc<[u8]> = Arc::from(key.as_bytes());
        b = b.anonymiser(HASH_NAME, move |v: Option<&str>| keyed_hash(&key, v));
    }
    // Erasures record their subject's hash under the certificate key, so
    // `cohort certificate` can only certify the subject that was erased.
    if let Some(key) = &settings.certificate_key {
        b = b.subject_key(key.as_bytes().to_vec());
    }
    Ok(b)
}
