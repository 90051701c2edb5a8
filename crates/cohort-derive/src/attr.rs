//! Parsing of `#[cohort(...)]` attributes into plain data, with spans kept for
//! error messages, on [darling].
//!
//! darling finds every `cohort` attribute (keys may be spread over several),
//! splits them into keys, hands each known key to its field of
//! [`ContainerInput`] / [`FieldInput`] and every other key to [`UnknownKeys`]
//! (`#[darling(flatten)]`), and parses `anonymise(...)`'s inner list the same
//! way ([`AnonymiseArgs`]). What darling cannot do for us, and why:
//!
//! - **Keep going past a bad value.** darling fails a whole struct when one of
//!   its fields fails to parse, which would hide the type from the checks that
//!   span several keys and fields ([`crate::entity`]) and lose the promise
//!   that every problem is reported at once. So a key's `FromMeta` ([`Key`])
//!   never fails: it keeps the parse result, and [`settle`] reports malformed
//!   values and duplicates afterwards, into darling's error accumulator.
//! - **Our messages.** darling's "Unknown field: `x`" / "Duplicate field `x`"
//!   cannot say where a misplaced key belongs or how to write a value; each
//!   key is a `#[darling(multiple)]` field and the messages are written here.
//! - **`#[cohort]` without parentheses**, which darling accepts as an empty
//!   list, is reported by [`check_attribute_forms`].
//!
//! Only the syntax of single keys is checked here (known key, value of the
//! right shape, no duplicates); rules spanning several keys or fields live in
//! [`crate::entity`].
//!
//! Values written through a `macro_rules!` fragment (`id = $id` with
//! `$id:literal`, `anonymise_with = $a` with `$a:path`) arrive wrapped in an
//! invisible group; [`ungroup`] looks through it wherever a literal or a path
//! is expected.

use std::marker::PhantomData;

use darling::ast::{MetaNameValueInvalidExpr, NestedMeta};
use darling::error::Accumulator;
use darling::util::path_to_string;
use darling::{Error, FromDeriveInput, FromField, FromMeta};
use proc_macro2::{Span, TokenStream};
use syn::{Attribute, DeriveInput, Expr, ExprLit, Lit, LitStr, Meta, MetaList, Path};

/// The keys allowed on the struct, in the order their problems are reported.
pub(crate) const CONTAINER_KEYS: &[&str] = &[
    "category",
    "anchor",
    "id",
    "table",
    "schema",
    "tenantless",
    "exempt",
    "guard",
    "category_from",
    "category_map",
];

/// The keys allowed on a field, in the order their problems are reported.
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
    "guard_allow",
    "event_key",
];

/// An error at `span`. darling's errors hold one span; `Span`s that cover a
/// whole delimited group (`[...]`, `(...)`) come from `DelimSpan::join`.
pub(crate) fn error_at(span: Span, message: impl std::fmt::Display) -> Error {
    syn::Error::new(span, message).into()
}

/// `expr` without the invisible (`Delimiter::None`) groups that
/// `macro_rules!` wraps around `$x:literal`, `$x:expr` and `$x:path`
/// fragments it pastes into an attribute.
pub(crate) fn ungroup(mut expr: &Expr) -> &Expr {
    while let Expr::Group(group) = expr {
        expr = &group.expr;
    }
    expr
}

/// How a key's value is read. Implementations return errors with our
/// messages, spanned on the part at fault.
pub(crate) trait KeyValue: Sized {
    /// The value of `key` from its whole meta item (`key`, `key = v` or
    /// `key(...)`).
    fn parse(key: &str, meta: &Meta) -> darling::Result<Self>;

    /// The value of `key = <tokens>` where the tokens are not an expression.
    fn parse_invalid(key: &str, tokens: &TokenStream) -> darling::Result<Self>;
}

/// A key as written: its path, and its value or what is wrong with the value.
///
/// `FromMeta` for `Key` never fails (see the module documentation).
#[derive(Clone, Debug)]
pub(crate) struct Key<T> {
    /// The key's path (`category`, `tenant`, ...).
    pub(crate) path: Path,
    /// The parsed value, or the error to report for it.
    pub(crate) value: darling::Result<T>,
}

impl<T: KeyValue> FromMeta for Key<T> {
    fn from_meta(item: &Meta) -> darling::Result<Self> {
        let key = path_to_string(item.path());
        Ok(Key {
            path: item.path().clone(),
            value: T::parse(&key, item),
        })
    }

    fn from_invalid_expr(item: &MetaNameValueInvalidExpr) -> darling::Result<Self> {
        let key = path_to_string(&item.path);
        Ok(Key {
            path: item.path.clone(),
            value: T::parse_invalid(&key, &item.value),
        })
    }
}

/// A key given with a well-formed value.
#[derive(Clone, Debug)]
pub(crate) struct Given<T> {
    /// The key's path, for spans of errors about the key itself.
    pub(crate) path: Path,
    /// The value.
    pub(crate) value: T,
}

/// One key after [`settle`]: its first well-formed value, and whether the key
/// was written at all (even with a malformed value), so that a key already
/// reported as malformed is not reported as missing as well.
#[derive(Debug)]
pub(crate) struct Setting<T> {
    /// The first well-formed value.
    pub(crate) given: Option<Given<T>>,
    /// Whether the key appears, well-formed or not.
    pub(crate) written: bool,
}

impl<T> Default for Setting<T> {
    fn default() -> Self {
        Setting {
            given: None,
            written: false,
        }
    }
}

/// Reports every malformed value of one key and every well-formed repeat of
/// it, and keeps the first well-formed value.
fn settle<T>(keys: Vec<Key<T>>, errors: &mut Accumulator) -> Setting<T> {
    let written = !keys.is_empty();
    let mut given: Option<Given<T>> = None;
    for key in keys {
        match key.value {
            Err(error) => errors.push(error),
            Ok(_) if given.is_some() => errors.push(
                Error::custom(format!(
                    "duplicate `{}`: it may be given once",
                    path_to_string(&key.path)
                ))
                .with_span(&key.path),
            ),
            Ok(value) => {
                given = Some(Given {
                    path: key.path,
                    value,
                })
            }
        }
    }
    Setting { given, written }
}

/// Where a key was written, for the message about an unknown key.
pub(crate) trait Place {
    /// The message for the unknown key `key`.
    fn unknown(key: &str) -> String;
}

/// The struct's `#[cohort(...)]`.
#[derive(Debug)]
pub(crate) struct OnStruct;

impl Place for OnStruct {
    fn unknown(key: &str) -> String {
        if FIELD_KEYS.contains(&key) {
            format!("`{key}` is not allowed here; it belongs on a field")
        } else {
            format!(
                "unknown `cohort` attribute key `{key}`; expected one of: {}",
                CONTAINER_KEYS.join(", ")
            )
        }
    }
}

/// A field's `#[cohort(...)]`.
#[derive(Debug)]
pub(crate) struct OnField;

impl Place for OnField {
    fn unknown(key: &str) -> String {
        if CONTAINER_KEYS.contains(&key) {
            format!("`{key}` is not allowed here; it belongs on the struct")
        } else {
            format!(
                "unknown `cohort` attribute key `{key}`; expected one of: {}",
                FIELD_KEYS.join(", ")
            )
        }
    }
}

/// Inside `anonymise(...)`.
#[derive(Debug)]
pub(crate) struct InAnonymise;

impl Place for InAnonymise {
    fn unknown(key: &str) -> String {
        format!("unknown key `{key}` in `anonymise(...)`; {ANONYMISE_FORMS}")
    }
}

/// The keys no other field of a darling struct claimed
/// (`#[darling(flatten)]`), as one error each. Never fails.
#[derive(Debug)]
pub(crate) struct UnknownKeys<P> {
    /// One error per unknown key, in the order written.
    errors: Vec<Error>,
    /// Where the keys were written.
    place: PhantomData<P>,
}

impl<P: Place> FromMeta for UnknownKeys<P> {
    fn from_list(items: &[NestedMeta]) -> darling::Result<Self> {
        let errors = items
            .iter()
            .map(|item| match item {
                NestedMeta::Meta(meta) => unknown_key::<P>(meta.path()),
                NestedMeta::NameValueInvalidExpr(meta) => unknown_key::<P>(&meta.path),
                // darling reports literals itself and never passes them on.
                NestedMeta::Lit(lit) => Error::unsupported_format("literal").with_span(lit),
            })
            .collect();
        Ok(UnknownKeys {
            errors,
            place: PhantomData,
        })
    }
}

/// The error for the unknown key `path` written at `P`.
fn unknown_key<P: Place>(path: &Path) -> Error {
    Error::custom(P::unknown(&path_to_string(path))).with_span(path)
}

/// A `key = "string"` value.
impl KeyValue for LitStr {
    fn parse(key: &str, meta: &Meta) -> darling::Result<Self> {
        let Meta::NameValue(name_value) = meta else {
            return Err(
                Error::custom(format!("`{key}` needs a value: write `{key} = \"...\"`"))
                    .with_span(meta.path()),
            );
        };
        match ungroup(&name_value.value) {
            Expr::Lit(ExprLit {
                lit: Lit::Str(lit),
                attrs,
            }) if attrs.is_empty() && lit.suffix().is_empty() => Ok(lit.clone()),
            other => Err(not_a_string(key).with_span(other)),
        }
    }

    fn parse_invalid(key: &str, tokens: &TokenStream) -> darling::Result<Self> {
        Err(not_a_string(key).with_span(tokens))
    }
}

/// `key` was given something other than a string literal.
fn not_a_string(key: &str) -> Error {
    Error::custom(format!(
        "`{key}` takes a string literal: write `{key} = \"...\"`"
    ))
}

/// A key that takes no value (`tenantless`, `record_id`, ...).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Flag;

impl KeyValue for Flag {
    fn parse(key: &str, meta: &Meta) -> darling::Result<Self> {
        match meta {
            Meta::Path(_) => Ok(Flag),
            Meta::NameValue(name_value) => Err(takes_no_value(key).with_span(&name_value.value)),
            Meta::List(list) => Err(error_at(list.delimiter.span().join(), takes_no_value(key))),
        }
    }

    fn parse_invalid(key: &str, tokens: &TokenStream) -> darling::Result<Self> {
        Err(takes_no_value(key).with_span(tokens))
    }
}

/// A flag key was given a value.
fn takes_no_value(key: &str) -> Error {
    Error::custom(format!("`{key}` takes no value: write `#[cohort({key})]`"))
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
}

/// How a field is anonymised, as written.
#[derive(Clone, Debug)]
pub(crate) enum AnonymiseSpec {
    /// `anonymise = "null"` (the literal, for spans).
    Null(LitStr),
    /// `anonymise = "empty"`.
    Empty,
    /// `anonymise(literal = "...")`.
    Literal(LitStr),
    /// `anonymise_with = path::To::Type`.
    Custom(Path),
    /// `anonymise_with = "name"`: an anonymiser value the host registers
    /// under that name on the builder.
    Named(LitStr),
}

/// The usage hint for `anonymise`.
const ANONYMISE_FORMS: &str = "expected `anonymise = \"null\"`, `anonymise = \"empty\"` or \
                               `anonymise(literal = \"...\")`";

/// `anonymise = "null" | "empty"` or `anonymise(literal = "...")`.
impl KeyValue for AnonymiseSpec {
    fn parse(key: &str, meta: &Meta) -> darling::Result<Self> {
        if let Meta::List(list) = meta {
            return parse_anonymise_list(list);
        }
        let value = <LitStr as KeyValue>::parse(key, meta)?;
        match value.value().as_str() {
            "null" => Ok(AnonymiseSpec::Null(value)),
            "empty" => Ok(AnonymiseSpec::Empty),
            other => Err(Error::custom(format!(
                "unknown anonymise method `{}`; {ANONYMISE_FORMS}, or \
                 `anonymise_with = path::To::Anonymiser`",
                other.escape_default()
            ))
            .with_span(&value)),
        }
    }

    fn parse_invalid(key: &str, tokens: &TokenStream) -> darling::Result<Self> {
        Err(not_a_string(key).with_span(tokens))
    }
}

/// The keys inside `anonymise(...)`.
#[derive(FromMeta)]
struct AnonymiseArgs {
    /// `literal = "..."`.
    #[darling(multiple)]
    literal: Vec<Key<LitStr>>,
    /// Anything else.
    #[darling(flatten)]
    unknown: UnknownKeys<InAnonymise>,
}

/// `anonymise(literal = "...")`.
fn parse_anonymise_list(list: &MetaList) -> darling::Result<AnonymiseSpec> {
    let group = list.delimiter.span().join();
    let needs_literal = || {
        error_at(
            group,
            format!("`anonymise(...)` needs `literal = \"...\"`; {ANONYMISE_FORMS}"),
        )
    };
    let items = NestedMeta::parse_meta_list(list.tokens.clone())?;
    if items.is_empty() {
        return Err(needs_literal());
    }
    let args = AnonymiseArgs::from_list(&items)?;
    let mut errors = Error::accumulator();
    for error in args.unknown.errors {
        errors.push(error);
    }
    let literal = settle(args.literal, &mut errors);
    errors.finish()?;
    match literal.given {
        Some(given) => Ok(AnonymiseSpec::Literal(given.value)),
        None => Err(needs_literal()),
    }
}

/// `anonymise_with = path::To::Type` (the anonymiser's type path) or
/// `anonymise_with = "name"` (an anonymiser value registered by name).
#[derive(Clone, Debug)]
pub(crate) enum AnonymiserPath {
    Type(Path),
    Named(LitStr),
}

/// How to write `anonymise_with`.
const ANONYMISE_WITH_FORM: &str = "write `anonymise_with = path::To::Type`, naming a type that \
                                   implements `cohort::Anonymiser`, or `anonymise_with = \"name\"`, \
                                   naming an anonymiser registered with `CohortBuilder::anonymiser`";

impl KeyValue for AnonymiserPath {
    fn parse(key: &str, meta: &Meta) -> darling::Result<Self> {
        let Meta::NameValue(name_value) = meta else {
            return Err(
                Error::custom(format!("`{key}` needs a value: {ANONYMISE_WITH_FORM}"))
                    .with_span(meta.path()),
            );
        };
        match ungroup(&name_value.value) {
            Expr::Path(path) if path.qself.is_none() && path.attrs.is_empty() => {
                Ok(AnonymiserPath::Type(path.path.clone()))
            }
            Expr::Lit(syn::ExprLit {
                lit: syn::Lit::Str(name),
                ..
            }) if !name.value().trim().is_empty() => Ok(AnonymiserPath::Named(name.clone())),
            other => Err(not_a_path(key).with_span(other)),
        }
    }

    fn parse_invalid(key: &str, tokens: &TokenStream) -> darling::Result<Self> {
        Err(not_a_path(key).with_span(tokens))
    }
}

/// `anonymise_with` was given something other than a path.
fn not_a_path(key: &str) -> Error {
    Error::custom(format!(
        "`{key}` takes a type path or a non-empty name: {ANONYMISE_WITH_FORM}"
    ))
}

/// `category_map("value" = "category", ...)` (contract SL3): each value of
/// the category column with its category, in order.
#[derive(Clone, Debug)]
pub(crate) struct CategoryMap(pub(crate) Vec<(LitStr, LitStr)>);

/// How `category_map` is written.
const CATEGORY_MAP_FORM: &str =
    "write `category_map(\"value\" = \"category\", ...)`, a string for each value of the column";

impl KeyValue for CategoryMap {
    fn parse(key: &str, meta: &Meta) -> darling::Result<Self> {
        let Meta::List(list) = meta else {
            return Err(
                Error::custom(format!("`{key}` takes a list: {CATEGORY_MAP_FORM}"))
                    .with_span(meta.path()),
            );
        };
        let pairs = list
            .parse_args_with(|input: syn::parse::ParseStream<'_>| {
                let mut pairs = Vec::new();
                while !input.is_empty() {
                    let value: LitStr = input.parse()?;
                    input.parse::<syn::Token![=]>()?;
                    let category: LitStr = input.parse()?;
                    pairs.push((value, category));
                    if input.is_empty() {
                        break;
                    }
                    input.parse::<syn::Token![,]>()?;
                }
                Ok(pairs)
            })
            .map_err(|e| error_at(e.span(), format!("`{key}`: {e}; {CATEGORY_MAP_FORM}")))?;
        if pairs.is_empty() {
            return Err(error_at(
                list.delimiter.span().join(),
                format!("`{key}` maps no value: {CATEGORY_MAP_FORM}"),
            ));
        }
        Ok(CategoryMap(pairs))
    }

    fn parse_invalid(key: &str, tokens: &TokenStream) -> darling::Result<Self> {
        Err(Error::custom(format!("`{key}` takes a list: {CATEGORY_MAP_FORM}")).with_span(tokens))
    }
}

/// The struct's keys as darling collects them.
#[derive(FromDeriveInput)]
#[darling(attributes(cohort))]
struct ContainerInput {
    #[darling(multiple)]
    category: Vec<Key<LitStr>>,
    #[darling(multiple)]
    anchor: Vec<Key<LitStr>>,
    #[darling(multiple)]
    id: Vec<Key<LitStr>>,
    #[darling(multiple)]
    table: Vec<Key<LitStr>>,
    #[darling(multiple)]
    schema: Vec<Key<LitStr>>,
    #[darling(multiple)]
    tenantless: Vec<Key<Flag>>,
    #[darling(multiple)]
    exempt: Vec<Key<LitStr>>,
    #[darling(multiple)]
    guard: Vec<Key<Flag>>,
    #[darling(multiple)]
    category_from: Vec<Key<LitStr>>,
    #[darling(multiple)]
    category_map: Vec<Key<CategoryMap>>,
    #[darling(flatten)]
    unknown: UnknownKeys<OnStruct>,
}

/// The `#[cohort(...)]` keys found on the struct itself, settled.
#[derive(Debug, Default)]
pub(crate) struct ContainerAttrs {
    /// Whether the attributes could be read at all. When darling rejects an
    /// attribute's syntax (a literal where a key belongs, `#[cohort = ..]`),
    /// no key is known and checks of missing keys are skipped.
    pub(crate) readable: bool,
    /// `category = "..."`.
    pub(crate) category: Setting<LitStr>,
    /// `anchor = "field"`.
    pub(crate) anchor: Setting<LitStr>,
    /// `id = "uuid"`.
    pub(crate) id: Setting<LitStr>,
    /// `table = "..."`.
    pub(crate) table: Setting<LitStr>,
    /// `schema = "..."`.
    pub(crate) schema: Setting<LitStr>,
    /// `tenantless`.
    pub(crate) tenantless: Setting<Flag>,
    /// `exempt = "reason"`.
    pub(crate) exempt: Setting<LitStr>,
    /// `guard`.
    pub(crate) guard: Setting<Flag>,
    /// `category_from = "field"` (contract SL3).
    pub(crate) category_from: Setting<LitStr>,
    /// `category_map(...)`.
    pub(crate) category_map: Setting<CategoryMap>,
}

/// Parses every `#[cohort(...)]` attribute of the struct. Other attributes
/// are ignored. Errors go to `errors`; keys that parsed are kept.
pub(crate) fn parse_container_attrs(
    input: &DeriveInput,
    errors: &mut Accumulator,
) -> ContainerAttrs {
    check_attribute_forms(&input.attrs, errors);
    let parsed = match ContainerInput::from_derive_input(input) {
        Ok(parsed) => parsed,
        Err(error) => {
            errors.push(error);
            return ContainerAttrs::default();
        }
    };
    for error in parsed.unknown.errors {
        errors.push(error);
    }
    ContainerAttrs {
        readable: true,
        category: settle(parsed.category, errors),
        anchor: settle(parsed.anchor, errors),
        id: settle(parsed.id, errors),
        table: settle(parsed.table, errors),
        schema: settle(parsed.schema, errors),
        tenantless: settle(parsed.tenantless, errors),
        exempt: settle(parsed.exempt, errors),
        guard: settle(parsed.guard, errors),
        category_from: settle(parsed.category_from, errors),
        category_map: settle(parsed.category_map, errors),
    }
}

/// One field's keys as darling collects them.
#[derive(FromField)]
#[darling(attributes(cohort))]
struct FieldInput {
    #[darling(multiple)]
    column: Vec<Key<LitStr>>,
    #[darling(multiple)]
    record_id: Vec<Key<Flag>>,
    #[darling(multiple)]
    tenant: Vec<Key<Flag>>,
    #[darling(multiple)]
    soft_delete: Vec<Key<Flag>>,
    #[darling(multiple)]
    deleted_at: Vec<Key<Flag>>,
    #[darling(multiple)]
    anonymised_at: Vec<Key<Flag>>,
    #[darling(multiple)]
    anonymise: Vec<Key<AnonymiseSpec>>,
    #[darling(multiple)]
    anonymise_with: Vec<Key<AnonymiserPath>>,
    #[darling(multiple)]
    erasure_subject: Vec<Key<Flag>>,
    #[darling(multiple)]
    guard_allow: Vec<Key<Flag>>,
    #[darling(multiple)]
    event_key: Vec<Key<Flag>>,
    #[darling(flatten)]
    unknown: UnknownKeys<OnField>,
}

/// The `#[cohort(...)]` keys found on one field, settled.
#[derive(Debug, Default)]
pub(crate) struct FieldAttrs {
    /// `column = "..."`.
    pub(crate) column: Option<Given<LitStr>>,
    /// Role markers, in [`Marker::ALL`] order.
    pub(crate) markers: Vec<(Marker, Given<Flag>)>,
    /// `anonymise = ...`, `anonymise(...)` or `anonymise_with = ...`.
    pub(crate) anonymise: Option<Given<AnonymiseSpec>>,
    /// `erasure_subject`.
    pub(crate) erasure_subject: Option<Given<Flag>>,
    /// `guard_allow`.
    pub(crate) guard_allow: Option<Given<Flag>>,
    /// `event_key` (contract SL4).
    pub(crate) event_key: Option<Given<Flag>>,
}

impl FieldAttrs {
    /// The marker key, if this field carries `marker`.
    pub(crate) fn marker(&self, marker: Marker) -> Option<&Given<Flag>> {
        self.markers
            .iter()
            .find(|(m, _)| *m == marker)
            .map(|(_, key)| key)
    }
}

/// Parses every `#[cohort(...)]` attribute of one field. Other attributes are
/// ignored. Errors go to `errors`; keys that parsed are kept.
pub(crate) fn parse_field_attrs(field: &syn::Field, errors: &mut Accumulator) -> FieldAttrs {
    check_attribute_forms(&field.attrs, errors);
    let parsed = match FieldInput::from_field(field) {
        Ok(parsed) => parsed,
        Err(error) => {
            errors.push(error);
            return FieldAttrs::default();
        }
    };
    for error in parsed.unknown.errors {
        errors.push(error);
    }
    let column = settle(parsed.column, errors).given;
    let markers = [
        (Marker::RecordId, parsed.record_id),
        (Marker::Tenant, parsed.tenant),
        (Marker::SoftDelete, parsed.soft_delete),
        (Marker::DeletedAt, parsed.deleted_at),
        (Marker::AnonymisedAt, parsed.anonymised_at),
    ]
    .into_iter()
    .filter_map(|(marker, keys)| Some((marker, settle(keys, errors).given?)))
    .collect();
    let anonymise = one_anonymise_method(parsed.anonymise, parsed.anonymise_with, errors);
    let erasure_subject = settle(parsed.erasure_subject, errors).given;
    let guard_allow = settle(parsed.guard_allow, errors).given;
    let event_key = settle(parsed.event_key, errors).given;
    FieldAttrs {
        column,
        markers,
        anonymise,
        erasure_subject,
        guard_allow,
        event_key,
    }
}

/// A field has one anonymise method: the first `anonymise`, else the first
/// `anonymise_with`; any other well-formed one is reported.
fn one_anonymise_method(
    anonymise: Vec<Key<AnonymiseSpec>>,
    anonymise_with: Vec<Key<AnonymiserPath>>,
    errors: &mut Accumulator,
) -> Option<Given<AnonymiseSpec>> {
    let with = anonymise_with.into_iter().map(|key| Key {
        path: key.path,
        value: key.value.map(|with| match with {
            AnonymiserPath::Type(path) => AnonymiseSpec::Custom(path),
            AnonymiserPath::Named(name) => AnonymiseSpec::Named(name),
        }),
    });
    let mut first: Option<Given<AnonymiseSpec>> = None;
    for key in anonymise.into_iter().chain(with) {
        let value = match key.value {
            Ok(value) => value,
            Err(error) => {
                errors.push(error);
                continue;
            }
        };
        let Some(first) = &first else {
            first = Some(Given {
                path: key.path,
                value,
            });
            continue;
        };
        let (name, first_name) = (path_to_string(&key.path), path_to_string(&first.path));
        let message = if name == first_name {
            format!("duplicate `{name}`: a field has one anonymise method")
        } else {
            format!(
                "`{name}` conflicts with `{first_name}` on the same field: a field has one \
                 anonymise method"
            )
        };
        errors.push(Error::custom(message).with_span(&key.path));
    }
    first
}

/// `#[cohort]` without parentheses: darling reads it as an empty list and
/// would let it pass silently; it says nothing, so it is a mistake.
fn check_attribute_forms(attrs: &[Attribute], errors: &mut Accumulator) {
    for attr in attrs.iter().filter(|a| a.path().is_ident("cohort")) {
        if let Meta::Path(path) = &attr.meta {
            errors.push(
                Error::custom("expected attribute arguments in parentheses: `#[cohort(...)]`")
                    .with_span(path),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proc_macro2::{Delimiter, Group, TokenTree};
    use quote::quote;
    use syn::parse::Parser;
    use syn::parse_quote;

    fn messages(errors: Accumulator) -> Vec<String> {
        match errors.finish() {
            Ok(()) => Vec::new(),
            Err(e) => e.flatten().into_iter().map(|e| e.to_string()).collect(),
        }
    }

    fn container(attrs: Vec<Attribute>) -> (ContainerAttrs, Vec<String>) {
        let input = DeriveInput {
            attrs,
            ..parse_quote!(
                struct A {}
            )
        };
        let mut errors = Error::accumulator();
        let out = parse_container_attrs(&input, &mut errors);
        (out, messages(errors))
    }

    fn field(attrs: Vec<Attribute>) -> (FieldAttrs, Vec<String>) {
        let mut field: syn::Field = syn::Field::parse_named
            .parse2(quote!(a: i64))
            .expect("a field");
        field.attrs = attrs;
        let mut errors = Error::accumulator();
        let out = parse_field_attrs(&field, &mut errors);
        (out, messages(errors))
    }

    fn value(setting: &Setting<LitStr>) -> Option<String> {
        setting.given.as_ref().map(|k| k.value.value())
    }

    #[test]
    fn container_keys_in_one_or_several_attributes() {
        let (attrs, errors) = container(vec![
            parse_quote!(#[cohort(category = "session-notes", anchor = "created_at")]),
            parse_quote!(#[doc = "not ours"]),
            parse_quote!(#[cohort(id = "a3f467fe-c5d0-4f17-9897-83c373cc1dc8", table = "notes")]),
            parse_quote!(#[cohort(schema = "app", tenantless)]),
            parse_quote!(#[cohort()]),
        ]);
        assert_eq!(errors, Vec::<String>::new());
        assert!(attrs.readable);
        assert_eq!(value(&attrs.category).as_deref(), Some("session-notes"));
        assert_eq!(value(&attrs.anchor).as_deref(), Some("created_at"));
        assert_eq!(
            value(&attrs.id).as_deref(),
            Some("a3f467fe-c5d0-4f17-9897-83c373cc1dc8")
        );
        assert_eq!(value(&attrs.table).as_deref(), Some("notes"));
        assert_eq!(value(&attrs.schema).as_deref(), Some("app"));
        assert!(attrs.tenantless.given.is_some());
        assert!(attrs.exempt.given.is_none() && !attrs.exempt.written);
    }

    #[test]
    fn every_listed_key_is_known_to_darling() {
        for key in CONTAINER_KEYS {
            let key = syn::Ident::new(key, Span::call_site());
            let (_, errors) = container(vec![parse_quote!(#[cohort(#key = "x")])]);
            assert!(
                errors.iter().all(|e| !e.contains("unknown")),
                "{key}: {errors:?}"
            );
        }
        for key in FIELD_KEYS {
            let key = syn::Ident::new(key, Span::call_site());
            let (_, errors) = field(vec![parse_quote!(#[cohort(#key)])]);
            assert!(
                errors.iter().all(|e| !e.contains("unknown")),
                "{key}: {errors:?}"
            );
        }
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
                 table, schema, tenantless, exempt, guard, category_from, category_map",
                "`record_id` is not allowed here; it belongs on a field",
                "duplicate `category`: it may be given once",
                "`anchor` takes a string literal: write `anchor = \"...\"`",
                "`table` needs a value: write `table = \"...\"`",
                "`tenantless` takes no value: write `#[cohort(tenantless)]`",
            ]
        );
        assert_eq!(value(&attrs.category).as_deref(), Some("a"));
        assert!(attrs.anchor.given.is_none() && attrs.anchor.written);
        assert!(attrs.tenantless.given.is_none() && attrs.table.given.is_none());
    }

    #[test]
    fn syntax_errors_are_reported() {
        let (attrs, errors) = container(vec![parse_quote!(#[cohort])]);
        assert_eq!(
            errors,
            ["expected attribute arguments in parentheses: `#[cohort(...)]`"]
        );
        assert!(attrs.readable);
        let (attrs, errors) = container(vec![parse_quote!(#[cohort(category = "a" "b")])]);
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert!(!attrs.readable);
        let (attrs, errors) = container(vec![parse_quote!(#[cohort = "a"])]);
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert!(!attrs.readable);
        let (_, errors) = field(vec![parse_quote!(#[cohort("tenant")])]);
        assert_eq!(errors.len(), 1, "{errors:?}");
    }

    #[test]
    fn field_keys() {
        let (attrs, errors) = field(vec![
            parse_quote!(#[cohort(column = "e_mail", tenant)]),
            parse_quote!(#[cohort(anonymise = "null", erasure_subject)]),
        ]);
        assert_eq!(errors, Vec::<String>::new());
        assert_eq!(
            attrs.column.as_ref().map(|k| k.value.value()).as_deref(),
            Some("e_mail")
        );
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
            #[cohort(anonymised_at, tenant, soft_delete, deleted_at, record_id)]
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
            Some(AnonymiseSpec::Custom(path)) if path_to_string(&path) == "crate::anon::KeepDomain"
        ));
        assert!(matches!(
            spec(parse_quote!(#[cohort(anonymise_with = "email-pseudonym")])),
            Some(AnonymiseSpec::Named(name)) if name.value() == "email-pseudonym"
        ));
    }

    #[test]
    fn field_errors_are_all_reported() {
        let (_, errors) = field(vec![
            parse_quote!(#[cohort(anonymise = "zero", tenant, tenant, category = "x")]),
            parse_quote!(#[cohort(anonymise(literal = "a", other = 1), anonymise_with = 1)]),
            parse_quote!(#[cohort(anonymise(), erasure_subject(x))]),
            parse_quote!(#[cohort(anonymise(literal = "a", literal = "b"), column = struct)]),
        ]);
        assert_eq!(
            errors,
            vec![
                "`category` is not allowed here; it belongs on the struct",
                "`column` takes a string literal: write `column = \"...\"`",
                "duplicate `tenant`: it may be given once",
                "unknown anonymise method `zero`; expected `anonymise = \"null\"`, `anonymise = \
                 \"empty\"` or `anonymise(literal = \"...\")`, or `anonymise_with = \
                 path::To::Anonymiser`",
                "unknown key `other` in `anonymise(...)`; expected `anonymise = \"null\"`, \
                 `anonymise = \"empty\"` or `anonymise(literal = \"...\")`",
                "`anonymise(...)` needs `literal = \"...\"`; expected `anonymise = \"null\"`, \
                 `anonymise = \"empty\"` or `anonymise(literal = \"...\")`",
                "duplicate `literal`: it may be given once",
                "`anonymise_with` takes a type path or a non-empty name: write \
                 `anonymise_with = path::To::Type`, naming a type that implements \
                 `cohort::Anonymiser`, or `anonymise_with = \"name\"`, naming an anonymiser \
                 registered with `CohortBuilder::anonymiser`",
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
                "duplicate `anonymise`: a field has one anonymise method",
                "`anonymise_with` conflicts with `anonymise` on the same field: a field has one \
                 anonymise method",
            ]
        );
        assert!(matches!(
            attrs.anonymise.map(|k| k.value),
            Some(AnonymiseSpec::Null(_))
        ));
    }

    /// `tokens` wrapped in an invisible group, as `macro_rules!` passes a
    /// `$x:literal` or `$x:path` fragment on.
    fn invisible(tokens: TokenStream) -> TokenTree {
        TokenTree::Group(Group::new(Delimiter::None, tokens))
    }

    #[test]
    fn values_in_invisible_groups() {
        let id = invisible(quote!("a3f467fe-c5d0-4f17-9897-83c373cc1dc8"));
        let category = invisible(quote!("notes"));
        let (attrs, errors) = container(vec![
            parse_quote!(#[cohort(id = #id, category = #category, anchor = "at")]),
        ]);
        assert_eq!(errors, Vec::<String>::new());
        assert_eq!(
            value(&attrs.id).as_deref(),
            Some("a3f467fe-c5d0-4f17-9897-83c373cc1dc8")
        );
        assert_eq!(value(&attrs.category).as_deref(), Some("notes"));

        let path = invisible(quote!(crate::anon::KeepDomain));
        let method = invisible(quote!("null"));
        let twice = invisible(invisible(quote!("[x]")).into());
        let (with, errors) = field(vec![parse_quote!(#[cohort(anonymise_with = #path)])]);
        assert_eq!(errors, Vec::<String>::new());
        assert!(matches!(
            with.anonymise.map(|k| k.value),
            Some(AnonymiseSpec::Custom(path)) if path_to_string(&path) == "crate::anon::KeepDomain"
        ));
        let (null, errors) = field(vec![parse_quote!(#[cohort(anonymise = #method)])]);
        assert_eq!(errors, Vec::<String>::new());
        assert!(matches!(
            null.anonymise.map(|k| k.value),
            Some(AnonymiseSpec::Null(_))
        ));
        let (literal, errors) = field(vec![parse_quote!(#[cohort(anonymise(literal = #twice))])]);
        assert_eq!(errors, Vec::<String>::new());
        assert!(matches!(
            literal.anonymise.map(|k| k.value),
            Some(AnonymiseSpec::Literal(lit)) if lit.value() == "[x]"
        ));

        // A whole key pasted as a `$m:meta` fragment.
        let meta = invisible(quote!(category = "grouped"));
        let (attrs, errors) = container(vec![parse_quote!(#[cohort(#meta, anchor = "at")])]);
        assert_eq!(errors, Vec::<String>::new());
        assert_eq!(value(&attrs.category).as_deref(), Some("grouped"));

        // A grouped value of the wrong kind is still rejected.
        let number = invisible(quote!(42));
        let (_, errors) = container(vec![parse_quote!(#[cohort(table = #number)])]);
        assert_eq!(
            errors,
            ["`table` takes a string literal: write `table = \"...\"`"]
        );
    }
}
