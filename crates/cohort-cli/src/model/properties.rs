//! Property tests of the model file's parser (contract R3): it never panics
//! on any input, and generated models round-trip their names, categories
//! and periods. `PROPTEST_CASES` raises the case counts.

use proptest::prelude::*;

use super::parse::{ParseOptions, parse};

fn opts() -> ParseOptions {
    ParseOptions {
        default_table_schema: "public".into(),
        hash_key_set: false,
    }
}

/// A TOML basic string holding `s` exactly.
fn quoted(s: &str) -> String {
    toml::Value::String(s.to_owned()).to_string()
}

const VALID: &str = r#"
[[entity]]
id = "6b619c19-6e3c-44e8-a87f-975c68fd3988"
table = "users"
category = "accounts"
anchor = "last_seen_at"
erasure_subjects = ["id"]

[rules.accounts]
strategy = "purge"
period = "18 months"
legal_minimum = "30d"
"#;

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    // contract: R3 (the model file's parser returns a model or a list of
    // mistakes for any text, never a panic)
    #[test]
    fn any_text_is_parsed_or_refused_without_a_panic(text in "\\PC{0,400}") {
        let _ = parse("m.toml", &text, &opts());
    }

    // contract: R3 (a valid file with one byte changed anywhere: no panic)
    #[test]
    fn a_valid_file_with_one_change_never_panics(at in 0usize..VALID.len(), c in any::<char>()) {
        let mut text: String = VALID.to_owned();
        if text.is_char_boundary(at) {
            text.insert(at, c);
        }
        let _ = parse("m.toml", &text, &opts());
    }

    // contract: R3 (generated models round-trip: every entity keeps its
    // table, category and anchor, however odd the names)
    #[test]
    fn generated_models_round_trip(
        tables in proptest::collection::btree_set("[a-z_][a-zA-Z0-9_ \"'$-]{0,20}", 1..5),
        category in "[a-z][a-z0-9-]{0,15}",
        anchor in "[a-z_][a-z0-9_ ]{0,15}",
        days in 1u32..100_000,
    ) {
        let mut text = String::new();
        for (i, table) in tables.iter().enumerate() {
            text.push_str(&format!(
                "[[entity]]\nid = \"00000000-0000-4000-8000-{i:012}\"\ntable = {}\ncategory = {}\nanchor = {}\n\n",
                quoted(table), quoted(&category), quoted(&anchor)
            ));
        }
        text.push_str(&format!(
            "[rules.{}]\nstrategy = \"purge\"\nperiod = \"{days}d\"\n",
            quoted(&category)
        ));
        let model = parse("m.toml", &text, &opts());
        let model = match model {
            Ok(m) => m,
            Err(d) => return Err(TestCaseError::fail(format!("{d}\n{text}"))),
        };
        prop_assert_eq!(model.entities.len(), tables.len());
        for (e, table) in model.entities.iter().zip(&tables) {
            prop_assert_eq!(&e.table, table);
            prop_assert_eq!(&e.category, &category);
            prop_assert_eq!(&e.anchor, &anchor);
        }
        prop_assert!(model.rules_of(&category).is_some());
    }
}
