//! What the benchmark measures: every measurement, its data, its raw SQL
//! reference and its target.

use cohort::Strategy;

use crate::data::Data;

/// What one measurement runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// One raw `DELETE` of tenant A's expired rows, holds ignored.
    RawDelete,
    /// One raw `DELETE` with the hold anti-join.
    RawDeleteHolds,
    /// One raw `UPDATE` setting the soft-delete flag and `deleted_at`, with
    /// the hold anti-join.
    RawSoftDelete,
    /// One raw `UPDATE` anonymising (email NULL, body literal,
    /// `anonymised_at` stamped), with the hold anti-join.
    RawUpdate,
    /// One raw `COUNT(*)` of the eligible rows, with the hold anti-join.
    RawCount,
    /// `Cohort::sweep` with this strategy on [`crate::model::Note`].
    Sweep(Strategy),
    /// `Cohort::sweep`, Anonymise, on [`crate::model::CustomNote`] (a Rust
    /// anonymiser on `email`).
    SweepCustom,
    /// `Cohort::preview`.
    Preview,
}

impl Kind {
    /// Whether this is one of Cohort's own operations (batched, checked
    /// against the run's result).
    pub(crate) fn is_cohort(self) -> bool {
        matches!(self, Kind::Sweep(_) | Kind::SweepCustom | Kind::Preview)
    }

    /// Whether the batch size matters.
    pub(crate) fn batched(self) -> bool {
        matches!(self, Kind::Sweep(_) | Kind::SweepCustom)
    }

    /// Whether it only reads (it may then be repeated on the same copy).
    pub(crate) fn read_only(self) -> bool {
        matches!(self, Kind::RawCount | Kind::Preview)
    }
}

/// What a ratio is held to.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Target {
    /// No target: reported for information.
    None,
    /// At least this fraction of the reference's rows per second.
    AtLeast(f64),
    /// At most this multiple of the reference's time (for the same rows).
    TimeWithin(f64),
}

impl Target {
    /// Whether `ratio` (this measurement's rows/s over its reference's) meets it.
    pub(crate) fn met(self, ratio: f64) -> Option<bool> {
        match self {
            Target::None => None,
            Target::AtLeast(t) => Some(ratio >= t),
            Target::TimeWithin(t) => Some(ratio >= 1.0 / t),
        }
    }

    /// As shown in the summary.
    pub(crate) fn label(self) -> String {
        match self {
            Target::None => "-".to_owned(),
            Target::AtLeast(t) => format!(">= {t:.2}"),
            Target::TimeWithin(t) => format!("time <= {t:.1}x (>= {:.2})", 1.0 / t),
        }
    }
}

/// One kind of measurement.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Spec {
    /// The name used with `--only` and in the JSON lines.
    pub(crate) name: &'static str,
    /// The group `--only` also accepts.
    pub(crate) group: &'static str,
    /// What it runs.
    pub(crate) kind: Kind,
    /// On which copy of the data.
    pub(crate) data: Data,
    /// The raw SQL it is compared with (same data, same run).
    pub(crate) reference: Option<&'static str>,
    /// What the ratio is held to.
    pub(crate) target: Target,
}

const fn spec(
    name: &'static str,
    group: &'static str,
    kind: Kind,
    data: Data,
    reference: Option<&'static str>,
    target: Target,
) -> Spec {
    Spec {
        name,
        group,
        kind,
        data,
        reference,
        target,
    }
}

/// Every measurement, in the order a run takes them (each reference before
/// what is compared with it).
pub(crate) const SPECS: &[Spec] = &[
    spec(
        "raw-delete",
        "purge",
        Kind::RawDelete,
        Data::Ordered,
        None,
        Target::None,
    ),
    spec(
        "raw-delete-holds",
        "purge",
        Kind::RawDeleteHolds,
        Data::Ordered,
        None,
        Target::None,
    ),
    spec(
        "sweep-purge",
        "purge",
        Kind::Sweep(Strategy::Purge),
        Data::Ordered,
        Some("raw-delete-holds"),
        Target::AtLeast(0.8),
    ),
    spec(
        "raw-soft-delete",
        "soft-delete",
        Kind::RawSoftDelete,
        Data::Ordered,
        None,
        Target::None,
    ),
    spec(
        "sweep-soft-delete",
        "soft-delete",
        Kind::Sweep(Strategy::SoftDelete),
        Data::Ordered,
        Some("raw-soft-delete"),
        Target::AtLeast(0.8),
    ),
    spec(
        "raw-update",
        "anonymise",
        Kind::RawUpdate,
        Data::Ordered,
        None,
        Target::None,
    ),
    spec(
        "sweep-anonymise",
        "anonymise",
        Kind::Sweep(Strategy::Anonymise),
        Data::Ordered,
        Some("raw-update"),
        Target::AtLeast(0.8),
    ),
    spec(
        "sweep-anonymise-custom",
        "anonymise",
        Kind::SweepCustom,
        Data::Ordered,
        Some("raw-update"),
        Target::None,
    ),
    spec(
        "raw-count",
        "preview",
        Kind::RawCount,
        Data::Ordered,
        None,
        Target::None,
    ),
    spec(
        "preview",
        "preview",
        Kind::Preview,
        Data::Ordered,
        Some("raw-count"),
        Target::TimeWithin(1.2),
    ),
    spec(
        "random-raw-delete-holds",
        "random",
        Kind::RawDeleteHolds,
        Data::Random,
        None,
        Target::None,
    ),
    spec(
        "random-sweep-purge",
        "random",
        Kind::Sweep(Strategy::Purge),
        Data::Random,
        Some("random-raw-delete-holds"),
        Target::AtLeast(0.8),
    ),
    spec(
        "noindex-raw-delete-holds",
        "noindex",
        Kind::RawDeleteHolds,
        Data::NoIndex,
        None,
        Target::None,
    ),
    spec(
        "noindex-sweep-purge",
        "noindex",
        Kind::Sweep(Strategy::Purge),
        Data::NoIndex,
        Some("noindex-raw-delete-holds"),
        Target::None,
    ),
];

impl Spec {
    /// Whether `--max-seconds` bounds it: only the missing-index case, which
    /// can take many times longer than the rest.
    pub(crate) fn bounded(&self) -> bool {
        self.data == Data::NoIndex
    }
}

/// The measurement called `name`.
pub(crate) fn find(name: &str) -> Option<&'static Spec> {
    SPECS.iter().find(|s| s.name == name)
}

/// The measurements `--only` and `--skip` select (each by name or group), with
/// the references of the selected ones added back.
pub(crate) fn select(only: &[String], skip: &[String]) -> Vec<&'static Spec> {
    let hit = |s: &Spec, list: &[String]| list.iter().any(|o| o == s.name || o == s.group);
    let chosen: Vec<&Spec> = SPECS
        .iter()
        .filter(|s| only.is_empty() || hit(s, only))
        .filter(|s| !hit(s, skip))
        .collect();
    SPECS
        .iter()
        .filter(|s| {
            chosen.iter().any(|c| c.name == s.name)
                || chosen.iter().any(|c| c.reference == Some(s.name))
        })
        .collect()
}
