//! Parsing of `#[cohort(...)]` attributes into plain data, with spans kept for
//! error messages. Only the syntax of single keys is checked here (known key,
//! value of the right shape, no duplicates); rules spanning several keys or
//! fields live in [`crate::entity`].

use syn::meta::ParseNestedMeta;
use syn::parse::Parser;
use syn::{Attribute, Expr, ExprLit, Lit, LitStr, Path, Token};

/// The keys allowed on the struct.
pub(crate) const CONTAINER_KEYS: &[&str] = &[
    "category",
    "anchor",
    "id",
    "table",
    "schema",
    "tenantless",
    "exempt",
];

/// The keys allowed on a field.
pub(crate) const FIELD_KEYS: &[&str] = &[
    "column",
    "record_id",
    "tenant",
    "soft_delete",
    "deleted_at",
    "anonymised_at",
    "anonymise",
    "anonymise_with",
    "erasure_subject",
];

/// Collects errors so that all of them are reported at once.
#[derive(Default)]
pub(crate) struct Errors(Option<syn::Error>);

impl Errors {
    /// Adds an error.
    pub(crate) fn push(&mut self, error: syn::Error) {
        match &mut self.0 {
            Some(first) => first.combine(error),
            None => self.0 = Some(error),
        }
    }

    /// Adds the error of `result`, if any, and returns its value otherwise.
    pub(crate) fn take<T>(&mut self, result: syn::Result<T>) -> Option<T> {
        result.map_err(|e| self.push(e)).ok()
    }

    /// `Err` with every collected error, or `Ok(value)` if there were none.
    pub(crate) fn finish<T>(self, value: T) -> syn::Result<T> {
        match self.0 {
            Some(error) => Err(error),
            None => Ok(value),
        }
    }
}

/// A key as written in an attribute, with the attribute that holds it (for
/// spans of errors about keys that are missing next to it).
#[derive(Clone)]
pub(crate) struct Key<T> {
    /// The key's path (`category`, `tenant`, ...).
    pub(crate) path: Path,
    /// The whole `#[cohort(...)]` attribute the key appears in.
    pub(crate) attr: Attribute,
    /// The key's value.
    pub(crate) value: T,
}

/// The `#[cohort(...)]` keys found on the struct itself.
#[derive(Default)]
pub(crate) struct ContainerAttrs {
    /// `category = "..."`.
    pub(crate) category: Option<Key<LitStr>>,
    /// `anchor = "field"`.
    pub(crate) anchor: Option<Key<LitStr>>,
    /// `id = "uuid"`.
    pub(crate) id: Option<Key<LitStr>>,
    /// `table = "..."`.
    pub(crate) table: Option<Key<LitStr>>,
    /// `schema = "..."`.
    pub(crate) schema: Option<Key<LitStr>>,
    /// `tenantless`.
    pub(crate) tenantless: Option<Key<()>>,
    /// `exempt = "reason"`.
    pub(crate) exempt: Option<Key<LitStr>>,
    /// Every known key written, even with a malformed value, so that a key
    /// already reported as malformed is not reported as missing as well.
    pub(crate) written: Vec<(&'static str, Attribute)>,
}

impl ContainerAttrs {
    /// The attribute holding `key`, if it was written (validly or not).
    pub(crate) fn wrote(&self, key: &str) -> Option<&Attribute> {
        self.written
            .iter()
            .find(|(k, _)| *k == key)
            .map(|(_, attr)| attr)
    }
}

/// A field role marker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Marker {
    /// `record_id`.
    RecordId,
    /// `tenant`.
    Tenant,
    /// `soft_delete`.
    SoftDelete,
    /// `deleted_at`.
    DeletedAt,
    /// `anonymised_at`.
    AnonymisedAt,
}

impl Marker {
    /// Every marker, in `Markers` field order.
    pub(crate) const ALL: [Marker; 5] = [
        Marker::RecordId,
        Marker::Tenant,
        Marker::SoftDelete,
        Marker::DeletedAt,
        Marker::AnonymisedAt,
    ];

    /// The attribute key, which is also the `Markers` field name.
    pub(crate) fn key(self) -> &'static str {
        match self {
            Marker::RecordId => "record_id",
            Marker::Tenant => "tenant",
            Marker::SoftDelete => "soft_delete",
            Marker::DeletedAt => "deleted_at",
            Marker::AnonymisedAt => "anonymised_at",
        }
    }

    /// The marker with this key.
    fn from_key(key: &str) -> Option<Marker> {
        Marker::ALL.into_iter().find(|m| m.key() == key)
    }
}

/// How a field is anonymised, as written.
#[derive(Clone)]
pub(crate) enum AnonymiseSpec {
    /// `anonymise = "null"` (the literal, for spans).
    Null(LitStr),
    /// `anonymise = "empty"`.
    Empty,
    /// `anonymise(literal = "...")`.
    Literal(LitStr),
    /// `anonymise_with = path::To::Type`.
    Custom(Path),
}

/// The `#[cohort(...)]` keys found on one field.
#[derive(Default)]
pub(crate) struct FieldAttrs {
    /// `column = "..."`.
    pub(crate) column: Option<Key<LitStr>>,
    /// Role markers, in the order written.
    pub(crate) markers: Vec<(Marker, Key<()>)>,
    /// `anonymise = ...`, `anonymise(...)` or `anonymise_with = ...`.
    pub(crate) anonymise: Option<Key<AnonymiseSpec>>,
    /// `erasure_subject`.
    pub(crate) erasure_subject: Option<Key<()>>,
}

impl FieldAttrs {
    /// The marker key, if this field carries `marker`.
    pub(crate) fn marker(&self, marker: Marker) -> Option<&Key<()>> {
        self.markers
            .iter()
            .find(|(m, _)| *m == marker)
            .map(|(_, key)| key)
    }
}

/// Parses every `#[cohort(...)]` attribute of the struct. Other attributes are
/// ignored. Errors go to `errors`; keys that parsed are kept.
pub(crate) fn parse_container_attrs(attrs: &[Attribute], errors: &mut Errors) -> ContainerAttrs {
    let mut out = ContainerAttrs::default();
    for attr in attrs.iter().filter(|a| a.path().is_ident("cohort")) {
        let result = attr.parse_nested_meta(|meta| {
            let key = key_name(&meta);
            if let Some(known) = CONTAINER_KEYS.iter().find(|k| **k == key) {
                out.written.push((known, attr.clone()));
            }
            match key.as_str() {
                "category" => set_string(&mut out.category, attr, &meta, errors),
                "anchor" => set_string(&mut out.anchor, attr, &meta, errors),
                "id" => set_string(&mut out.id, attr, &meta, errors),
                "table" => set_string(&mut out.table, attr, &meta, errors),
                "schema" => set_string(&mut out.schema, attr, &meta, errors),
                "exempt" => set_string(&mut out.exempt, attr, &meta, errors),
                "tenantless" => set_flag(&mut out.tenantless, attr, &meta, errors),
                _ => unknown_key(&meta, &key, CONTAINER_KEYS, FIELD_KEYS, "a field", errors),
            }
        });
        errors.take(result);
    }
    out
}

/// Parses every `#[cohort(...)]` attribute of one field. Other attributes are
/// ignored. Errors go to `errors`; keys that parsed are kept.
pub(crate) fn parse_field_attrs(attrs: &[Attribute], errors: &mut Errors) -> FieldAttrs {
    let mut out = FieldAttrs::default();
    for attr in attrs.iter().filter(|a| a.path().is_ident("cohort")) {
        let result = attr.parse_nested_meta(|meta| {
            let key = key_name(&meta);
            if let Some(marker) = Marker::from_key(&key) {
                let mut slot = out.marker(marker).cloned();
                let was_set = slot.is_some();
                set_flag(&mut slot, attr, &meta, errors)?;
                if let (false, Some(new)) = (was_set, slot) {
                    out.markers.push((marker, new));
                }
                return Ok(());
            }
            match key.as_str() {
                "column" => set_string(&mut out.column, attr, &meta, errors),
                "erasure_subject" => set_flag(&mut out.erasure_subject, attr, &meta, errors),
                "anonymise" | "anonymise_with" => {
                    let spec = if key == "anonymise" {
                        parse_anonymise(&meta, errors)?
                    } else {
                        parse_anonymise_with(&meta, errors)?
                    };
                    let Some(spec) = spec else { return Ok(()) };
                    if let Some(first) = &out.anonymise {
                        let first_key = path_name(&first.path);
                        let message = if first_key == key {
                            format!("duplicate `{key}`: a field has one anonymise method")
                        } else {
                            format!(
                                "`{key}` conflicts with `{first_key}` on the same field: \
                                 a field has one anonymise method"
                            )
                        };
                        errors.push(meta.error(message));
                    } else {
                        out.anonymise = Some(Key {
                            path: meta.path.clone(),
                            attr: attr.clone(),
                            value: spec,
                        });
                    }
                    Ok(())
                }
                _ => unknown_key(
                    &meta,
                    &key,
                    FIELD_KEYS,
                    CONTAINER_KEYS,
                    "the struct",
                    errors,
                ),
            }
        });
        errors.take(result);
    }
    out
}

/// The key as a string (`a::b` for paths, which are never valid keys).
fn key_name(meta: &ParseNestedMeta<'_>) -> String {
    path_name(&meta.path)
}

/// A path written back as a string, without spaces.
fn path_name(path: &Path) -> String {
    path.segments
        .iter()
        .map(|s| s.ident.to_string())
        .collect::<Vec<_>>()
        .join("::")
}

/// Reports an unknown key and skips its value so the other keys of the same
/// attribute are still checked.
fn unknown_key(
    meta: &ParseNestedMeta<'_>,
    key: &str,
    allowed: &[&str],
    other_place_keys: &[&str],
    other_place: &str,
    errors: &mut Errors,
) -> syn::Result<()> {
    let message = if other_place_keys.contains(&key) {
        format!("`{key}` is not allowed here; it belongs on {other_place}")
    } else {
        format!(
            "unknown `cohort` attribute key `{key}`; expected one of: {}",
            allowed.join(", ")
        )
    };
    errors.push(syn::Error::new_spanned(&meta.path, message));
    skip_value(meta)
}

/// Consumes `= <expr>` or `(...)` after a key, if present.
fn skip_value(meta: &ParseNestedMeta<'_>) -> syn::Result<()> {
    if meta.input.peek(Token![=]) {
        meta.value()?.parse::<Expr>()?;
    } else if meta.input.peek(syn::token::Paren) {
        meta.input.parse::<proc_macro2::TokenTree>()?;
    }
    Ok(())
}

/// Reports `key` already being set (on this or an earlier attribute).
fn duplicate(meta: &ParseNestedMeta<'_>, key: &str) -> syn::Error {
    syn::Error::new_spanned(
        &meta.path,
        format!("duplicate `{key}`: it may be given once"),
    )
}

/// Parses `key = "string"` into `slot`.
fn set_string(
    slot: &mut Option<Key<LitStr>>,
    attr: &Attribute,
    meta: &ParseNestedMeta<'_>,
    errors: &mut Errors,
) -> syn::Result<()> {
    let key = key_name(meta);
    let Some(value) = string_value(meta, &key, errors)? else {
        return Ok(());
    };
    if slot.is_some() {
        errors.push(duplicate(meta, &key));
    } else {
        *slot = Some(Key {
            path: meta.path.clone(),
            attr: attr.clone(),
            value,
        });
    }
    Ok(())
}

/// Parses a bare `key` (no value) into `slot`.
fn set_flag(
    slot: &mut Option<Key<()>>,
    attr: &Attribute,
    meta: &ParseNestedMeta<'_>,
    errors: &mut Errors,
) -> syn::Result<()> {
    let key = key_name(meta);
    if meta.input.peek(Token![=]) || meta.input.peek(syn::token::Paren) {
        skip_value(meta)?;
        errors.push(meta.error(format!("`{key}` takes no value: write `#[cohort({key})]`")));
        return Ok(());
    }
    if slot.is_some() {
        errors.push(duplicate(meta, &key));
    } else {
        *slot = Some(Key {
            path: meta.path.clone(),
            attr: attr.clone(),
            value: (),
        });
    }
    Ok(())
}

/// The string literal after `key =`. A missing `=` or a value that is not a
/// string literal is reported and yields `None`.
fn string_value(
    meta: &ParseNestedMeta<'_>,
    key: &str,
    errors: &mut Errors,
) -> syn::Result<Option<LitStr>> {
    if !meta.input.peek(Token![=]) {
        skip_value(meta)?;
        errors.push(meta.error(format!("`{key}` needs a value: write `{key} = \"...\"`")));
        return Ok(None);
    }
    let expr: Expr = meta.value()?.parse()?;
    match expr {
        Expr::Lit(ExprLit {
            lit: Lit::Str(lit), ..
        }) if lit.suffix().is_empty() => Ok(Some(lit)),
        other => {
            errors.push(syn::Error::new_spanned(
                other,
                format!("`{key}` takes a string literal: write `{key} = \"...\"`"),
            ));
            Ok(None)
        }
    }
}

/// The usage hint for `anonymise`.
const ANONYMISE_FORMS: &str = "expected `anonymise = \"null\"`, `anonymise = \"empty\"` or \
                               `anonymise(literal = \"...\")`";

/// Parses `anonymise = "null" | "empty"` or `anonymise(literal = "...")`.
fn parse_anonymise(
    meta: &ParseNestedMeta<'_>,
    errors: &mut Errors,
) -> syn::Result<Option<AnonymiseSpec>> {
    if meta.input.peek(syn::token::Paren) {
        let group: proc_macro2::Group = meta.input.parse()?;
        if group.stream().is_empty() {
            let path = &meta.path;
            errors.push(syn::Error::new_spanned(
                quote::quote!(#path #group),
                format!("`anonymise(...)` needs `literal = \"...\"`; {ANONYMISE_FORMS}"),
            ));
            return Ok(None);
        }
        let mut literal: Option<LitStr> = None;
        let mut problems = false;
        let parse_inner = syn::meta::parser(|inner| {
            let key = key_name(&inner);
            if key != "literal" {
                problems = true;
                errors.push(syn::Error::new_spanned(
                    &inner.path,
                    format!("unknown key `{key}` in `anonymise(...)`; {ANONYMISE_FORMS}"),
                ));
                return skip_value(&inner);
            }
            match string_value(&inner, &key, errors)? {
                Some(_) if literal.is_some() => {
                    problems = true;
                    errors.push(duplicate(&inner, &key));
                }
                Some(value) => literal = Some(value),
                None => problems = true,
            }
            Ok(())
        });
        parse_inner.parse2(group.stream())?;
        return Ok(match literal {
            Some(value) if !problems => Some(AnonymiseSpec::Literal(value)),
            Some(_) => None,
            None => {
                if !problems {
                    errors.push(meta.error(format!(
                        "`anonymise(...)` needs `literal = \"...\"`; {ANONYMISE_FORMS}"
                    )));
                }
                None
            }
        });
    }
    let Some(value) = string_value(meta, "anonymise", errors)? else {
        return Ok(None);
    };
    match value.value().as_str() {
        "null" => Ok(Some(AnonymiseSpec::Null(value))),
        "empty" => Ok(Some(AnonymiseSpec::Empty)),
        other => {
            errors.push(syn::Error::new_spanned(
                &value,
                format!(
                    "unknown anonymise method `{}`; {ANONYMISE_FORMS}, or \
                     `anonymise_with = path::To::Anonymiser`",
                    other.escape_default()
                ),
            ));
            Ok(None)
        }
    }
}

/// Parses `anonymise_with = path::To::Type`.
fn parse_anonymise_with(
    meta: &ParseNestedMeta<'_>,
    errors: &mut Errors,
) -> syn::Result<Option<AnonymiseSpec>> {
    const FORM: &str = "write `anonymise_with = path::To::Type`, naming a type that implements \
                        `cohort::Anonymiser`";
    if !meta.input.peek(Token![=]) {
        skip_value(meta)?;
        errors.push(meta.error(format!("`anonymise_with` needs a value: {FORM}")));
        return Ok(None);
    }
    let expr: Expr = meta.value()?.parse()?;
    match expr {
        Expr::Path(path) if path.qself.is_none() && path.attrs.is_empty() => {
            Ok(Some(AnonymiseSpec::Custom(path.path)))
        }
        other => {
            errors.push(syn::Error::new_spanned(
                other,
                format!(
                    "`anonymise_with` takes a type path, not an expression or a string: {FORM}"
                ),
            ));
            Ok(None)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use syn::parse_quote;

    fn container(attrs: Vec<Attribute>) -> (ContainerAttrs, Vec<String>) {
        let mut errors = Errors::default();
        let out = parse_container_attrs(&attrs, &mut errors);
        (out, messages(errors))
    }

    fn field(attrs: Vec<Attribute>) -> (FieldAttrs, Vec<String>) {
        let mut errors = Errors::default();
        let out = parse_field_attrs(&attrs, &mut errors);
        (out, messages(errors))
    }

    fn messages(errors: Errors) -> Vec<String> {
        match errors.finish(()) {
            Ok(()) => Vec::new(),
            Err(e) => e.into_iter().map(|e| e.to_string()).collect(),
        }
    }

    fn value(key: &Option<Key<LitStr>>) -> Option<String> {
        key.as_ref().map(|k| k.value.value())
    }

    #[test]
    fn container_keys_in_one_or_several_attributes() {
        let (attrs, errors) = container(vec![
            parse_quote!(#[cohort(category = "session-notes", anchor = "created_at")]),
            parse_quote!(#[doc = "not ours"]),
            parse_quote!(#[cohort(id = "a3f467fe-c5d0-4f17-9897-83c373cc1dc8", table = "notes")]),
            parse_quote!(#[cohort(schema = "app", tenantless)]),
        ]);
        assert_eq!(errors, Vec::<String>::new());
        assert_eq!(value(&attrs.category).as_deref(), Some("session-notes"));
        assert_eq!(value(&attrs.anchor).as_deref(), Some("created_at"));
        assert_eq!(
            value(&attrs.id).as_deref(),
            Some("a3f467fe-c5d0-4f17-9897-83c373cc1dc8")
        );
        assert_eq!(value(&attrs.table).as_deref(), Some("notes"));
        assert_eq!(value(&attrs.schema).as_deref(), Some("app"));
        assert!(attrs.tenantless.is_some());
        assert!(attrs.exempt.is_none());
    }

    #[test]
    fn container_errors_are_all_reported() {
        let (attrs, errors) = container(vec![
            parse_quote!(#[cohort(category = "a", colour = "blue", category = "b", tenantless = true)]),
            parse_quote!(#[cohort(anchor = created_at, record_id, table)]),
        ]);
        assert_eq!(
            errors,
            vec![
                "unknown `cohort` attribute key `colour`; expected one of: category, anchor, id, \
                 table, schema, tenantless, exempt",
                "duplicate `category`: it may be given once",
                "`tenantless` takes no value: write `#[cohort(tenantless)]`",
                "`anchor` takes a string literal: write `anchor = \"...\"`",
                "`record_id` is not allowed here; it belongs on a field",
                "`table` needs a value: write `table = \"...\"`",
            ]
        );
        assert_eq!(value(&attrs.category).as_deref(), Some("a"));
        assert!(attrs.anchor.is_none() && attrs.tenantless.is_none() && attrs.table.is_none());
    }

    #[test]
    fn syntax_errors_are_reported() {
        let (_, errors) = container(vec![parse_quote!(#[cohort])]);
        assert_eq!(errors.len(), 1);
        let (_, errors) = container(vec![parse_quote!(#[cohort(category = "a" "b")])]);
        assert_eq!(errors.len(), 1);
    }

    #[test]
    fn field_keys() {
        let (attrs, errors) = field(vec![
            parse_quote!(#[cohort(column = "e_mail", tenant)]),
            parse_quote!(#[cohort(anonymise = "null", erasure_subject)]),
        ]);
        assert_eq!(errors, Vec::<String>::new());
        assert_eq!(value(&attrs.column).as_deref(), Some("e_mail"));
        assert!(attrs.marker(Marker::Tenant).is_some());
        assert!(attrs.marker(Marker::RecordId).is_none());
        assert!(matches!(
            attrs.anonymise.map(|k| k.value),
            Some(AnonymiseSpec::Null(_))
        ));
        assert!(attrs.erasure_subject.is_some());
    }

    #[test]
    fn every_marker_key() {
        let (attrs, errors) = field(vec![parse_quote!(
            #[cohort(record_id, tenant, soft_delete, deleted_at, anonymised_at)]
        )]);
        assert_eq!(errors, Vec::<String>::new());
        let found: Vec<Marker> = attrs.markers.iter().map(|(m, _)| *m).collect();
        assert_eq!(found, Marker::ALL);
    }

    #[test]
    fn anonymise_forms() {
        let spec = |attr: Attribute| field(vec![attr]).0.anonymise.map(|k| k.value);
        assert!(matches!(
            spec(parse_quote!(#[cohort(anonymise = "empty")])),
            Some(AnonymiseSpec::Empty)
        ));
        assert!(matches!(
            spec(parse_quote!(#[cohort(anonymise(literal = "[redacted]"))])),
            Some(AnonymiseSpec::Literal(lit)) if lit.value() == "[redacted]"
        ));
        assert!(matches!(
            spec(parse_quote!(#[cohort(anonymise_with = crate::anon::KeepDomain)])),
            Some(AnonymiseSpec::Custom(path)) if path_name(&path) == "crate::anon::KeepDomain"
        ));
    }

    #[test]
    fn field_errors_are_all_reported() {
        let (_, errors) = field(vec![
            parse_quote!(#[cohort(anonymise = "zero", tenant, tenant, category = "x")]),
            parse_quote!(#[cohort(anonymise(literal = "a", other = 1), anonymise_with = "Foo")]),
            parse_quote!(#[cohort(anonymise(), erasure_subject(x))]),
        ]);
        assert_eq!(
            errors,
            vec![
                "unknown anonymise method `zero`; expected `anonymise = \"null\"`, `anonymise = \
                 \"empty\"` or `anonymise(literal = \"...\")`, or `anonymise_with = \
                 path::To::Anonymiser`",
                "duplicate `tenant`: it may be given once",
                "`category` is not allowed here; it belongs on the struct",
                "unknown key `other` in `anonymise(...)`; expected `anonymise = \"null\"`, \
                 `anonymise = \"empty\"` or `anonymise(literal = \"...\")`",
                "`anonymise_with` takes a type path, not an expression or a string: write \
                 `anonymise_with = path::To::Type`, naming a type that implements \
                 `cohort::Anonymiser`",
                "`anonymise(...)` needs `literal = \"...\"`; expected `anonymise = \"null\"`, \
                 `anonymise = \"empty\"` or `anonymise(literal = \"...\")`",
                "`erasure_subject` takes no value: write `#[cohort(erasure_subject)]`",
            ]
        );
    }

    #[test]
    fn two_anonymise_methods_conflict() {
        let (attrs, errors) = field(vec![
            parse_quote!(#[cohort(anonymise = "null")]),
            parse_quote!(#[cohort(anonymise_with = Keep, anonymise = "empty")]),
        ]);
        assert_eq!(
            errors,
            vec![
                "`anonymise_with` conflicts with `anonymise` on the same field: a field has one \
                 anonymise method",
                "duplicate `anonymise`: a field has one anonymise method",
            ]
        );
        assert!(matches!(
            attrs.anonymise.map(|k| k.value),
            Some(AnonymiseSpec::Null(_))
        ));
    }
}
