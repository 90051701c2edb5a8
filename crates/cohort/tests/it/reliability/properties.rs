//! Property tests (contract R3, `docs/reliability.md`): record-id
//! canonicalisation per key type, identifier quoting, period and cutoff
//! arithmetic at the extremes, and configuration parsing. No input may make
//! the library panic, and every round trip must come back unchanged.
//!
//! Case counts are bounded so the file runs in well under a minute; set
//! `PROPTEST_CASES` to raise them (it applies to every property here).

use std::time::Duration;

use crate::support;
use crate::support::{Answer, TestDb, TestRules};
use chrono::{DateTime, TimeDelta, Utc};
use cohort::Strategy as Kind;
use cohort::holds::{HoldRequest, Target};
use cohort::schema::{SchemaName, ddl};
use cohort::{Capabilities, Cohort, Error, Options, Period, Rule, Scope, TenantContext};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use uuid::Uuid;

/// `PROPTEST_CASES` when set, else `default`.
fn cases(default: u32) -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(default)
}

fn config(default: u32) -> Config {
    Config {
        cases: cases(default),
        // Failures are reported with their seed; nothing is written next to
        // the sources.
        failure_persistence: None,
        ..Config::default()
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime")
}

fn tenant() -> Uuid {
    Uuid::from_u128(0x1111_1111_1111_1111_1111_1111_1111_1111)
}

fn scope() -> Scope {
    Scope::Tenant(TenantContext::new(tenant()))
}

// ---------------------------------------------------------------------------
// Periods and cutoffs (pure).

/// Any instant chrono can represent.
fn any_instant() -> impl Strategy<Value = DateTime<Utc>> {
    let min = DateTime::<Utc>::MIN_UTC.timestamp_micros();
    let max = DateTime::<Utc>::MAX_UTC.timestamp_micros();
    prop_oneof![
        // Mostly near today, where real clocks are.
        (-5_000_000_000_000_000i64..5_000_000_000_000_000i64),
        min..=max,
        Just(min),
        Just(max),
    ]
    .prop_map(|micros| DateTime::<Utc>::from_timestamp_micros(micros).expect("in range"))
}

fn any_duration() -> impl Strategy<Value = Duration> {
    prop_oneof![
        (0u64..10_000_000_000, 0u32..1_000_000_000).prop_map(|(s, n)| Duration::new(s, n)),
        (any::<u64>(), 0u32..1_000_000_000).prop_map(|(s, n)| Duration::new(s, n)),
        Just(Duration::ZERO),
        Just(Duration::MAX),
    ]
}

fn any_period() -> impl Strategy<Value = Period> {
    let part = prop_oneof![0u32..400, any::<u32>(), Just(u32::MAX)];
    prop_oneof![
        any_duration().prop_map(Period::fixed),
        (part.clone(), part.clone(), part).prop_map(|(years, months, days)| Period::Calendar {
            years,
            months,
            days
        }),
    ]
}

// contract: R3, P2, X20
#[test]
fn a_cutoff_never_panics_and_never_lies_after_now() {
    let mut runner = TestRunner::new(config(2_000));
    runner
        .run(&(any_period(), any_instant()), |(period, now)| {
            let cutoff = period.cutoff(now);
            prop_assert!(cutoff <= now, "{period} at {now}: {cutoff}");
            if period.is_zero() {
                prop_assert_eq!(cutoff, now);
            }
            // Display never panics and is ISO 8601-shaped.
            let text = period.to_string();
            prop_assert!(text.starts_with('P'), "{text}");
            Ok(())
        })
        .expect("property");
}

// contract: R3, X12, X20
#[test]
fn a_fixed_cutoff_is_now_minus_the_duration_at_microsecond_precision_or_saturates() {
    let mut runner = TestRunner::new(config(2_000));
    runner
        .run(&(any_duration(), any_instant()), |(d, now)| {
            let cutoff = Period::fixed(d).cutoff(now);
            let micros = i64::try_from(d.as_micros()).ok();
            let exact = micros.and_then(|m| now.checked_sub_signed(TimeDelta::microseconds(m)));
            match exact {
                Some(expected) => prop_assert_eq!(cutoff, expected),
                None => prop_assert_eq!(cutoff, DateTime::<Utc>::MIN_UTC),
            }
            Ok(())
        })
        .expect("property");
}

// contract: R3
#[test]
fn a_longer_calendar_period_never_gives_a_later_cutoff() {
    let mut runner = TestRunner::new(config(2_000));
    let parts = (0u32..500, 0u32..100, 0u32..100_000);
    let extra = (0u32..500, 0u32..100, 0u32..100_000);
    runner
        .run(
            &(parts, extra, any_instant()),
            |((y, m, d), (dy, dm, dd), now)| {
                let short = Period::Calendar {
                    years: y,
                    months: m,
                    days: d,
                };
                let long = Period::Calendar {
                    years: y.saturating_add(dy),
                    months: m.saturating_add(dm),
                    days: d.saturating_add(dd),
                };
                prop_assert!(
                    long.cutoff(now) <= short.cutoff(now),
                    "{long} gives a later cutoff than {short} at {now}"
                );
                Ok(())
            },
        )
        .expect("property");
}

// contract: R3, P6
#[test]
fn the_effective_period_is_whichever_of_period_and_legal_minimum_reaches_further_back() {
    let mut runner = TestRunner::new(config(2_000));
    runner
        .run(
            &(any_period(), any_period(), any_instant()),
            |(period, minimum, now)| {
                let rule = Rule::new(period, Kind::Purge).with_legal_minimum(minimum);
                let effective = rule.effective_period(now);
                prop_assert!(effective == period || effective == minimum);
                prop_assert_eq!(
                    effective.cutoff(now),
                    period.cutoff(now).min(minimum.cutoff(now))
                );
                Ok(())
            },
        )
        .expect("property");
}

// contract: R3
#[test]
fn periods_round_trip_through_serde() {
    let mut runner = TestRunner::new(config(1_000));
    runner
        .run(&any_period(), |period| {
            let json = serde_json::to_string(&period).expect("serialise");
            let back: Period = serde_json::from_str(&json).expect("deserialise");
            prop_assert_eq!(back, period);
            Ok(())
        })
        .expect("property");
}

// ---------------------------------------------------------------------------
// Configuration (pure).

/// Strings with the characters that break naive parsers.
fn nasty_string(max: usize) -> impl Strategy<Value = String> {
    let ch = prop_oneof![
        4 => any::<char>(),
        1 => Just('\0'),
        1 => Just('"'),
        1 => Just('\''),
        1 => Just(' '),
        1 => Just('*'),
        1 => Just('/'),
        1 => Just(','),
        1 => Just('-'),
        1 => prop::char::range('0', '9'),
    ];
    prop::collection::vec(ch, 0..max).prop_map(|v| v.into_iter().collect())
}

/// Cron-like text: fields of digits and operators, sometimes valid.
fn cron_like() -> impl Strategy<Value = String> {
    let field = prop_oneof![
        Just("*".to_owned()),
        (0u32..100).prop_map(|n| n.to_string()),
        (0u32..100, 0u32..100).prop_map(|(a, b)| format!("{a}-{b}")),
        (0u32..100).prop_map(|n| format!("*/{n}")),
        (0u32..100, 0u32..100).prop_map(|(a, b)| format!("{a},{b}")),
        Just("L".to_owned()),
        Just("MON-FRI".to_owned()),
        Just("?".to_owned()),
        nasty_string(4),
    ];
    prop::collection::vec(field, 0..8).prop_map(|f| f.join(" "))
}

fn any_options() -> impl Strategy<Value = Options> {
    let dur = any_duration;
    (
        (
            nasty_string(70),
            nasty_string(70),
            any::<u32>(),
            any::<u32>(),
        ),
        (dur(), dur(), dur(), dur()),
        (dur(), dur(), dur(), prop::option::of(dur())),
        (
            any::<u32>(),
            prop_oneof![cron_like(), nasty_string(30)],
            prop::option::of(prop_oneof![
                Just("Europe/Berlin".to_owned()),
                Just("UTC".to_owned()),
                nasty_string(30)
            ]),
            prop::option::of(any::<u128>().prop_map(Uuid::from_u128)),
        ),
        (nasty_string(8), nasty_string(8)),
    )
        .prop_map(|(a, b, c, d, e)| {
            let mut o = Options {
                schema: a.0,
                default_table_schema: a.1,
                batch_size: a.2,
                max_attempts: a.3,
                observer_timeout: b.0,
                settle_timeout: b.1,
                fence_wait: b.2,
                claim_timeout: b.3,
                payload_retention: c.0,
                poll_interval: c.1,
                lock_wait: c.2,
                inactive_hold_retention: c.3,
                dispatch_limit: d.0,
                ..Options::default()
            };
            o.worker.schedule = d.1;
            o.worker.time_zone = d.2;
            o.worker.tenant = d.3;
            o.conventions.record_id = e.0;
            o.conventions.tenant = e.1;
            o
        })
}

fn flagged(problems: &[cohort::ValidationProblem], option: &str) -> bool {
    problems.iter().any(|p| p.option == Some(option))
}

// contract: R3, C1
#[test]
fn validating_any_options_lists_problems_and_never_panics() {
    let mut runner = TestRunner::new(config(2_000));
    runner
        .run(&any_options(), |o| {
            let problems = o.validate();
            prop_assert_eq!(
                flagged(&problems, "batch_size"),
                !(1..=cohort::MAX_BATCH_SIZE).contains(&o.batch_size)
            );
            prop_assert_eq!(
                flagged(&problems, "max_attempts"),
                !(1..=cohort::MAX_ATTEMPTS).contains(&o.max_attempts)
            );
            prop_assert_eq!(
                flagged(&problems, "lock_wait"),
                o.lock_wait.is_zero() || o.lock_wait > cohort::MAX_LOCK_WAIT
            );
            prop_assert_eq!(
                flagged(&problems, "settle_timeout"),
                o.settle_timeout.is_zero() || o.settle_timeout > cohort::MAX_TIMEOUT
            );
            prop_assert_eq!(
                flagged(&problems, "schema"),
                SchemaName::new(&o.schema).is_err()
            );
            prop_assert_eq!(flagged(&problems, "dispatch_limit"), o.dispatch_limit == 0);
            prop_assert_eq!(
                flagged(&problems, "conventions.record_id"),
                o.conventions.record_id.is_empty()
            );
            // Every problem names its option and says how to fix it.
            for p in &problems {
                prop_assert!(p.option.is_some(), "{p:?}");
            }
            Ok(())
        })
        .expect("property");
}

/// Options whose durations serde's seconds-as-floats carries exactly (whole
/// milliseconds below a week).
fn representable_options() -> impl Strategy<Value = Options> {
    let ms = (1u64..7 * 24 * 3600 * 1000).prop_map(Duration::from_millis);
    (
        (1u32..=cohort::MAX_BATCH_SIZE, 1u32..=cohort::MAX_ATTEMPTS),
        (ms.clone(), ms.clone(), ms.clone(), ms),
        prop::option::of((1u64..1_000_000).prop_map(Duration::from_secs)),
        (any::<bool>(), any::<bool>()),
    )
        .prop_map(|(a, b, c, d)| {
            let mut o = Options {
                batch_size: a.0,
                max_attempts: a.1,
                observer_timeout: b.0,
                settle_timeout: b.1,
                fence_wait: b.2,
                claim_timeout: b.3,
                inactive_hold_retention: c,
                ..Options::default()
            };
            o.worker.dry_run = d.0;
            o.worker.kill_switch = d.1;
            o
        })
}

// contract: R3, C1
#[test]
fn options_round_trip_through_json() {
    let mut runner = TestRunner::new(config(1_000));
    runner
        .run(&representable_options(), |o| {
            let json = serde_json::to_string(&o).expect("serialise");
            let back: Options = serde_json::from_str(&json).expect("deserialise");
            prop_assert_eq!(&back, &o);
            prop_assert!(back.validate().is_empty(), "{:?}", back.validate());
            Ok(())
        })
        .expect("property");
}

fn any_json() -> impl Strategy<Value = serde_json::Value> {
    use serde_json::Value;
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<f64>().prop_map(Value::from),
        Just(Value::from(f64::MAX)),
        Just(Value::from(-1.0)),
        Just(Value::from(1e300)),
        nasty_string(20).prop_map(Value::String),
    ];
    leaf.prop_recursive(3, 32, 6, |inner| {
        // Keys are mostly the real option names, so values reach the
        // deserialisers of every field.
        let key = prop_oneof![
            prop::sample::select(vec![
                "schema",
                "default_table_schema",
                "batch_size",
                "conventions",
                "observer_timeout",
                "settle_timeout",
                "fence_wait",
                "lock_wait",
                "claim_timeout",
                "payload_retention",
                "max_attempts",
                "poll_interval",
                "dispatch_limit",
                "inactive_hold_retention",
                "worker",
                "schedule",
                "time_zone",
                "dry_run",
                "kill_switch",
                "tenant",
                "record_id",
            ])
            .prop_map(str::to_owned),
            nasty_string(6),
        ];
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map(key, inner, 0..6)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

// contract: R3, C1
#[test]
fn any_json_either_fails_to_parse_as_options_or_validates_without_panicking() {
    let mut runner = TestRunner::new(config(3_000));
    runner
        .run(&any_json(), |value| {
            let text = value.to_string();
            if let Ok(o) = serde_json::from_str::<Options>(&text) {
                let _ = o.validate();
            }
            Ok(())
        })
        .expect("property");
}

// contract: R3
#[test]
fn a_schema_name_is_accepted_exactly_when_postgresql_can_store_it_unchanged() {
    let mut runner = TestRunner::new(config(3_000));
    runner
        .run(&nasty_string(80), |name| {
            let ok = !name.is_empty() && name.len() <= 63 && !name.contains('\0');
            match SchemaName::new(&name) {
                Ok(s) => {
                    prop_assert!(ok, "{name:?} accepted");
                    prop_assert_eq!(s.as_str(), name.as_str());
                }
                Err(Error::InvalidIdentifier { .. }) => prop_assert!(!ok, "{name:?} refused"),
                Err(other) => prop_assert!(false, "unexpected error {other:?}"),
            }
            Ok(())
        })
        .expect("property");
}

// ---------------------------------------------------------------------------
// Record-id canonicalisation (against PostgreSQL).

#[allow(dead_code, reason = "mirrors the tables; Cohort reads the descriptors")]
mod keyed {
    use chrono::{DateTime, Utc};
    use uuid::Uuid;

    macro_rules! keyed {
        ($name:ident, $table:tt, $id:tt, $ty:tt) => {
            #[derive(cohort::Retained)]
            #[cohort(category = "keyed", anchor = "created_at", id = $id, table = $table)]
            pub(crate) struct $name {
                id: $ty,
                tenant_id: Uuid,
                created_at: DateTime<Utc>,
            }
        };
    }
    keyed!(
        Int2Item,
        "int2_items",
        "e0000000-0000-4000-8000-000000000001",
        i16
    );
    keyed!(
        Int4Item,
        "int4_items",
        "e0000000-0000-4000-8000-000000000002",
        i32
    );
    keyed!(
        Int8Item,
        "int8_items",
        "e0000000-0000-4000-8000-000000000003",
        i64
    );
    keyed!(
        NumericItem,
        "numeric_items",
        "e0000000-0000-4000-8000-000000000004",
        String
    );
    keyed!(
        UuidItem,
        "uuid_items",
        "e0000000-0000-4000-8000-000000000005",
        Uuid
    );
    keyed!(
        TextItem,
        "text_items",
        "e0000000-0000-4000-8000-000000000006",
        String
    );
    keyed!(
        CitextItem,
        "citext_items",
        "e0000000-0000-4000-8000-000000000007",
        String
    );
}

/// One key type under test: its table, SQL type and retained-entity id.
#[derive(Debug, Clone, Copy)]
struct Key {
    table: &'static str,
    sql: &'static str,
    entity: u128,
}

const INT2: Key = Key {
    table: "int2_items",
    sql: "int2",
    entity: 0xe0000000_0000_4000_8000_000000000001,
};
const INT4: Key = Key {
    table: "int4_items",
    sql: "int4",
    entity: 0xe0000000_0000_4000_8000_000000000002,
};
const INT8: Key = Key {
    table: "int8_items",
    sql: "int8",
    entity: 0xe0000000_0000_4000_8000_000000000003,
};
const NUMERIC: Key = Key {
    table: "numeric_items",
    sql: "numeric",
    entity: 0xe0000000_0000_4000_8000_000000000004,
};
const UUID: Key = Key {
    table: "uuid_items",
    sql: "uuid",
    entity: 0xe0000000_0000_4000_8000_000000000005,
};
const TEXT: Key = Key {
    table: "text_items",
    sql: "text",
    entity: 0xe0000000_0000_4000_8000_000000000006,
};
const CITEXT: Key = Key {
    table: "citext_items",
    sql: "public.citext",
    entity: 0xe0000000_0000_4000_8000_000000000007,
};
const KEYS: [Key; 7] = [INT2, INT4, INT8, NUMERIC, UUID, TEXT, CITEXT];

async fn keyed_db() -> (TestDb, Cohort) {
    let (db, _) = support::db_with_cohort("public").await;
    db.exec("CREATE EXTENSION IF NOT EXISTS citext").await;
    for k in KEYS {
        db.exec(&format!(
            "CREATE TABLE public.{} (id {} PRIMARY KEY, tenant_id uuid NOT NULL, \
             created_at timestamptz NOT NULL)",
            k.table, k.sql
        ))
        .await;
    }
    let rules = TestRules::new().with(
        "keyed",
        Capabilities::only(Kind::Purge),
        Rule::new(Period::days(30), Kind::Purge),
    );
    use keyed::*;
    let cohort = Cohort::builder(db.pool().clone())
        .rules(rules)
        .entity::<Int2Item>()
        .entity::<Int4Item>()
        .entity::<Int8Item>()
        .entity::<NumericItem>()
        .entity::<UuidItem>()
        .entity::<TextItem>()
        .entity::<CitextItem>()
        .build()
        .await
        .expect("model");
    (db, cohort)
}

/// A value of `key`'s type (as PostgreSQL input text) and another spelling
/// of the same value.
fn value_and_spelling(key: Key) -> BoxedStrategy<(String, String)> {
    fn int_spelling(v: i64) -> impl Strategy<Value = String> {
        (0usize..4, any::<bool>(), 0usize..3, 0usize..3).prop_map(move |(zeros, plus, l, r)| {
            let digits = format!("{}{}", "0".repeat(zeros), v.unsigned_abs());
            let sign = if v < 0 {
                "-"
            } else if plus {
                "+"
            } else {
                ""
            };
            format!("{}{sign}{digits}{}", " ".repeat(l), " ".repeat(r))
        })
    }
    match key.sql {
        "int2" => any::<i16>()
            .prop_flat_map(|v| int_spelling(i64::from(v)).prop_map(move |s| (v.to_string(), s)))
            .boxed(),
        "int4" => any::<i32>()
            .prop_flat_map(|v| int_spelling(i64::from(v)).prop_map(move |s| (v.to_string(), s)))
            .boxed(),
        "int8" => any::<i64>()
            .prop_flat_map(|v| int_spelling(v).prop_map(move |s| (v.to_string(), s)))
            .boxed(),
        "numeric" => (any::<i64>(), 0u32..8, 0usize..4, 0usize..3, any::<bool>())
            .prop_map(|(m, scale, extra_zeros, lead, exp)| {
                let digits = m.unsigned_abs().to_string();
                let sign = if m < 0 { "-" } else { "" };
                let plain = if scale == 0 {
                    digits.clone()
                } else {
                    let s = scale as usize;
                    let padded = format!("{digits:0>width$}", width = s + 1);
                    let (int, frac) = padded.split_at(padded.len() - s);
                    format!("{int}.{frac}")
                };
                let value = format!("{sign}{plain}");
                let spelling = if exp {
                    // Mantissa and exponent: the same number.
                    format!("{sign}{digits}e-{scale}")
                } else {
                    let frac = if plain.contains('.') || extra_zeros == 0 {
                        format!("{plain}{}", "0".repeat(extra_zeros))
                    } else {
                        format!("{plain}.{}", "0".repeat(extra_zeros))
                    };
                    format!("{sign}{}{frac}", "0".repeat(lead))
                };
                (value, spelling)
            })
            .boxed(),
        "uuid" => (any::<u128>(), 0u8..4)
            .prop_map(|(n, style)| {
                let u = Uuid::from_u128(n);
                let value = u.hyphenated().to_string();
                let spelling = match style {
                    0 => value.to_uppercase(),
                    1 => format!("{{{value}}}"),
                    2 => u.simple().to_string(),
                    _ => value.clone(),
                };
                (value, spelling)
            })
            .boxed(),
        "text" => "[^\\x00]{1,40}".prop_map(|s| (s.clone(), s)).boxed(),
        _ => ("[a-zA-Z0-9_.@-]{1,30}", any::<u64>())
            .prop_map(|(s, flips)| {
                // The same text with some ASCII letters' case flipped.
                let spelling = s
                    .chars()
                    .enumerate()
                    .map(|(i, c)| {
                        if flips >> (i % 64) & 1 == 1 {
                            if c.is_ascii_lowercase() {
                                c.to_ascii_uppercase()
                            } else {
                                c.to_ascii_lowercase()
                            }
                        } else {
                            c
                        }
                    })
                    .collect();
                (s, spelling)
            })
            .boxed(),
    }
}

/// Inserts a row keyed `value` (if no row has that key) and returns the
/// row's own canonical text.
async fn ensure_row(db: &TestDb, key: Key, value: &str) -> String {
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "INSERT INTO public.{} (id, tenant_id, created_at) VALUES (CAST($1 AS {}), $2, now()) \
         ON CONFLICT DO NOTHING",
        key.table, key.sql
    )))
    .bind(value)
    .bind(tenant())
    .execute(db.pool())
    .await
    .expect("insert");
    sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
        "SELECT CAST(id AS text) FROM public.{} WHERE id = CAST($1 AS {})",
        key.table, key.sql
    )))
    .bind(value)
    .fetch_one(db.pool())
    .await
    .expect("the row")
}

// contract: R3, H8
#[test]
fn a_hold_spelled_any_way_the_key_type_reads_stores_the_rows_own_text() {
    let rt = runtime();
    let (db, cohort) = rt.block_on(keyed_db());
    for key in KEYS {
        let mut runner = TestRunner::new(config(20));
        runner
            .run(&value_and_spelling(key), |(value, spelling)| {
                rt.block_on(async {
                    let canonical = ensure_row(&db, key, &value).await;
                    let mut conn = db.connect().await;
                    let entity = Uuid::from_u128(key.entity);
                    let hold = cohort
                        .holds()
                        .create(
                            &mut conn,
                            HoldRequest::new(entity, &spelling, Some(tenant()), "prop", Utc::now()),
                        )
                        .await;
                    let hold = hold.map_err(|e| {
                        TestCaseError::fail(format!(
                            "{key:?} {value:?} spelled {spelling:?}: {e:?}"
                        ))
                    })?;
                    prop_assert_eq!(&hold.record_id, &canonical, "{:?} {:?}", key, spelling);
                    for asked in [&spelling, &canonical, &value] {
                        let held = cohort
                            .holds()
                            .is_held(
                                &mut conn,
                                &Target::new(entity, asked.as_str(), Some(tenant())),
                                Utc::now(),
                            )
                            .await;
                        prop_assert!(
                            matches!(held, Ok(true)),
                            "{key:?} {value:?} asked as {asked:?}: {held:?}"
                        );
                    }
                    Ok(())
                })
            })
            .unwrap_or_else(|e| panic!("{key:?}: {e}"));
    }
}

/// Any text at all, weighted to the shapes key parsers trip on.
fn any_record_id() -> impl Strategy<Value = String> {
    prop_oneof![
        nasty_string(40),
        "[0-9a-fA-F{}-]{0,40}",
        "[ +-]?[0-9]{0,30}(\\.[0-9]{0,30})?([eE][+-]?[0-9]{1,6})?",
        Just("NaN".to_owned()),
        Just("Infinity".to_owned()),
        Just("99999999999999999999999999999".to_owned()),
        Just("-32769".to_owned()),
        Just("1e131072".to_owned()),
        prop::collection::vec(any::<char>(), 1000..1100).prop_map(|v| v.into_iter().collect()),
    ]
}

// contract: R3, H8, H12
#[test]
fn any_record_id_gives_a_hold_or_a_typed_refusal_never_a_panic_or_a_raw_database_error() {
    let rt = runtime();
    let (db, cohort) = rt.block_on(keyed_db());
    // One existing row per table, so a lucky id can also succeed.
    rt.block_on(async {
        for (key, v) in [
            (INT2, "1"),
            (INT4, "1"),
            (INT8, "1"),
            (NUMERIC, "1"),
            (UUID, "00000000-0000-0000-0000-000000000001"),
            (TEXT, "1"),
            (CITEXT, "1"),
        ] {
            ensure_row(&db, key, v).await;
        }
    });
    let mut runner = TestRunner::new(config(40));
    runner
        .run(
            &(prop::sample::select(KEYS.to_vec()), any_record_id()),
            |(key, id)| {
                rt.block_on(async {
                    let entity = Uuid::from_u128(key.entity);
                    let mut conn = db.connect().await;
                    // Inside a caller's transaction: a refusal must leave it usable (H12).
                    let mut tx = sqlx::Connection::begin(&mut conn).await.expect("begin");
                    let created = cohort
                        .holds()
                        .create(
                            &mut tx,
                            HoldRequest::new(
                                entity,
                                id.as_str(),
                                Some(tenant()),
                                "prop",
                                Utc::now(),
                            ),
                        )
                        .await;
                    prop_assert!(
                        matches!(created, Ok(_) | Err(Error::Hold(_))),
                        "{key:?} {id:?}: {created:?}"
                    );
                    let held = cohort
                        .holds()
                        .is_held(
                            &mut tx,
                            &Target::new(entity, id.as_str(), Some(tenant())),
                            Utc::now(),
                        )
                        .await;
                    prop_assert!(
                        matches!(held, Ok(_) | Err(Error::Hold(_))),
                        "{key:?} {id:?}: {held:?}"
                    );
                    if created.is_ok() {
                        prop_assert!(matches!(held, Ok(true)), "{key:?} {id:?}: {held:?}");
                    }
                    let alive: i32 = sqlx::query_scalar("SELECT 1")
                        .fetch_one(&mut *tx)
                        .await
                        .expect("the caller's transaction is still usable");
                    prop_assert_eq!(alive, 1);
                    tx.rollback().await.expect("rollback");
                    Ok(())
                })
            },
        )
        .expect("property");
}

// ---------------------------------------------------------------------------
// Identifier quoting (against PostgreSQL).

#[derive(cohort::Retained)]
#[cohort(
    category = "quoted",
    anchor = "created_at",
    id = "e0000000-0000-4000-8000-0000000000a1",
    table = "Odd \"Notes\""
)]
#[allow(dead_code, reason = "mirrors the table; Cohort reads its descriptor")]
struct OddNote {
    id: i64,
    tenant_id: Uuid,
    created_at: DateTime<Utc>,
}

/// Identifiers PostgreSQL accepts quoted: 1 to 63 bytes, no NUL, weighted
/// to quotes, spaces, capitals and multi-byte characters.
fn any_identifier() -> impl Strategy<Value = String> {
    let ch = prop_oneof![
        3 => any::<char>().prop_filter("no NUL", |c| *c != '\0'),
        1 => Just('"'),
        1 => Just('\''),
        1 => Just(' '),
        1 => Just('.'),
        1 => Just('\\'),
        1 => Just('$'),
        1 => prop::char::range('A', 'Z'),
        1 => prop::char::range('a', 'z'),
    ];
    prop::collection::vec(ch, 1..40)
        .prop_map(|v| {
            let mut s = String::new();
            for c in v {
                if s.len() + c.len_utf8() > 63 {
                    break;
                }
                s.push(c);
            }
            s
        })
        .prop_filter("non-empty", |s| !s.is_empty())
}

/// PostgreSQL's own quoting (`quote_ident`), for the test's setup SQL.
async fn quote_ident(db: &TestDb, name: &str) -> String {
    sqlx::query_scalar("SELECT pg_catalog.quote_ident($1)")
        .bind(name)
        .fetch_one(db.pool())
        .await
        .expect("quote_ident")
}

// contract: R3, D1
#[test]
fn any_schema_name_round_trips_through_cohorts_ddl_and_a_sweep() {
    let rt = runtime();
    let db = rt.block_on(TestDb::new());
    let rules = TestRules::new().with(
        "quoted",
        Capabilities::only(Kind::Purge),
        Rule::new(Period::days(30), Kind::Purge),
    );
    let mut runner = TestRunner::new(config(12));
    runner
        .run(
            &(any_identifier(), any_identifier()),
            |(cohort_schema, host_schema)| {
                prop_assume!(cohort_schema != host_schema);
                rt.block_on(async {
                    // Cohort's own tables, written by the library's quoting.
                    let schema = SchemaName::new(&cohort_schema).expect("valid");
                    db.exec(&ddl(&schema)).await;
                    let tables: i64 = sqlx::query_scalar(
                        "SELECT count(*) FROM pg_catalog.pg_tables WHERE schemaname = $1 \
                     AND tablename = ANY($2)",
                    )
                    .bind(&cohort_schema)
                    .bind(cohort::schema::TABLES.map(str::to_owned).to_vec())
                    .fetch_one(db.pool())
                    .await
                    .expect("pg_tables");
                    prop_assert_eq!(
                        tables,
                        cohort::schema::TABLES.len() as i64,
                        "{:?}",
                        cohort_schema
                    );
                    // A host table in a schema of another odd name, reached
                    // through default_table_schema.
                    let host = quote_ident(&db, &host_schema).await;
                    db.exec(&format!(
                        "CREATE SCHEMA {host}; \
                     CREATE TABLE {host}.\"Odd \"\"Notes\"\"\" (id bigint PRIMARY KEY, \
                       tenant_id uuid NOT NULL, created_at timestamptz NOT NULL); \
                     INSERT INTO {host}.\"Odd \"\"Notes\"\"\" \
                       SELECT g, '{}', now() - interval '40 days' FROM generate_series(1, 3) g",
                        tenant()
                    ))
                    .await;
                    let options = Options {
                        schema: cohort_schema.clone(),
                        default_table_schema: host_schema.clone(),
                        ..Options::default()
                    };
                    let cohort = Cohort::builder(db.pool().clone())
                        .options(options)
                        .rules(rules.clone())
                        .entity::<OddNote>()
                        .build()
                        .await;
                    let cohort = cohort.map_err(|e| {
                        TestCaseError::fail(format!("{cohort_schema:?}/{host_schema:?}: {e}"))
                    })?;
                    let result = cohort.sweep(&scope(), Utc::now()).await.expect("sweep");
                    prop_assert_eq!(result.affected(), 3);
                    let left: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
                        "SELECT count(*) FROM {host}.\"Odd \"\"Notes\"\"\""
                    )))
                    .fetch_one(db.pool())
                    .await
                    .expect("count");
                    prop_assert_eq!(left, 0);
                    let runs: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
                        "SELECT count(*) FROM {}.sweep_run WHERE status = 'Succeeded'",
                        quote_ident(&db, &cohort_schema).await
                    )))
                    .fetch_one(db.pool())
                    .await
                    .expect("runs");
                    prop_assert_eq!(runs, 1);
                    let cohort_q = quote_ident(&db, &cohort_schema).await;
                    db.exec(&format!(
                        "DROP SCHEMA {host} CASCADE; DROP SCHEMA {cohort_q} CASCADE"
                    ))
                    .await;
                    Ok(())
                })
            },
        )
        .expect("property");
}

// ---------------------------------------------------------------------------
// Cutoffs at the extremes, against PostgreSQL.

#[derive(cohort::Retained)]
#[cohort(
    category = "extreme",
    anchor = "created_at",
    id = "e0000000-0000-4000-8000-0000000000b1",
    table = "extreme_items"
)]
#[allow(dead_code, reason = "mirrors the table; Cohort reads its descriptor")]
struct ExtremeItem {
    id: i64,
    tenant_id: Uuid,
    created_at: Option<DateTime<Utc>>,
}

// contract: R3, X12, X20
#[test]
fn a_sweep_with_any_period_at_any_clock_counts_exactly_the_rows_before_the_cutoff_or_refuses_the_clock()
 {
    let rt = runtime();
    let (_db, rules, cohort, anchors) = rt.block_on(async {
        let (db, _) = support::db_with_cohort("public").await;
        db.exec(&format!(
            "CREATE TABLE public.extreme_items (id bigint PRIMARY KEY, tenant_id uuid NOT NULL, \
               created_at timestamptz); \
             INSERT INTO public.extreme_items VALUES \
               (1, '{t}', '4713-01-01 00:00:00+00 BC'), (2, '{t}', '0001-01-01 00:00:00+00'), \
               (3, '{t}', '1970-01-01 00:00:00+00'), (4, '{t}', now() - interval '1 day'), \
               (5, '{t}', now()), (6, '{t}', '262000-01-01 00:00:00+00'), (7, '{t}', NULL)",
            t = tenant()
        ))
        .await;
        let anchors: Vec<Option<DateTime<Utc>>> =
            sqlx::query_scalar("SELECT created_at FROM public.extreme_items ORDER BY id")
                .fetch_all(db.pool())
                .await
                .expect("anchors");
        let rules = TestRules::new().with(
            "extreme",
            Capabilities::only(Kind::Purge),
            Rule::new(Period::days(30), Kind::Purge),
        );
        let cohort = Cohort::builder(db.pool().clone())
            .rules(rules.clone())
            .entity::<ExtremeItem>()
            .build()
            .await
            .expect("model");
        (db, rules, cohort, anchors)
    });
    let mut runner = TestRunner::new(config(40));
    runner
        .run(
            &(
                any_period(),
                prop::option::of(any_period()),
                any_instant(),
                any::<bool>(),
            ),
            |(period, minimum, now, dry_sweep)| {
                let mut rule = Rule::new(period, Kind::Purge);
                if let Some(m) = minimum {
                    rule = rule.with_legal_minimum(m);
                }
                rules.set("extreme", Answer::Rule(rule.clone()));
                rt.block_on(async {
                    let cutoff = rule.effective_period(now).cutoff(now);
                    let expected = anchors
                        .iter()
                        .filter(|a| a.is_some_and(|a| a < cutoff))
                        .count() as u64;
                    let counted = if dry_sweep {
                        match cohort
                            .sweep_with(&scope(), now, cohort::SweepOptions::default().dry_run())
                            .await
                        {
                            Ok(r) => {
                                prop_assert!(r.entity_failures.is_empty(), "{r:?}");
                                Ok(r.affected())
                            }
                            Err(e) => Err(e),
                        }
                    } else {
                        match cohort.preview(&scope(), now).await {
                            Ok(p) => {
                                prop_assert!(!p.entries.is_empty(), "{:?}", p);
                                prop_assert!(
                                    p.entries.iter().all(|e| e.failure.is_none()),
                                    "{p:?}"
                                );
                                Ok(p.entries.iter().map(|e| e.eligible).sum())
                            }
                            Err(e) => Err(e),
                        }
                    };
                    match counted {
                        Ok(n) => prop_assert_eq!(
                            n,
                            expected,
                            "{} at {} (cutoff {})",
                            period,
                            now,
                            cutoff
                        ),
                        Err(Error::TimeOutOfRange { .. }) => {
                            // Only a clock PostgreSQL cannot store is refused:
                            // before 4714-11-24 BC (proleptic year -4713) or
                            // from 294277-01-01.
                            let earliest = chrono::NaiveDate::from_ymd_opt(-4713, 11, 24)
                                .expect("date")
                                .and_hms_opt(0, 0, 0)
                                .expect("time")
                                .and_utc();
                            prop_assert!(now < earliest, "{now} refused but PostgreSQL stores it");
                        }
                        Err(other) => prop_assert!(false, "{period} at {now}: {other:?}"),
                    }
                    Ok(())
                })
            },
        )
        .expect("property");
}

// contract: R3, C1
#[test]
fn building_with_any_options_validates_them_or_works_never_panics() {
    let rt = runtime();
    let (db, _) = rt.block_on(support::db_with_cohort("public"));
    let mut runner = TestRunner::new(config(30));
    runner
        .run(&any_options(), |mut options| {
            options.schema = "public".into();
            options.default_table_schema = "public".into();
            rt.block_on(async {
                let problems = options.validate();
                let built = Cohort::builder(db.pool().clone())
                    .options(options.clone())
                    .rules(TestRules::new())
                    .build()
                    .await;
                match built {
                    Ok(_) => prop_assert!(problems.is_empty(), "{problems:?}"),
                    Err(Error::Validation(report)) => {
                        prop_assert!(!problems.is_empty(), "{report:?}")
                    }
                    Err(other) => prop_assert!(false, "{other:?}"),
                }
                Ok(())
            })
        })
        .expect("property");
}

// ---------------------------------------------------------------------------
// Erasure subjects against typed columns (against PostgreSQL).

#[derive(cohort::Retained)]
#[cohort(
    category = "subjects",
    anchor = "created_at",
    id = "e0000000-0000-4000-8000-0000000000c1",
    table = "subject_rows"
)]
#[allow(dead_code, reason = "mirrors the table; Cohort reads its descriptor")]
struct SubjectRow {
    id: i64,
    tenant_id: Uuid,
    created_at: DateTime<Utc>,
    #[cohort(erasure_subject)]
    login: Option<String>,
    #[cohort(erasure_subject)]
    account_no: Option<String>,
    #[cohort(erasure_subject)]
    external_ref: Option<i64>,
    #[cohort(erasure_subject)]
    token: Option<Uuid>,
}

/// The test's oracle for E9: the rows an erasure of `$1` must match. A
/// subject matches a column when PostgreSQL reads it as the column's type
/// without truncation or rounding and the value is equal.
const SUBJECT_ORACLE: &str = r#"
CREATE FUNCTION public.exact_varchar5(s text) RETURNS varchar(5) LANGUAGE plpgsql AS $$
BEGIN
    IF pg_catalog.char_length(s) <= 5 THEN RETURN s; END IF;
    RETURN NULL;
END $$;
CREATE FUNCTION public.exact_numeric_10_2(s text) RETURNS numeric LANGUAGE plpgsql AS $$
DECLARE v numeric; BEGIN
    v := s::numeric;
    IF v = v::numeric(10,2) THEN RETURN v::numeric(10,2); END IF;
    RETURN NULL;
EXCEPTION WHEN others THEN RETURN NULL;
END $$;
CREATE FUNCTION public.exact_int8(s text) RETURNS bigint LANGUAGE plpgsql AS $$
BEGIN RETURN s::bigint; EXCEPTION WHEN others THEN RETURN NULL; END $$;
CREATE FUNCTION public.exact_uuid(s text) RETURNS uuid LANGUAGE plpgsql AS $$
BEGIN RETURN s::uuid; EXCEPTION WHEN others THEN RETURN NULL; END $$;
"#;

/// A subject: a spelling of a stored value (some exact, some not), or any text.
fn any_subject() -> impl Strategy<Value = String> {
    prop_oneof![
        // Logins, with and without the characters varchar(5) would drop.
        prop::sample::select(vec!["alice", "bob", "Ann", "zoë", "a b"]).prop_flat_map(|v| {
            prop_oneof![
                Just(v.to_owned()),
                Just(format!("{v} ")),
                Just(format!("{v}  x")),
                Just(v.to_uppercase())
            ]
        }),
        // Account numbers in many spellings.
        (0i64..100_000, 0u32..5, 0usize..3, any::<bool>()).prop_map(|(m, scale, zeros, exp)| {
            let digits = m.to_string();
            if exp {
                format!("{digits}e-{scale}")
            } else if scale == 0 {
                digits
            } else {
                let s = scale as usize;
                let padded = format!("{digits:0>width$}", width = s + 1);
                let (i, f) = padded.split_at(padded.len() - s);
                format!("{i}.{f}{}", "0".repeat(zeros))
            }
        }),
        prop::sample::select(vec![
            "1.56", "1.560", "1.555", "7", "7.00", " 7 ", "+7", "NaN", "1e2"
        ])
        .prop_map(str::to_owned),
        // References and tokens.
        (-3i64..300).prop_map(|n| n.to_string()),
        Just("00000000-0000-0000-0000-000000000007".to_owned()),
        Just("{00000000-0000-0000-0000-000000000007}".to_owned()),
        nasty_string(12),
    ]
}

// contract: R3, E9
#[test]
fn an_erasure_subject_matches_exactly_the_rows_whose_column_holds_it_and_never_errors_raw() {
    let rt = runtime();
    let (_db, cohort, db_pool) = rt.block_on(async {
        let (db, _) = support::db_with_cohort("public").await;
        db.exec(SUBJECT_ORACLE).await;
        db.exec(&format!(
            "CREATE TABLE public.subject_rows (id bigint PRIMARY KEY, tenant_id uuid NOT NULL, \
               created_at timestamptz NOT NULL, login varchar(5), account_no numeric(10,2), \
               external_ref bigint, token uuid); \
             INSERT INTO public.subject_rows \
             SELECT g, '{t}', now() - interval '100 days', \
                    (ARRAY['alice', 'bob', 'Ann', 'zoë', 'a b', NULL])[1 + g % 6], \
                    (ARRAY[1.56, 7.00, 100, 0.05, 1.55, NULL])[1 + g % 6], \
                    CASE WHEN g % 5 = 0 THEN NULL ELSE g END, \
                    ('00000000-0000-0000-0000-' || lpad(g::text, 12, '0'))::uuid \
             FROM generate_series(1, 60) g",
            t = tenant()
        ))
        .await;
        let rules = TestRules::new().with(
            "subjects",
            Capabilities::only(Kind::Purge),
            Rule::new(Period::days(30), Kind::Purge),
        );
        let cohort = Cohort::builder(db.pool().clone())
            .rules(rules)
            .entity::<SubjectRow>()
            .build()
            .await
            .expect("model");
        let pool = db.pool().clone();
        (db, cohort, pool)
    });
    let mut runner = TestRunner::new(config(40));
    runner
        .run(&any_subject(), |subject| {
            rt.block_on(async {
                // PostgreSQL text cannot hold NUL: such a subject matches nothing.
                let expected: i64 = if subject.contains('\0') {
                    0
                } else {
                    sqlx::query_scalar(
                        "SELECT count(*) FROM public.subject_rows WHERE \
                       login = public.exact_varchar5($1) \
                       OR account_no = public.exact_numeric_10_2($1) \
                       OR external_ref = public.exact_int8($1) \
                       OR token = public.exact_uuid($1)",
                    )
                    .bind(&subject)
                    .fetch_one(&db_pool)
                    .await
                    .expect("oracle")
                };
                let result = cohort
                    .erase(
                        &scope(),
                        Utc::now(),
                        cohort::ErasureRequest::new(subject.as_str()).dry_run(),
                    )
                    .await;
                match result {
                    Ok(r) => {
                        prop_assert!(r.entity_failures.is_empty(), "{subject:?}: {r:?}");
                        prop_assert_eq!(r.affected(), expected as u64, "{:?}", subject);
                    }
                    Err(Error::InvalidSubject { .. }) => {
                        prop_assert_eq!(expected, 0, "{:?} refused", subject)
                    }
                    Err(other) => prop_assert!(false, "{subject:?}: {other:?}"),
                }
                Ok(())
            })
        })
        .expect("property");
}

// ---------------------------------------------------------------------------
// Table and column names (against PostgreSQL), through a descriptor built at
// run time, as the `cohort` command builds its model file's.

/// A retained type on table `table` whose columns are `cols` (id bigint,
/// tenant uuid, anchor timestamptz, email text anonymised to NULL,
/// anonymised-at timestamptz), field names equal to column names.
fn odd_descriptor(table: &str, cols: &[String; 5]) -> &'static cohort::model::EntityDescriptor {
    use cohort::model::{EntityDescriptor, FieldSpec};
    let [id, tenant, anchor, email, anonymised] = cols.clone();
    EntityDescriptor::builder("OddColumns", "odd-columns", anchor.clone())
        .id(Uuid::from_u128(0xe0000000_0000_4000_8000_0000000000d1))
        .table(table.to_owned())
        .field(FieldSpec::new(id.clone()).rust_type("bigint"))
        .field(FieldSpec::new(tenant.clone()).rust_type("uuid"))
        .field(FieldSpec::new(anchor).rust_type("timestamp with time zone"))
        .field(FieldSpec::new(email.clone()).optional().rust_type("text"))
        .field(
            FieldSpec::new(anonymised.clone())
                .optional()
                .rust_type("timestamp with time zone"),
        )
        .record_id(id)
        .tenant(tenant)
        .anonymised_at(anonymised)
        .anonymise_null(email)
        .build()
        .expect("any five distinct identifiers make a valid descriptor")
}

// contract: R3
#[test]
fn any_table_and_column_names_round_trip_through_holds_and_an_anonymising_sweep() {
    let rt = runtime();
    let db = rt.block_on(support::db_with_cohort("public")).0;
    let rules = TestRules::new().with(
        "odd-columns",
        Capabilities::only(Kind::Anonymise),
        Rule::new(Period::days(30), Kind::Anonymise),
    );
    let names = (
        any_identifier(),
        prop::collection::btree_set(any_identifier(), 5),
    );
    let mut runner = TestRunner::new(config(12));
    runner
        .run(&names, |(table, cols)| {
            let cols: Vec<String> = cols.into_iter().collect();
            let cols: [String; 5] = cols.try_into().expect("five names");
            rt.block_on(async {
                let t = quote_ident(&db, &table).await;
                let mut q = Vec::new();
                for c in &cols {
                    q.push(quote_ident(&db, c).await);
                }
                db.exec(&format!(
                    "CREATE TABLE public.{t} ({} bigint PRIMARY KEY, {} uuid NOT NULL, \
                       {} timestamptz NOT NULL, {} text, {} timestamptz); \
                     INSERT INTO public.{t} SELECT g, '{tenant}', now() - interval '40 days', \
                       'e' || g, NULL FROM generate_series(1, 3) g",
                    q[0],
                    q[1],
                    q[2],
                    q[3],
                    q[4],
                    tenant = tenant()
                ))
                .await;
                let builder = Cohort::builder(db.pool().clone()).rules(rules.clone());
                let builder = builder.entity_descriptor(odd_descriptor(&table, &cols));
                let cohort = builder
                    .build()
                    .await
                    .map_err(|e| TestCaseError::fail(format!("{table:?} {cols:?}: {e}")))?;
                let mut conn = db.connect().await;
                let entity = Uuid::from_u128(0xe0000000_0000_4000_8000_0000000000d1);
                let hold = cohort
                    .holds()
                    .create(
                        &mut conn,
                        HoldRequest::new(entity, "01", Some(tenant()), "prop", Utc::now()),
                    )
                    .await
                    .map_err(|e| TestCaseError::fail(format!("{table:?} {cols:?}: {e}")))?;
                prop_assert_eq!(hold.record_id.as_str(), "1");
                let result = cohort
                    .sweep(&scope(), Utc::now())
                    .await
                    .map_err(|e| TestCaseError::fail(format!("{table:?} {cols:?}: {e}")))?;
                prop_assert!(result.entity_failures.is_empty(), "{result:?}");
                prop_assert_eq!(result.affected(), 2);
                let left: Vec<(i64, bool)> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
                    "SELECT {id}, {email} IS NOT NULL AND {anon} IS NULL FROM public.{t} ORDER BY 1",
                    id = q[0],
                    email = q[3],
                    anon = q[4]
                )))
                .fetch_all(db.pool())
                .await
                .expect("rows");
                prop_assert_eq!(left, vec![(1, true), (2, false), (3, false)]);
                db.exec(&format!(
                    "DROP TABLE public.{t}; DELETE FROM public.retention_holds; \
                     DELETE FROM public.sweep_run_row_detail; DELETE FROM public.sweep_run_entity_summary; \
                     DELETE FROM public.sweep_run"
                ))
                .await;
                Ok(())
            })
        })
        .expect("property");
}
