//! Small syntactic helpers: UUID parsing, identifier checks and type
//! inspection. None of them report errors with spans; callers do.

use quote::ToTokens;

/// PostgreSQL's identifier limit (NAMEDATALEN - 1), in bytes. Mirrors the
/// runtime check in `cohort`'s identifier module.
pub(crate) const MAX_IDENT_BYTES: usize = 63;

/// Parses a UUID written as 32 hexadecimal digits, either plain or hyphenated
/// in the 8-4-4-4-12 layout, case-insensitive. Returns the UUID as a `u128`
/// (big-endian, as `uuid::Uuid::from_u128` expects), or a description of what
/// is wrong.
pub(crate) fn parse_uuid(text: &str) -> Result<u128, String> {
    const GROUPS: [usize; 5] = [8, 4, 4, 4, 12];
    let digits: String = if text.contains('-') {
        let groups: Vec<&str> = text.split('-').collect();
        let layout_ok = groups.len() == GROUPS.len()
            && groups
                .iter()
                .zip(GROUPS)
                .all(|(group, len)| group.len() == len);
        if !layout_ok {
            return Err(format!(
                "`{}` is not a UUID: expected 32 hex digits in the 8-4-4-4-12 layout, \
                 like `a3f467fe-c5d0-4f17-9897-83c373cc1dc8`",
                text.escape_default()
            ));
        }
        groups.concat()
    } else {
        if text.len() != 32 {
            return Err(format!(
                "`{}` is not a UUID: expected 32 hex digits (optionally hyphenated 8-4-4-4-12), \
                 found {} characters",
                text.escape_default(),
                text.chars().count()
            ));
        }
        text.to_owned()
    };
    if let Some(bad) = digits.chars().find(|c| !c.is_ascii_hexdigit()) {
        return Err(format!(
            "`{}` is not a UUID: `{}` is not a hexadecimal digit",
            text.escape_default(),
            bad.escape_default()
        ));
    }
    u128::from_str_radix(&digits, 16).map_err(|e| format!("`{text}` is not a UUID: {e}"))
}

/// What is wrong with a name used as a PostgreSQL identifier, if anything
/// (the same rules as `cohort`'s runtime check: non-empty, at most 63 bytes,
/// no NUL).
pub(crate) fn ident_problem(name: &str) -> Option<&'static str> {
    if name.is_empty() {
        Some("is empty")
    } else if name.len() > MAX_IDENT_BYTES {
        Some("is longer than 63 bytes (PostgreSQL would truncate it)")
    } else if name.contains('\0') {
        Some("contains a NUL byte")
    } else {
        None
    }
}

/// Whether `ty` is syntactically an `Option<_>`: `Option<T>`,
/// `std::option::Option<T>` or `core::option::Option<T>`, with or without a
/// leading `::`. Type aliases are not seen through.
pub(crate) fn is_option(ty: &syn::Type) -> bool {
    match ty {
        syn::Type::Group(group) => is_option(&group.elem),
        syn::Type::Paren(paren) => is_option(&paren.elem),
        syn::Type::Path(type_path) if type_path.qself.is_none() => {
            let segments: Vec<&syn::PathSegment> = type_path.path.segments.iter().collect();
            let names: Vec<String> = segments.iter().map(|s| s.ident.to_string()).collect();
            let path_ok = match names.as_slice() {
                [only] => only == "Option" && type_path.path.leading_colon.is_none(),
                [krate, module, last] => {
                    (krate == "std" || krate == "core") && module == "option" && last == "Option"
                }
                _ => false,
            };
            let prefix_plain = segments[..segments.len().saturating_sub(1)]
                .iter()
                .all(|s| s.arguments.is_none());
            let last_has_one_type = segments.last().is_some_and(|last| {
                matches!(
                    &last.arguments,
                    syn::PathArguments::AngleBracketed(args)
                        if args.args.len() == 1
                            && matches!(args.args.first(), Some(syn::GenericArgument::Type(_)))
                )
            });
            path_ok && prefix_plain && last_has_one_type
        }
        _ => false,
    }
}

/// The type's tokens as a compact string, close to how it is usually written:
/// `Option<DateTime<Utc>>`, `&'static str`, `HashMap<String, i64>`.
pub(crate) fn type_string(ty: &syn::Type) -> String {
    compact_tokens(&ty.to_token_stream().to_string())
}

/// Removes the spaces `TokenStream::to_string` puts between tokens, keeping
/// one only between two word-like tokens (`dyn Trait`, `&'a str`) and after
/// commas and semicolons.
fn compact_tokens(spaced: &str) -> String {
    let is_word = |c: char| c.is_alphanumeric() || c == '_';
    let chars: Vec<char> = spaced.chars().collect();
    let mut out = String::with_capacity(spaced.len());
    for (i, &c) in chars.iter().enumerate() {
        if c == ' ' {
            let prev = out.chars().last();
            let next = chars.get(i + 1).copied();
            let keep = match (prev, next) {
                (Some(p), Some(n)) => {
                    (is_word(p) && (is_word(n) || n == '\'')) || p == ',' || p == ';'
                }
                _ => false,
            };
            if keep && prev != Some(' ') {
                out.push(' ');
            }
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use syn::parse_quote;

    #[test]
    fn uuid_hyphenated_plain_and_mixed_case() {
        let expected = 0xa3f4_67fe_c5d0_4f17_9897_83c3_73cc_1dc8_u128;
        assert_eq!(
            parse_uuid("a3f467fe-c5d0-4f17-9897-83c373cc1dc8"),
            Ok(expected)
        );
        assert_eq!(
            parse_uuid("A3F467FE-C5D0-4F17-9897-83C373CC1DC8"),
            Ok(expected)
        );
        assert_eq!(parse_uuid("a3f467fec5d04f17989783c373cc1dc8"), Ok(expected));
        assert_eq!(parse_uuid("00000000-0000-0000-0000-000000000000"), Ok(0));
        assert_eq!(
            parse_uuid("ffffffff-ffff-ffff-ffff-ffffffffffff"),
            Ok(u128::MAX)
        );
    }

    #[test]
    fn uuid_malformed() {
        for bad in [
            "",
            "not-a-uuid",
            "a3f467fe-c5d0-4f17-9897-83c373cc1dc", // one digit short
            "a3f467fe-c5d0-4f17-9897-83c373cc1dc88", // one digit long
            "a3f467fec5d0-4f17-9897-83c373cc1dc8", // hyphen missing
            "a3f467f-ec5d0-4f17-9897-83c373cc1dc8", // wrong layout
            "g3f467fe-c5d0-4f17-9897-83c373cc1dc8", // not hex
            "{a3f467fe-c5d0-4f17-9897-83c373cc1dc8}",
            "urn:uuid:a3f467fe-c5d0-4f17-9897-83c373cc1dc8",
            " a3f467fe-c5d0-4f17-9897-83c373cc1dc8",
            "+3f467fec5d04f17989783c373cc1dc8", // from_str_radix would accept a sign
            "a3f467fe-c5d0-4f17-9897-83c373cc1dc\u{e9}",
        ] {
            assert!(parse_uuid(bad).is_err(), "{bad:?} should be rejected");
        }
        let message = parse_uuid("g3f467fe-c5d0-4f17-9897-83c373cc1dc8").err();
        assert!(message.is_some_and(|m| m.contains("`g` is not a hexadecimal digit")));
    }

    #[test]
    fn identifier_rules() {
        assert_eq!(ident_problem("session_notes"), None);
        assert_eq!(ident_problem(""), Some("is empty"));
        assert_eq!(ident_problem(&"x".repeat(63)), None);
        assert!(ident_problem(&"x".repeat(64)).is_some_and(|p| p.contains("63 bytes")));
        assert_eq!(ident_problem("a\0b"), Some("contains a NUL byte"));
    }

    #[test]
    fn option_detection() {
        let yes: [syn::Type; 5] = [
            parse_quote!(Option<String>),
            parse_quote!(std::option::Option<String>),
            parse_quote!(::core::option::Option<DateTime<Utc>>),
            parse_quote!(core::option::Option<Vec<u8>>),
            parse_quote!((Option<i32>)),
        ];
        for ty in &yes {
            assert!(is_option(ty), "{} should be an Option", type_string(ty));
        }
        let no: [syn::Type; 8] = [
            parse_quote!(String),
            parse_quote!(Option),
            parse_quote!(::Option<String>),
            parse_quote!(my::Option<String>),
            parse_quote!(std::Option<String>),
            parse_quote!(Vec<Option<String>>),
            parse_quote!(&'static Option<String>),
            parse_quote!(OptionalText),
        ];
        for ty in &no {
            assert!(
                !is_option(ty),
                "{} should not be an Option",
                type_string(ty)
            );
        }
    }

    #[test]
    fn type_strings_are_compact() {
        let cases: [(syn::Type, &str); 8] = [
            (parse_quote!(String), "String"),
            (parse_quote!(Option<DateTime<Utc>>), "Option<DateTime<Utc>>"),
            (
                parse_quote!(std::option::Option<String>),
                "std::option::Option<String>",
            ),
            (parse_quote!(&'static str), "&'static str"),
            (parse_quote!(HashMap<String, i64>), "HashMap<String, i64>"),
            (parse_quote!([u8; 32]), "[u8; 32]"),
            (parse_quote!((i32, String)), "(i32, String)"),
            (parse_quote!(Box<dyn Fn() + Send>), "Box<dyn Fn()+Send>"),
        ];
        for (ty, expected) in &cases {
            assert_eq!(type_string(ty), *expected);
        }
    }
}
