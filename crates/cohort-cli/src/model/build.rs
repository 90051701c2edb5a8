//! The model as the library sees it: `&'static EntityDescriptor`s, built
//! at start-up with the library's public runtime builder
//! (`cohort::model::EntityDescriptor::builder`), which makes the checks
//! `#[derive(Retained)]` makes at compile time, and registered with
//! `CohortBuilder::entity_descriptor`. The builder leaks each descriptor
//! once (descriptors are `'static`, as a derived type's are); the command
//! builds its model once per run.
//!
//! Each descriptor lists every column of its table as a field (field name =
//! column name), as if a struct declared them all, so the conventions
//! (`id`, `tenant_id`, `is_deleted`, `deleted_at`, `anonymised_at`, or the
//! settings' `conventions`) find their columns exactly as they find a
//! derived type's fields. Columns the model names but the table lacks are
//! listed too, so the library's live-catalog validation reports them by
//! name. A model file has no Rust types: every field is declared optional,
//! so `anonymise = "null"` is checked against the live column (NOT NULL, or
//! a NOT NULL domain: contract V6) with the model's other problems, and its
//! label is the column's SQL type.

use std::sync::Arc;

use cohort::model::{DescriptorError, EntityDescriptor, FieldSpec};
use cohort::{Cohort, CohortBuilder, ValidationReport};
use sqlx::{PgPool, Row};

use super::rules::FileRules;
use super::{Anonymise, Entity, Exempt, Model};
use crate::anonymisers::{HASH_NAME, keyed_hash, mask, mask_name};
use crate::error::CliResult;
use crate::settings::Settings;

/// A column of a table, as the catalog has it.
#[derive(Debug, Clone)]
pub(crate) struct CatalogColumn {
    /// Its name.
    pub(crate) name: String,
    /// Its type, as `format_type` prints it.
    pub(crate) sql_type: String,
}

/// The columns of `schema.table` in order; empty when there is no such
/// table. Reads `pg_catalog` only, with the names bound as values.
pub(crate) async fn table_columns(
    pool: &PgPool,
    schema: &str,
    table: &str,
) -> CliResult<Vec<CatalogColumn>> {
    // Every read in one transaction, each statement unnamed: through a
    // pooler in transaction mode they stay on one server connection.
    let mut tx = pool.begin().await?;
    let rows = sqlx::query(
        "SELECT a.attname::pg_catalog.text AS name, \
                pg_catalog.format_type(a.atttypid, a.atttypmod) AS sql_type \
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
    .persistent(false)
    .fetch_all(&mut *tx)
    .await?;
    rows.iter()
        .map(|r| {
            Ok(CatalogColumn {
                name: r.try_get("name")?,
                sql_type: r.try_get("sql_type")?,
            })
        })
        .collect::<Result<Vec<_>, sqlx::Error>>()
        .map_err(Into::into)
}

/// The descriptor of a retained table.
fn retained(
    e: &Entity,
    columns: &[CatalogColumn],
) -> Result<&'static EntityDescriptor, DescriptorError> {
    let mut b = EntityDescriptor::builder(e.name.clone(), e.category.clone(), e.anchor.clone())
        .id(e.id)
        .table(e.table.clone());
    if let Some(schema) = &e.schema {
        b = b.schema(schema.clone());
    }
    if e.tenantless {
        b = b.tenantless();
    }
    if let Some(key) = &e.event_key {
        b = b.event_key(key.clone());
    }
    if let Some(from) = &e.category_from {
        b = b.category_from(from.column.clone(), from.map.clone());
        if !from.default {
            b = b.no_default_category();
        }
    }
    let mut declared: Vec<&str> = Vec::with_capacity(columns.len());
    for c in columns {
        b = b.field(
            FieldSpec::new(c.name.clone())
                .optional()
                .rust_type(c.sql_type.clone()),
        );
        declared.push(&c.name);
    }
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
    named.extend(e.guard_allow.iter().map(String::as_str));
    named.extend(e.category_from.iter().map(|f| f.column.as_str()));
    named.extend(e.event_key.iter().map(String::as_str));
    for n in named {
        if !declared.contains(&n) {
            b = b.field(
                FieldSpec::new(n.to_owned())
                    .optional()
                    .rust_type("(missing)"),
            );
            declared.push(n);
        }
    }
    if let Some(field) = &e.record_id {
        b = b.record_id(field.clone());
    }
    if let Some(field) = &e.tenant {
        b = b.tenant(field.clone());
    }
    if let Some(field) = &e.soft_delete {
        b = b.soft_delete(field.clone());
    }
    if let Some(field) = &e.deleted_at {
        b = b.deleted_at(field.clone());
    }
    if let Some(field) = &e.anonymised_at {
        b = b.anonymised_at(field.clone());
    }
    for (column, method) in &e.anonymise {
        let column = column.clone();
        b = match method {
            Anonymise::Null => b.anonymise_null(column),
            Anonymise::Empty => b.anonymise_empty(column),
            Anonymise::Literal(text) => b.anonymise_literal(column, text.clone()),
            Anonymise::Hash => b.anonymise_named(column, HASH_NAME),
            Anonymise::Mask(m) => b.anonymise_named(column, mask_name(m)),
        };
    }
    for subject in &e.erasure_subjects {
        b = b.erasure_subject(subject.clone());
    }
    if e.guard {
        b = b.guard(e.guard_allow.iter().cloned());
    }
    b.build()
}

/// The descriptor of an exempt table.
fn exempt(x: &Exempt) -> Result<&'static EntityDescriptor, DescriptorError> {
    let mut b =
        EntityDescriptor::exempt_builder(x.name.clone(), x.reason.clone()).table(x.table.clone());
    if let Some(schema) = &x.schema {
        b = b.schema(schema.clone());
    }
    if let Some(id) = x.id {
        b = b.id(id);
    }
    b.build()
}

/// What the descriptor builder refused (a name PostgreSQL cannot keep, such
/// as one longer than 63 bytes; the model file's own checks catch the rest),
/// every entry's at once, as the library's validation problems.
fn descriptor_mistakes(mistakes: Vec<DescriptorError>) -> cohort::Error {
    let mut report = ValidationReport::default();
    for mistake in mistakes {
        if let cohort::Error::Validation(found) = cohort::Error::from(mistake) {
            report.problems.extend(found.problems);
        }
    }
    cohort::Error::Validation(report)
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
    let mut mistakes: Vec<DescriptorError> = Vec::new();
    for e in &model.entities {
        let schema = e
            .schema
            .as_deref()
            .unwrap_or(&settings.default_table_schema);
        let columns = table_columns(pool, schema, &e.table).await?;
        match retained(e, &columns) {
            Ok(descriptor) => b = b.entity_descriptor(descriptor),
            Err(e) => mistakes.push(e),
        }
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
        match exempt(x) {
            Ok(descriptor) => b = b.entity_descriptor(descriptor),
            Err(e) => mistakes.push(e),
        }
    }
    if !mistakes.is_empty() {
        return Err(descriptor_mistakes(mistakes).into());
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
