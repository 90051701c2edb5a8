//! Rules, strategies and capabilities.

use std::collections::BTreeSet;
use std::fmt;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::Period;

/// What happens to a row once it is old enough.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[non_exhaustive]
pub enum Strategy {
    /// Delete the row.
    Purge,
    /// Set the soft-delete flag (and deleted-at, where mapped).
    SoftDelete,
    /// Scrub the marked columns and stamp anonymised-at.
    Anonymise,
    /// Leave the rows alone; the ledger shows a zero-mutation summary.
    Exempt,
}

impl Strategy {
    /// The name stored in the ledger.
    pub fn as_str(&self) -> &'static str {
        match self {
            Strategy::Purge => "Purge",
            Strategy::SoftDelete => "SoftDelete",
            Strategy::Anonymise => "Anonymise",
            Strategy::Exempt => "Exempt",
        }
    }
}

impl fmt::Display for Strategy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Whether the ledger records each mutated row.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[non_exhaustive]
pub enum AuditDetail {
    /// Counts only (the default).
    #[default]
    Summary,
    /// Counts plus one `sweep_run_row_detail` row per mutated row.
    PerRow,
}

/// A category's policy, as resolved for one tenant at one time.
///
/// ```
/// use cohort::{Period, Rule, Strategy};
/// let rule = Rule::new(Period::days(30), Strategy::Purge)
///     .with_legal_minimum(Period::days(90))
///     .with_provenance("policy-2024-07", "GDPR art. 5(1)(e)");
/// assert_eq!(rule.effective_period(chrono::Utc::now()), Period::days(90));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    /// How long rows are kept.
    pub period: Period,
    /// What happens to them then.
    pub strategy: Strategy,
    /// A legal minimum that no rule can shorten; also the only age condition of
    /// an erasure.
    pub legal_minimum: Option<Period>,
    /// Whether each mutated row is recorded.
    pub audit: AuditDetail,
    /// Where the rule comes from (a policy id), recorded in the ledger.
    pub source: Option<String>,
    /// Why it applies (a citation), recorded in the ledger.
    pub reason: Option<String>,
}

impl Rule {
    /// A rule with no legal minimum, summary-only audit and no provenance.
    pub fn new(period: Period, strategy: Strategy) -> Rule {
        Rule {
            period,
            strategy,
            legal_minimum: None,
            audit: AuditDetail::Summary,
            source: None,
            reason: None,
        }
    }

    /// Sets the legal minimum.
    pub fn with_legal_minimum(mut self, legal_minimum: Period) -> Rule {
        self.legal_minimum = Some(legal_minimum);
        self
    }

    /// Records every mutated row in the ledger.
    pub fn with_per_row_audit(mut self) -> Rule {
        self.audit = AuditDetail::PerRow;
        self
    }

    /// Records where the rule comes from and why.
    pub fn with_provenance(mut self, source: impl Into<String>, reason: impl Into<String>) -> Rule {
        self.source = Some(source.into());
        self.reason = Some(reason.into());
        self
    }

    /// The period a sweep at `now` applies: the greater of the period and the
    /// legal minimum, compared by the cutoffs they give at `now` (so calendar
    /// and fixed periods compare correctly).
    pub fn effective_period(&self, now: DateTime<Utc>) -> Period {
        match self.legal_minimum {
            Some(min) if min.cutoff(now) < self.period.cutoff(now) => min,
            _ => self.period,
        }
    }
}

/// The strategies a category can resolve to: never empty, immutable.
///
/// ```
/// use cohort::{Capabilities, Strategy};
/// let caps = Capabilities::only(Strategy::Purge).and(Strategy::Exempt);
/// assert!(caps.allows(Strategy::Exempt));
/// assert!(!caps.allows(Strategy::Anonymise));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Capabilities(BTreeSet<Strategy>);

impl Capabilities {
    /// One strategy.
    pub fn only(strategy: Strategy) -> Capabilities {
        Capabilities(BTreeSet::from([strategy]))
    }

    /// These strategies plus one more.
    pub fn and(mut self, strategy: Strategy) -> Capabilities {
        self.0.insert(strategy);
        self
    }

    /// Whether `strategy` was declared.
    pub fn allows(&self, strategy: Strategy) -> bool {
        self.0.contains(&strategy)
    }

    /// The declared strategies, in a fixed order.
    pub fn strategies(&self) -> impl Iterator<Item = Strategy> + '_ {
        self.0.iter().copied()
    }
}

impl<const N: usize> From<[Strategy; N]> for Capabilities {
    /// # Panics
    /// Never for `N > 0`; an empty array is rejected at compile time by
    /// `const` evaluation.
    fn from(strategies: [Strategy; N]) -> Capabilities {
        const { assert!(N > 0, "capabilities need at least one strategy") };
        Capabilities(strategies.into_iter().collect())
    }
}
