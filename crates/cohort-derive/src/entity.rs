//! The validated model of one `#[derive(Retained)]` type: everything the
//! generated descriptor contains, checked against the rules that span several
//! keys or fields (membership, identity, markers, anonymise methods).
//!
//! Every problem goes into one [`darling::error::Accumulator`], so all of them
//! are reported at once.

use darling::Error;
use darling::error::Accumulator;
use heck::ToSnakeCase;
use syn::ext::IdentExt;
use syn::{Data, DeriveInput, Fields, Generics, Ident, LitStr, Path};

use crate::attr::{
    AnonymiseSpec, ContainerAttrs, FieldAttrs, Given, Marker, error_at, parse_container_attrs,
    parse_field_attrs,
};
use crate::util::{ident_problem, is_option, parse_uuid, type_string};

/// Whether the type is retained or exempt (mirrors `cohort::model::Membership`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Membership {
    /// `category = "...", anchor = "field"`.
    Retained {
        /// The retention category.
        category: String,
        /// The anchor field's Rust name.
        anchor: String,
    },
    /// `exempt = "reason"`.
    Exempt {
        /// Why the type is exempt.
        reason: String,
    },
}

/// One struct field (mirrors `cohort::model::FieldDescriptor`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Field {
    /// The Rust field name (raw identifiers without `r#`).
    pub(crate) name: String,
    /// The column name.
    pub(crate) column: String,
    /// Whether the type is syntactically `Option<_>`.
    pub(crate) optional: bool,
    /// The type as written, compacted.
    pub(crate) rust_type: String,
}

/// How a field is scrubbed (mirrors `cohort::model::AnonymiseMethod`).
#[derive(Clone)]
pub(crate) enum Method {
    /// Set NULL.
    Null,
    /// Set to the empty string.
    EmptyString,
    /// Set to a fixed text.
    Literal(String),
    /// Computed by the anonymiser value registered under this name.
    Named(String),
    /// Computed by `<path as cohort::Anonymiser>::anonymise`.
    Custom {
        /// The anonymiser type's name (its path's last segment).
        name: String,
        /// The anonymiser type's path as written.
        path: Path,
    },
}

/// A field to scrub (mirrors `cohort::model::AnonymisedField`).
#[derive(Clone)]
pub(crate) struct Anonymised {
    /// The Rust field name.
    pub(crate) field: String,
    /// How to scrub it.
    pub(crate) method: Method,
}

/// Everything the descriptor of one type holds, validated.
pub(crate) struct Entity {
    /// The type's identifier.
    pub(crate) ident: Ident,
    /// The type's generics, for the `impl`.
    pub(crate) generics: Generics,
    /// The type's name as a string.
    pub(crate) type_name: String,
    /// Retained or exempt.
    pub(crate) membership: Membership,
    /// The stable retained-entity id.
    pub(crate) entity_id: Option<u128>,
    /// The table name.
    pub(crate) table: String,
    /// The schema, when given.
    pub(crate) schema: Option<String>,
    /// `tenantless`.
    pub(crate) tenantless: bool,
    /// Every field, in declaration order.
    pub(crate) fields: Vec<Field>,
    /// The field carrying each marker, in [`Marker::ALL`] order.
    pub(crate) markers: [Option<String>; 5],
    /// Fields to scrub, in declaration order.
    pub(crate) anonymise: Vec<Anonymised>,
    /// Fields marked `erasure_subject`, in declaration order.
    pub(crate) erasure_subjects: Vec<String>,
    /// `Some(fields marked guard_allow)` for a `guard`ed type.
    pub(crate) guard: Option<Vec<String>>,
    /// `category_from` (contract SL3): the field, the map, and the default
    /// category (`category`, when given).
    pub(crate) category_from: Option<CategoryFromSpec>,
    /// The field marked `event_key` (contract SL4).
    pub(crate) event_key: Option<String>,
}

/// A category from a column (mirrors `cohort::model::CategoryFrom`).
pub(crate) struct CategoryFromSpec {
    /// The field whose column holds each row's class.
    pub(crate) field: String,
    /// Each value with its category, in order.
    pub(crate) map: Vec<(String, String)>,
    /// The category of unmapped values, if any.
    pub(crate) default: Option<String>,
}

impl Entity {
    /// The field carrying `marker`, if any.
    pub(crate) fn marker(&self, marker: Marker) -> Option<&str> {
        let index = Marker::ALL.iter().position(|m| *m == marker)?;
        self.markers[index].as_deref()
    }
}

/// The default table name: the type name in snake_case (`SessionNote` →
/// `session_note`, `HTTPRequestLog` → `http_request_log`), by `heck`.
pub(crate) fn default_table(type_name: &str) -> String {
    type_name.to_snake_case()
}

/// Parses and validates a `#[derive(Retained)]` input. Every problem found is
/// reported in the one returned error.
pub(crate) fn parse_entity(input: &DeriveInput) -> darling::Result<Entity> {
    let mut errors = Error::accumulator();
    let container = parse_container_attrs(input, &mut errors);
    let named = named_fields(input, &mut errors);

    // Fields and their own attributes.
    let mut fields = Vec::new();
    let mut field_attrs = Vec::new();
    let mut field_idents = Vec::new();
    for field in named {
        let Some(ident) = &field.ident else { continue };
        let attrs = parse_field_attrs(field, &mut errors);
        let name = ident.unraw().to_string();
        let column = match &attrs.column {
            Some(key) => checked_name(&key.value, "column", &mut errors),
            None => {
                if let Some(problem) = ident_problem(&name) {
                    errors.push(
                        Error::custom(format!(
                            "the column name `{name}` (the field name) {problem}; \
                             set `#[cohort(column = \"...\")]`"
                        ))
                        .with_span(ident),
                    );
                }
                name.clone()
            }
        };
        fields.push(Field {
            name,
            column,
            optional: is_option(&field.ty),
            rust_type: type_string(&field.ty),
        });
        field_attrs.push(attrs);
        field_idents.push(ident);
    }

    check_unique_columns(&fields, &field_attrs, &field_idents, &mut errors);
    let membership = membership(input, &container, &fields, &mut errors);
    let entity_id = entity_id(&container, &mut errors);
    let markers = markers(&container, &fields, &field_attrs, &mut errors);
    let anonymise = anonymise(&fields, &field_attrs, &mut errors);
    let erasure_subjects = fields
        .iter()
        .zip(&field_attrs)
        .filter(|(_, attrs)| attrs.erasure_subject.is_some())
        .map(|(field, _)| field.name.clone())
        .collect();
    let guard_allow: Vec<String> = fields
        .iter()
        .zip(&field_attrs)
        .filter(|(_, attrs)| attrs.guard_allow.is_some())
        .map(|(field, _)| field.name.clone())
        .collect();
    if container.guard.given.is_none() && !guard_allow.is_empty() {
        errors.push(
            Error::custom(
                "`guard_allow` names a field an update of a held row may change, but the type is not \
                 guarded: add `#[cohort(guard)]` to the struct",
            )
            .with_span(&input.ident),
        );
    }
    let guard = container.guard.given.is_some().then_some(guard_allow);
    let category_from = category_from(input, &container, &fields, &mut errors);
    let mut event_key = None;
    for (field, attrs) in fields.iter().zip(&field_attrs) {
        if let Some(key) = &attrs.event_key {
            if event_key.is_some() {
                errors.push(
                    Error::custom(
                        "`event_key` is already on another field: one field holds the subject key \
                         events are recorded for",
                    )
                    .with_span(&key.path),
                );
            } else {
                event_key = Some(field.name.clone());
            }
        }
    }

    let type_name = input.ident.unraw().to_string();
    let table = match &container.table.given {
        Some(key) => checked_name(&key.value, "table", &mut errors),
        None => {
            let table = default_table(&type_name);
            if let Some(problem) = ident_problem(&table) {
                errors.push(
                    Error::custom(format!(
                        "the default table name `{table}` {problem}; \
                         set `#[cohort(table = \"...\")]`"
                    ))
                    .with_span(&input.ident),
                );
            }
            table
        }
    };
    let schema = container
        .schema
        .given
        .as_ref()
        .map(|key| checked_name(&key.value, "schema", &mut errors));

    let Some(membership) = membership else {
        // Not reached: `membership` returns `None` only after an error.
        errors.finish()?;
        return Err(Error::custom("invalid `cohort` attributes").with_span(&input.ident));
    };
    errors.finish_with(Entity {
        ident: input.ident.clone(),
        generics: input.generics.clone(),
        type_name,
        membership,
        entity_id,
        table,
        schema,
        tenantless: container.tenantless.given.is_some(),
        fields,
        markers,
        anonymise,
        erasure_subjects,
        guard,
        category_from,
        event_key,
    })
}

/// `category_from = "field"` with `category_map(...)` (contract SL3): the
/// field must exist, the map must be given with it (and only with it), map
/// each value once, to a non-empty category.
fn category_from(
    input: &DeriveInput,
    container: &ContainerAttrs,
    fields: &[Field],
    errors: &mut Accumulator,
) -> Option<CategoryFromSpec> {
    let map = container.category_map.given.as_ref();
    let Some(from) = &container.category_from.given else {
        if let Some(map) = map {
            errors.push(
                Error::custom(
                    "`category_map` maps a column's values to categories: add `category_from = \"field\"` \
                     naming the field whose column holds them",
                )
                .with_span(&map.path),
            );
        }
        return None;
    };
    let field = from.value.value();
    if !fields.iter().any(|f| f.name == field) {
        let known: Vec<&str> = fields.iter().map(|f| f.name.as_str()).collect();
        errors.push(
            Error::custom(format!(
                "`category_from` must name a field of `{}`, but there is no field `{}` (fields: {})",
                input.ident,
                field.escape_default(),
                known.join(", ")
            ))
            .with_span(&from.value),
        );
    }
    let Some(map) = map else {
        if !container.category_map.written {
            errors.push(
                Error::custom(
                    "`category_from` needs `category_map(\"value\" = \"category\", ...)`: which \
                     category each value of the column is",
                )
                .with_span(&from.path),
            );
        }
        return None;
    };
    let mut pairs: Vec<(String, String)> = Vec::new();
    for (value, category) in &map.value.0 {
        let (v, c) = (value.value(), category.value());
        if pairs.iter().any(|(seen, _)| *seen == v) {
            errors.push(
                Error::custom(format!("`category_map` maps value {v:?} twice")).with_span(value),
            );
        }
        if c.trim().is_empty() {
            errors.push(
                Error::custom(format!(
                    "`category_map` maps value {v:?} to an empty category"
                ))
                .with_span(category),
            );
        }
        pairs.push((v, c));
    }
    Some(CategoryFromSpec {
        field,
        map: pairs,
        default: container.category.given.as_ref().map(|c| c.value.value()),
    })
}

/// The struct's named fields; anything else is reported.
fn named_fields<'a>(
    input: &'a DeriveInput,
    errors: &mut Accumulator,
) -> impl Iterator<Item = &'a syn::Field> + 'a {
    const ONLY: &str = "#[derive(Retained)] supports only structs with named fields";
    let named = match &input.data {
        Data::Struct(data) => match &data.fields {
            Fields::Named(named) => Some(named),
            Fields::Unnamed(unnamed) => {
                errors.push(error_at(
                    unnamed.paren_token.span.join(),
                    format!("{ONLY}; a tuple struct has no field names to map to columns"),
                ));
                None
            }
            Fields::Unit => {
                errors.push(
                    Error::custom(format!(
                        "{ONLY}; a unit struct has no fields to map to columns"
                    ))
                    .with_span(&input.ident),
                );
                None
            }
        },
        Data::Enum(data) => {
            errors.push(Error::custom(format!("{ONLY}, not enums")).with_span(&data.enum_token));
            None
        }
        Data::Union(data) => {
            errors.push(Error::custom(format!("{ONLY}, not unions")).with_span(&data.union_token));
            None
        }
    };
    named.into_iter().flat_map(|named| named.named.iter())
}

/// The value of a `table`, `schema` or `column` key, checked to be a valid
/// PostgreSQL identifier.
fn checked_name(value: &LitStr, key: &str, errors: &mut Accumulator) -> String {
    let name = value.value();
    if let Some(problem) = ident_problem(&name) {
        errors.push(
            Error::custom(format!(
                "`{key}` must be a valid PostgreSQL identifier, but this {problem}"
            ))
            .with_span(value),
        );
    }
    name
}

/// Two fields must not map to the same column.
fn check_unique_columns(
    fields: &[Field],
    attrs: &[FieldAttrs],
    idents: &[&Ident],
    errors: &mut Accumulator,
) {
    for (i, field) in fields.iter().enumerate() {
        if let Some(first) = fields[..i].iter().find(|f| f.column == field.column) {
            let error = Error::custom(format!(
                "column `{}` is already used by field `{}`; give one of them another \
                 `#[cohort(column = \"...\")]`",
                field.column, first.name
            ));
            errors.push(match &attrs[i].column {
                Some(key) => error.with_span(&key.value),
                None => error.with_span(idents[i]),
            });
        }
    }
}

/// The key's name, for messages.
fn key_name(path: &Path) -> String {
    darling::util::path_to_string(path)
}

/// Works out retained versus exempt. `None` when the attributes do not say
/// (an error has been reported then).
fn membership(
    input: &DeriveInput,
    container: &ContainerAttrs,
    fields: &[Field],
    errors: &mut Accumulator,
) -> Option<Membership> {
    if !container.readable {
        return None;
    }
    if let Some(exempt) = &container.exempt.given {
        for key in [&container.category.given, &container.anchor.given]
            .into_iter()
            .flatten()
        {
            let name = key_name(&key.path);
            errors.push(
                Error::custom(format!(
                    "`{name}` cannot be combined with `exempt`: an exempt type takes no part \
                     in retention; remove `exempt` or `{name}`"
                ))
                .with_span(&key.path),
            );
        }
        let reason = exempt.value.value();
        if reason.trim().is_empty() {
            errors.push(
                Error::custom(
                    "`exempt` needs a reason: write `exempt = \"why this type keeps its rows\"`",
                )
                .with_span(&exempt.value),
            );
        }
        return Some(Membership::Exempt { reason });
    }
    // A key written with a malformed value has been reported already; do not
    // report it as missing, nor what follows from it missing.
    if container.exempt.written {
        return None;
    }
    let (category, anchor) = (&container.category, &container.anchor);
    // With `category_from`, `category` is the optional default: without it
    // the type's category is its map's first (contract SL3).
    let mapped = container
        .category_from
        .given
        .as_ref()
        .and(container.category_map.given.as_ref())
        .and_then(|map| map.value.0.first())
        .map(|(_, category)| category.clone());
    let category_given = category.given.as_ref().map(|c| c.value.clone()).or(mapped);
    // Where a missing anchor is reported: the `category` key, else
    // `category_from`.
    let category_path = category
        .given
        .as_ref()
        .or(container.category_from.given.as_ref())
        .map(|c| c.path.clone());
    let category_written = category.written || container.category_from.written;
    match (&category_given, &anchor.given) {
        (Some(category), Some(anchor)) => {
            let category_name = category.value();
            if category_name.trim().is_empty() {
                errors.push(Error::custom("`category` must not be empty").with_span(category));
            }
            let anchor_name = anchor.value.value();
            if !fields.iter().any(|f| f.name == anchor_name) {
                let known: Vec<&str> = fields.iter().map(|f| f.name.as_str()).collect();
                errors.push(
                    Error::custom(format!(
                        "`anchor` must name a field of `{}`, but there is no field `{}` \
                         (fields: {})",
                        input.ident,
                        anchor_name.escape_default(),
                        if known.is_empty() {
                            "none".to_owned()
                        } else {
                            known.join(", ")
                        }
                    ))
                    .with_span(&anchor.value),
                );
            }
            Some(Membership::Retained {
                category: category_name,
                anchor: anchor_name,
            })
        }
        _ if category_written && anchor.written => None,
        (None, None) if category_written || anchor.written => None,
        (Some(category), None) => {
            let error = Error::custom(
                "a retained type needs `anchor = \"field\"` next to `category`: the field \
                 whose timestamp ages the row",
            );
            errors.push(match &category_path {
                Some(path) => error.with_span(path),
                None => error.with_span(category),
            });
            None
        }
        (None, Some(anchor)) => {
            errors.push(
                Error::custom(
                    "a retained type needs `category = \"...\"` next to `anchor`: the retention \
                     category whose rule applies",
                )
                .with_span(&anchor.path),
            );
            None
        }
        (None, None) => {
            errors.push(
                Error::custom(format!(
                    "`{}` neither takes part in retention nor is exempt: add \
                     `#[cohort(category = \"...\", anchor = \"field\", id = \"<uuid>\")]` or \
                     `#[cohort(exempt = \"reason\")]`",
                    input.ident
                ))
                .with_span(&input.ident),
            );
            None
        }
    }
}

/// The `id` key: required for retained types, a valid non-nil UUID when given.
fn entity_id(container: &ContainerAttrs, errors: &mut Accumulator) -> Option<u128> {
    let Some(id) = &container.id.given else {
        if !container.readable || container.id.written || container.exempt.written {
            return None;
        }
        // Point at the key that makes the type retained.
        let retained_key = container
            .category
            .given
            .as_ref()
            .or(container.anchor.given.as_ref());
        if let Some(key) = retained_key {
            errors.push(
                Error::custom(
                    "a retained type needs a stable id: add `id = \"<uuid>\"` (generate one \
                     once, e.g. with `uuidgen`, and never change it)",
                )
                .with_span(&key.path),
            );
        }
        return None;
    };
    match parse_uuid(&id.value.value()) {
        Ok(0) => {
            errors.push(
                Error::custom(
                    "`id` must not be the nil UUID: generate a random one once (e.g. with \
                     `uuidgen`)",
                )
                .with_span(&id.value),
            );
            None
        }
        Ok(value) => Some(value),
        Err(problem) => {
            errors.push(Error::custom(format!("malformed `id`: {problem}")).with_span(&id.value));
            None
        }
    }
}

/// The field of each marker; a marker on two fields, or `tenant` on a
/// `tenantless` type, is reported.
fn markers(
    container: &ContainerAttrs,
    fields: &[Field],
    attrs: &[FieldAttrs],
    errors: &mut Accumulator,
) -> [Option<String>; 5] {
    let mut out: [Option<String>; 5] = Default::default();
    for (slot, marker) in out.iter_mut().zip(Marker::ALL) {
        for (field, field_attrs) in fields.iter().zip(attrs) {
            let Some(key) = field_attrs.marker(marker) else {
                continue;
            };
            match slot {
                Some(first) => errors.push(
                    Error::custom(format!(
                        "the `{}` marker is already on field `{first}`: a marker may be on one \
                         field only",
                        marker.key()
                    ))
                    .with_span(&key.path),
                ),
                None => *slot = Some(field.name.clone()),
            }
            if let (Marker::Tenant, Some(tenantless)) = (marker, &container.tenantless.given) {
                tenant_on_tenantless(key, tenantless, &field.name, errors);
            }
        }
    }
    out
}

/// `tenant` on a field of a `tenantless` type: reported at both keys.
fn tenant_on_tenantless<T, U>(
    tenant: &Given<T>,
    tenantless: &Given<U>,
    field: &str,
    errors: &mut Accumulator,
) {
    errors.push(
        Error::custom(
            "a `tenantless` type has no tenant field: remove `tenant` here or `tenantless` on \
             the struct",
        )
        .with_span(&tenant.path),
    );
    errors.push(
        Error::custom(format!(
            "`tenantless` given here, but field `{field}` is marked `tenant`"
        ))
        .with_span(&tenantless.path),
    );
}

/// The anonymised fields; `anonymise = "null"` on a field that is not an
/// `Option` is reported.
fn anonymise(fields: &[Field], attrs: &[FieldAttrs], errors: &mut Accumulator) -> Vec<Anonymised> {
    let mut out = Vec::new();
    for (field, field_attrs) in fields.iter().zip(attrs) {
        let Some(Given { value: spec, .. }) = &field_attrs.anonymise else {
            continue;
        };
        let method = match spec {
            AnonymiseSpec::Null(lit) => {
                if !field.optional {
                    errors.push(
                        Error::custom(format!(
                            "`anonymise = \"null\"` needs an `Option<_>` field, but `{}` has \
                             type `{}`; make it an `Option` or use `anonymise = \"empty\"` or \
                             `anonymise(literal = \"...\")`",
                            field.name, field.rust_type
                        ))
                        .with_span(lit),
                    );
                }
                Method::Null
            }
            AnonymiseSpec::Empty => Method::EmptyString,
            AnonymiseSpec::Literal(lit) => Method::Literal(lit.value()),
            AnonymiseSpec::Named(name) => Method::Named(name.value()),
            AnonymiseSpec::Custom(path) => Method::Custom {
                name: path
                    .segments
                    .last()
                    .map(|s| s.ident.unraw().to_string())
                    .unwrap_or_default(),
                path: path.clone(),
            },
        };
        out.push(Anonymised {
            field: field.name.clone(),
            method,
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use syn::parse_quote;

    fn ok(input: DeriveInput) -> Entity {
        match parse_entity(&input) {
            Ok(entity) => entity,
            Err(e) => panic!(
                "unexpected errors: {:?}",
                e.flatten()
                    .into_iter()
                    .map(|e| e.to_string())
                    .collect::<Vec<_>>()
            ),
        }
    }

    fn errors(input: DeriveInput) -> Vec<String> {
        match parse_entity(&input) {
            Ok(_) => panic!("expected errors"),
            Err(e) => e.flatten().into_iter().map(|e| e.to_string()).collect(),
        }
    }

    fn field<'a>(entity: &'a Entity, name: &str) -> &'a Field {
        match entity.fields.iter().find(|f| f.name == name) {
            Some(field) => field,
            None => panic!("no field {name}"),
        }
    }

    #[test]
    fn session_note() {
        let entity = ok(parse_quote! {
            #[cohort(category = "session-notes", anchor = "created_at", id = "a3f467fe-c5d0-4f17-9897-83c373cc1dc8", table = "session_notes")]
            pub struct SessionNote { pub id: Uuid, pub tenant_id: Uuid, pub created_at: DateTime<Utc>, pub body: String }
        });
        assert_eq!(entity.type_name, "SessionNote");
        assert_eq!(
            entity.membership,
            Membership::Retained {
                category: "session-notes".into(),
                anchor: "created_at".into()
            }
        );
        assert_eq!(
            entity.entity_id,
            Some(0xa3f467fe_c5d0_4f17_9897_83c373cc1dc8)
        );
        assert_eq!(entity.table, "session_notes");
        assert_eq!(entity.schema, None);
        assert!(!entity.tenantless);
        let names: Vec<&str> = entity.fields.iter().map(|f| f.name.as_str()).collect();
        assert_eq!(names, ["id", "tenant_id", "created_at", "body"]);
        assert_eq!(
            field(&entity, "created_at"),
            &Field {
                name: "created_at".into(),
                column: "created_at".into(),
                optional: false,
                rust_type: "DateTime<Utc>".into()
            }
        );
        assert_eq!(entity.markers, <[Option<String>; 5]>::default());
        assert!(entity.anonymise.is_empty());
        assert!(entity.erasure_subjects.is_empty());
    }

    #[test]
    fn defaults_markers_renames_and_anonymise() {
        let entity = ok(parse_quote! {
            #[cohort(category = "contacts", anchor = "when")]
            #[cohort(id = "B7316DF47DB546ADAEA7F65C4B430F73", schema = "app")]
            struct HTTPContactLog<'a, T: Clone> where T: Send {
                #[cohort(record_id, column = "contact_id")] key: Uuid,
                #[cohort(tenant)] org: Uuid,
                #[cohort(soft_delete)] gone: bool,
                #[cohort(deleted_at)] gone_at: Option<DateTime<Utc>>,
                #[cohort(anonymised_at)] scrubbed_at: std::option::Option<DateTime<Utc>>,
                r#when: DateTime<Utc>,
                #[cohort(anonymise = "null")] #[cohort(erasure_subject)] email: Option<String>,
                #[cohort(anonymise = "empty")] name: &'a str,
                #[cohort(anonymise(literal = "[redacted]"), erasure_subject)] phone: String,
                #[cohort(anonymise_with = crate::anon::KeepDomain)] work_email: T,
            }
        });
        assert_eq!(entity.type_name, "HTTPContactLog");
        assert_eq!(entity.table, "http_contact_log");
        assert_eq!(entity.schema.as_deref(), Some("app"));
        assert_eq!(
            entity.entity_id,
            Some(0xb7316df4_7db5_46ad_aea7_f65c4b430f73)
        );
        assert_eq!(
            entity.membership,
            Membership::Retained {
                category: "contacts".into(),
                anchor: "when".into()
            }
        );
        assert_eq!(field(&entity, "key").column, "contact_id");
        assert_eq!(field(&entity, "when").column, "when");
        assert!(field(&entity, "scrubbed_at").optional);
        assert_eq!(field(&entity, "name").rust_type, "&'a str");
        assert_eq!(entity.marker(Marker::RecordId), Some("key"));
        assert_eq!(entity.marker(Marker::Tenant), Some("org"));
        assert_eq!(entity.marker(Marker::SoftDelete), Some("gone"));
        assert_eq!(entity.marker(Marker::DeletedAt), Some("gone_at"));
        assert_eq!(entity.marker(Marker::AnonymisedAt), Some("scrubbed_at"));
        let methods: Vec<(String, String)> = entity
            .anonymise
            .iter()
            .map(|a| {
                let method = match &a.method {
                    Method::Null => "null".to_owned(),
                    Method::EmptyString => "empty".to_owned(),
                    Method::Literal(text) => format!("literal {text}"),
                    Method::Named(name) => format!("named {name}"),
                    Method::Custom { name, path } => {
                        format!(
                            "custom {name} {}",
                            quote::quote!(#path).to_string().replace(' ', "")
                        )
                    }
                };
                (a.field.clone(), method)
            })
            .collect();
        assert_eq!(
            methods,
            [
                ("email".to_owned(), "null".to_owned()),
                ("name".to_owned(), "empty".to_owned()),
                ("phone".to_owned(), "literal [redacted]".to_owned()),
                (
                    "work_email".to_owned(),
                    "custom KeepDomain crate::anon::KeepDomain".to_owned()
                ),
            ]
        );
        assert_eq!(entity.erasure_subjects, ["email", "phone"]);
    }

    #[test]
    fn exempt_type() {
        let entity = ok(parse_quote! {
            #[cohort(exempt = "kept by law", tenantless)]
            struct Invoice { id: Uuid }
        });
        assert_eq!(
            entity.membership,
            Membership::Exempt {
                reason: "kept by law".into()
            }
        );
        assert_eq!(entity.entity_id, None);
        assert!(entity.tenantless);
        assert_eq!(entity.table, "invoice");
        let with_id = ok(parse_quote! {
            #[cohort(exempt = "kept by law", id = "a3f467fe-c5d0-4f17-9897-83c373cc1dc8")]
            struct Invoice { id: Uuid }
        });
        assert_eq!(
            with_id.entity_id,
            Some(0xa3f467fe_c5d0_4f17_9897_83c373cc1dc8)
        );
    }

    #[test]
    fn default_table_names() {
        for (type_name, table) in [
            ("SessionNote", "session_note"),
            ("CaseContact", "case_contact"),
            ("Note", "note"),
            ("HTTPRequestLog", "http_request_log"),
            ("AuditLogV2", "audit_log_v2"),
            ("Note2Fa", "note2_fa"),
            ("ABC", "abc"),
            ("already_snake", "already_snake"),
            ("Mixed_Case", "mixed_case"),
        ] {
            assert_eq!(default_table(type_name), table, "{type_name}");
        }
    }

    #[test]
    fn identity_errors() {
        assert_eq!(
            errors(parse_quote! {
                #[cohort(category = "c", anchor = "at")]
                struct A { at: i64 }
            }),
            [
                "a retained type needs a stable id: add `id = \"<uuid>\"` (generate one once, e.g. \
              with `uuidgen`, and never change it)"
            ]
        );
        assert_eq!(
            errors(parse_quote! {
                #[cohort(category = "c", anchor = "at", id = "00000000-0000-0000-0000-000000000000")]
                struct A { at: i64 }
            }),
            ["`id` must not be the nil UUID: generate a random one once (e.g. with `uuidgen`)"]
        );
        let malformed = errors(parse_quote! {
            #[cohort(exempt = "x", id = "a3f467fe-c5d0-4f17-9897")]
            struct A { at: i64 }
        });
        assert_eq!(malformed.len(), 1);
        assert!(
            malformed[0].starts_with("malformed `id`: `a3f467fe-c5d0-4f17-9897` is not a UUID")
        );
    }

    #[test]
    fn membership_errors() {
        assert_eq!(
            errors(parse_quote! { struct A { at: i64 } }),
            [
                "`A` neither takes part in retention nor is exempt: add `#[cohort(category = \"...\", \
              anchor = \"field\", id = \"<uuid>\")]` or `#[cohort(exempt = \"reason\")]`"
            ]
        );
        assert_eq!(
            errors(parse_quote! {
                #[cohort(exempt = "x", category = "c", anchor = "at")]
                struct A { at: i64 }
            }),
            [
                "`category` cannot be combined with `exempt`: an exempt type takes no part in \
                 retention; remove `exempt` or `category`",
                "`anchor` cannot be combined with `exempt`: an exempt type takes no part in \
                 retention; remove `exempt` or `anchor`",
            ]
        );
        assert_eq!(
            errors(parse_quote! {
                #[cohort(category = "c", anchor = "created", id = "a3f467fe-c5d0-4f17-9897-83c373cc1dc8")]
                struct A { at: i64, body: String }
            }),
            [
                "`anchor` must name a field of `A`, but there is no field `created` (fields: at, body)"
            ]
        );
        let half = errors(parse_quote! {
            #[cohort(category = "c")]
            struct A { at: i64 }
        });
        assert_eq!(half.len(), 2, "{half:?}");
        assert!(half[0].starts_with("a retained type needs `anchor = \"field\"`"));
        assert!(half[1].starts_with("a retained type needs a stable id"));
        assert_eq!(
            errors(parse_quote! { #[cohort(exempt = " ")] struct A { at: i64 } }),
            ["`exempt` needs a reason: write `exempt = \"why this type keeps its rows\"`"]
        );
    }

    #[test]
    fn marker_and_anonymise_errors() {
        assert_eq!(
            errors(parse_quote! {
                #[cohort(category = "c", anchor = "at", id = "a3f467fe-c5d0-4f17-9897-83c373cc1dc8", tenantless)]
                struct A {
                    #[cohort(record_id)] a: i64,
                    #[cohort(record_id, tenant)] b: i64,
                    #[cohort(anonymise = "null")] c: String,
                    #[cohort(anonymise = "null")] d: Option<String>,
                    at: i64,
                }
            }),
            [
                "the `record_id` marker is already on field `a`: a marker may be on one field only",
                "a `tenantless` type has no tenant field: remove `tenant` here or `tenantless` on \
                 the struct",
                "`tenantless` given here, but field `b` is marked `tenant`",
                "`anonymise = \"null\"` needs an `Option<_>` field, but `c` has type `String`; make \
                 it an `Option` or use `anonymise = \"empty\"` or `anonymise(literal = \"...\")`",
            ]
        );
    }

    #[test]
    fn name_and_shape_errors() {
        assert_eq!(
            errors(parse_quote! {
                #[cohort(exempt = "x", table = "", schema = "a\0b")]
                struct A { #[cohort(column = "b")] a: i64, b: i64 }
            }),
            [
                "column `b` is already used by field `a`; give one of them another \
                 `#[cohort(column = \"...\")]`",
                "`table` must be a valid PostgreSQL identifier, but this is empty",
                "`schema` must be a valid PostgreSQL identifier, but this contains a NUL byte",
            ]
        );
        assert_eq!(
            errors(parse_quote! { #[cohort(exempt = "x")] enum A { B } }),
            ["#[derive(Retained)] supports only structs with named fields, not enums"]
        );
        assert_eq!(
            errors(parse_quote! { #[cohort(exempt = "x")] struct A(i64); }),
            [
                "#[derive(Retained)] supports only structs with named fields; a tuple struct has no \
              field names to map to columns"
            ]
        );
        assert_eq!(
            errors(parse_quote! { #[cohort(exempt = "x")] struct A; }).len(),
            1
        );
        assert_eq!(
            errors(parse_quote! { #[cohort(exempt = "x")] union A { a: i64 } }).len(),
            1
        );
        let long = format!("{}Entity", "Very".repeat(16));
        let ident = Ident::new(&long, proc_macro2::Span::call_site());
        let too_long = errors(parse_quote! { #[cohort(exempt = "x")] struct #ident { a: i64 } });
        assert_eq!(too_long.len(), 1);
        assert!(too_long[0].contains("is longer than 63 bytes"));
    }

    #[test]
    fn malformed_keys_are_not_reported_missing_too() {
        assert_eq!(
            errors(parse_quote! {
                #[cohort(category = c, anchor = "at", id = 1)]
                struct A { at: i64 }
            }),
            [
                "`category` takes a string literal: write `category = \"...\"`",
                "`id` takes a string literal: write `id = \"...\"`",
            ]
        );
        assert_eq!(
            errors(parse_quote! { #[cohort(exempt)] struct A { at: i64 } }),
            ["`exempt` needs a value: write `exempt = \"...\"`"]
        );
    }

    #[test]
    fn errors_from_everywhere_are_combined() {
        let all = errors(parse_quote! {
            #[cohort(category = "c", anchor = "nope", id = "xyz", colour = "red")]
            struct A {
                #[cohort(tenant)] a: i64,
                #[cohort(tenant, anonymise = "null")] b: i64,
            }
        });
        assert_eq!(all.len(), 5, "{all:#?}");
    }
}
