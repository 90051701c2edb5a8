//! Rules, strategies and capabilities.

use std::collections::BTreeSet;
use std::fmt;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::{Period, Review};

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
    /// Copy each row into the type's archive table and delete it from its
    /// own, in one batch transaction (contract SL2; the archive schema is
    /// declared with the capabilities, [`Capabilities::archive_into`]).
    Archive,
}

impl Strategy {
    /// The name stored in the ledger.
    pub fn as_str(&self) -> &'static str {
        match self {
            Strategy::Purge => "Purge",
            Strategy::SoftDelete => "SoftDelete",
            Strategy::Anonymise => "Anonymise",
            Strategy::Exempt => "Exempt",
            Strategy::Archive => "Archive",
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
    /// The later stages of a staged rule, in order (contract SL1): each
    /// applies its strategy once its period has passed since the previous
    /// stage's stamp. Empty for a single-stage rule. See [`Rule::then`].
    pub then: Vec<Stage>,
    /// The first stage's disposition review (contract DR1): when set, a
    /// sweep freezes what the stage would change into a disposition batch
    /// and changes nothing until the batch is approved. See
    /// [`Rule::with_review`]; a later stage's is [`Stage::review`].
    pub review: Option<Review>,
    /// The event the period counts from, instead of the anchor (contract
    /// SL4): see [`Rule::after_event`].
    pub after_event: Option<String>,
}

/// A later stage of a staged rule (contract SL1): `strategy`, once `period`
/// has passed since the previous stage's stamp (the soft-delete stage's
/// deleted-at, the anonymise stage's anonymised-at).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stage {
    /// How long after the previous stage's stamp.
    pub period: Period,
    /// What happens then.
    pub strategy: Strategy,
    /// The stage's disposition review, if it asks for one
    /// ([`Rule::then_reviewed`]).
    pub review: Option<Review>,
}

/// What is wrong with a staged rule's list of stages ([`Rule::stage_problems`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum StageProblem {
    /// A later stage's period is zero: it would take a row in the same
    /// sweep that stamped it.
    ZeroPeriod {
        /// The stage's number, the first being 1.
        stage: usize,
    },
    /// A strategy comes back after another (each strategy once, in order).
    Repeated {
        /// The stage's number.
        stage: usize,
        /// The strategy.
        strategy: Strategy,
    },
    /// A stage follows a purge, which leaves nothing to act on.
    AfterPurge {
        /// The stage's number.
        stage: usize,
    },
    /// `Exempt` in a staged rule: a stage changes rows.
    Exempt {
        /// The stage's number.
        stage: usize,
    },
    /// A stage other than a purge after an archive stage: only a purge (of
    /// the archive table) may follow one.
    AfterArchive {
        /// The stage's number.
        stage: usize,
    },
}

impl fmt::Display for StageProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StageProblem::ZeroPeriod { stage } => write!(
                f,
                "stage {stage} has a zero period: a later stage needs a period after the previous stage's stamp"
            ),
            StageProblem::Repeated { stage, strategy } => write!(
                f,
                "stage {stage} goes back to {strategy}, an earlier stage's strategy: each strategy comes once, in order"
            ),
            StageProblem::AfterPurge { stage } => {
                write!(
                    f,
                    "stage {stage} follows a purge, which leaves no row to act on"
                )
            }
            StageProblem::Exempt { stage } => {
                write!(
                    f,
                    "stage {stage} is Exempt: every stage of a staged rule changes rows"
                )
            }
            StageProblem::AfterArchive { stage } => write!(
                f,
                "stage {stage} follows an archive stage: only a purge (of the archive table) may follow one"
            ),
        }
    }
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
            then: Vec::new(),
            review: None,
            after_event: None,
        }
    }

    /// Counts the period from an event instead of the anchor (contract
    /// SL4): a row becomes eligible once an event of type `event_type` was
    /// recorded for the subject key in its `event_key` column (and tenant)
    /// and its time plus the period has passed; a row whose event has not
    /// happened is kept, and counted. The category's capabilities declare
    /// it ([`Capabilities::after_event`]).
    ///
    /// ```
    /// use cohort::{Period, Rule, Strategy};
    /// // "Seven years after the account is closed."
    /// let rule = Rule::new(Period::years(7), Strategy::Purge).after_event("account-closed");
    /// assert_eq!(rule.after_event.as_deref(), Some("account-closed"));
    /// ```
    pub fn after_event(mut self, event_type: impl Into<String>) -> Rule {
        self.after_event = Some(event_type.into());
        self
    }

    /// Adds a later stage (contract SL1): `strategy` once `period` has
    /// passed since the previous stage's stamp. The first stage is the
    /// rule's own period and strategy, counted from the anchor.
    ///
    /// ```
    /// use cohort::{Period, Rule, Strategy};
    /// // Soft-delete after 30 days, so support can restore; purge 60 days later.
    /// let rule = Rule::new(Period::days(30), Strategy::SoftDelete).then(Period::days(60), Strategy::Purge);
    /// assert_eq!(rule.final_strategy(), Strategy::Purge);
    /// assert!(rule.stage_problems().is_empty());
    /// ```
    pub fn then(mut self, period: Period, strategy: Strategy) -> Rule {
        self.then.push(Stage {
            period,
            strategy,
            review: None,
        });
        self
    }

    /// [`Rule::then`], with the stage under disposition review (contract
    /// DR1): a sweep freezes what the stage would change into a batch for
    /// named reviewers.
    ///
    /// ```
    /// use cohort::{Period, Review, Rule, Strategy};
    /// // Soft-delete unreviewed; the purge 60 days later needs an approver.
    /// let rule = Rule::new(Period::days(30), Strategy::SoftDelete)
    ///     .then_reviewed(Period::days(60), Strategy::Purge, Review::new());
    /// assert!(rule.review_of(0).is_none() && rule.review_of(1).is_some());
    /// ```
    pub fn then_reviewed(mut self, period: Period, strategy: Strategy, review: Review) -> Rule {
        self.then.push(Stage {
            period,
            strategy,
            review: Some(review),
        });
        self
    }

    /// Puts the rule's first stage (its own period and strategy) under
    /// disposition review (contract DR1).
    pub fn with_review(mut self, review: Review) -> Rule {
        self.review = Some(review);
        self
    }

    /// Every stage, the first (the rule's own period and strategy) included.
    pub fn stages(&self) -> Vec<Stage> {
        let mut stages = vec![Stage {
            period: self.period,
            strategy: self.strategy,
            review: self.review,
        }];
        stages.extend(self.then.iter().copied());
        stages
    }

    /// Whether the rule has later stages.
    pub fn is_staged(&self) -> bool {
        !self.then.is_empty()
    }

    /// The last stage's strategy: what an erasure of the category does.
    pub fn final_strategy(&self) -> Strategy {
        self.then.last().map_or(self.strategy, |s| s.strategy)
    }

    /// Everything wrong with the stages, all at once (empty for a
    /// single-stage rule): a later stage with a zero period, a strategy
    /// that comes back, a stage after a purge, an `Exempt` stage.
    ///
    /// ```
    /// use cohort::{Period, Rule, Strategy};
    /// let rule = Rule::new(Period::days(30), Strategy::Purge).then(Period::ZERO, Strategy::Purge);
    /// assert_eq!(rule.stage_problems().len(), 3);
    /// ```
    pub fn stage_problems(&self) -> Vec<StageProblem> {
        let mut problems = Vec::new();
        if self.then.is_empty() {
            return problems;
        }
        let stages = self.stages();
        for (i, stage) in stages.iter().enumerate() {
            let number = i + 1;
            if i > 0 && stage.period.is_zero() {
                problems.push(StageProblem::ZeroPeriod { stage: number });
            }
            if stage.strategy == Strategy::Exempt {
                problems.push(StageProblem::Exempt { stage: number });
            }
            if i > 0 && stages[..i].iter().any(|s| s.strategy == Strategy::Purge) {
                problems.push(StageProblem::AfterPurge { stage: number });
            }
            if stage.strategy != Strategy::Purge
                && stages[..i].iter().any(|s| s.strategy == Strategy::Archive)
            {
                problems.push(StageProblem::AfterArchive { stage: number });
            }
            if stages[..i].iter().any(|s| s.strategy == stage.strategy) {
                problems.push(StageProblem::Repeated {
                    stage: number,
                    strategy: stage.strategy,
                });
            }
        }
        problems
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

/// The strategies a category can resolve to: never empty, immutable; and
/// whether its rules may be staged ([`Capabilities::staged`]).
///
/// ```
/// use cohort::{Capabilities, Strategy};
/// let caps = Capabilities::only(Strategy::Purge).and(Strategy::Exempt);
/// assert!(caps.allows(Strategy::Exempt));
/// assert!(!caps.allows(Strategy::Anonymise));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Capabilities {
    strategies: BTreeSet<Strategy>,
    staged: bool,
    archive_schema: Option<String>,
    events: BTreeSet<String>,
}

impl Capabilities {
    /// One strategy.
    pub fn only(strategy: Strategy) -> Capabilities {
        Capabilities {
            strategies: BTreeSet::from([strategy]),
            staged: false,
            archive_schema: None,
            events: BTreeSet::new(),
        }
    }

    /// These strategies plus one more.
    pub fn and(mut self, strategy: Strategy) -> Capabilities {
        self.strategies.insert(strategy);
        self
    }

    /// The category's rules may be staged (contract SL1): a stage's
    /// strategy is one of the declared ones, and start-up checks what the
    /// stages need, such as the deleted-at column a stage after a soft
    /// delete counts from. A staged rule of a category not declared so is
    /// refused for that entity at run time.
    ///
    /// ```
    /// use cohort::{Capabilities, Strategy};
    /// let caps = Capabilities::only(Strategy::SoftDelete).and(Strategy::Purge).staged();
    /// assert!(caps.is_staged());
    /// ```
    pub fn staged(mut self) -> Capabilities {
        self.staged = true;
        self
    }

    /// Whether the category's rules may be staged.
    pub fn is_staged(&self) -> bool {
        self.staged
    }

    /// The category may resolve to [`Strategy::Archive`] (contract SL2),
    /// archiving each type's rows into the table of the same name in
    /// `schema` (created by the host's migrations from
    /// `CohortBuilder::archive_sql`). Declared here, with the capabilities,
    /// so start-up checks every archive table before any rule is resolved.
    ///
    /// ```
    /// use cohort::{Capabilities, Strategy};
    /// let caps = Capabilities::only(Strategy::Archive).and(Strategy::Purge).staged().archive_into("archive");
    /// assert!(caps.allows(Strategy::Archive));
    /// assert_eq!(caps.archive_schema(), Some("archive"));
    /// ```
    pub fn archive_into(mut self, schema: impl Into<String>) -> Capabilities {
        self.strategies.insert(Strategy::Archive);
        self.archive_schema = Some(schema.into());
        self
    }

    /// The schema the category archives into, if it may archive.
    pub fn archive_schema(&self) -> Option<&str> {
        self.archive_schema.as_deref()
    }

    /// The category's rules may count their period from events of type
    /// `event_type` (contract SL4, [`Rule::after_event`]): start-up then
    /// checks that each of its types names its `event_key` column, and
    /// events of that type may be recorded.
    ///
    /// ```
    /// use cohort::{Capabilities, Strategy};
    /// let caps = Capabilities::only(Strategy::Purge).after_event("account-closed");
    /// assert!(caps.counts_from("account-closed"));
    /// ```
    pub fn after_event(mut self, event_type: impl Into<String>) -> Capabilities {
        self.events.insert(event_type.into());
        self
    }

    /// Whether the category may count from events of type `event_type`.
    pub fn counts_from(&self, event_type: &str) -> bool {
        self.events.contains(event_type)
    }

    /// The event types the category may count from, in order.
    pub fn event_types(&self) -> impl Iterator<Item = &str> + '_ {
        self.events.iter().map(String::as_str)
    }

    /// These capabilities and `other`'s together (the strategies of both;
    /// staged if either is; the first archive schema).
    pub(crate) fn union(mut self, other: &Capabilities) -> Capabilities {
        self.strategies.extend(other.strategies.iter().copied());
        self.staged |= other.staged;
        if self.archive_schema.is_none() {
            self.archive_schema.clone_from(&other.archive_schema);
        }
        self.events.extend(other.events.iter().cloned());
        self
    }

    /// Whether `strategy` was declared.
    pub fn allows(&self, strategy: Strategy) -> bool {
        self.strategies.contains(&strategy)
    }

    /// The declared strategies, in a fixed order.
    pub fn strategies(&self) -> impl Iterator<Item = Strategy> + '_ {
        self.strategies.iter().copied()
    }
}

impl<const N: usize> From<[Strategy; N]> for Capabilities {
    /// # Panics
    /// Never for `N > 0`; an empty array is rejected at compile time by
    /// `const` evaluation.
    fn from(strategies: [Strategy; N]) -> Capabilities {
        const { assert!(N > 0, "capabilities need at least one strategy") };
        Capabilities {
            strategies: strategies.into_iter().collect(),
            staged: false,
            archive_schema: None,
            events: BTreeSet::new(),
        }
    }
}
