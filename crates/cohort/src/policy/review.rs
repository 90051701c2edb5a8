//! Disposition review (contracts DR1-DR3): a rule, or a stage of a staged
//! rule, that asks for named reviewers before a sweep changes its rows; and
//! the canonical content of a rule, whose SHA-256 binds a disposition batch
//! to the rule that selected it.

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::{Period, Rule};

/// The format tag of a rule's canonical content ([`RuleContent`]).
pub const RULE_CONTENT_FORMAT: &str = "cohort-disposition-rule/1";

/// A rule's (or a stage's) disposition review: a sweep freezes what it would
/// change into a disposition batch and changes nothing, until the batch is
/// approved (contract DR1, DR2).
///
/// ```
/// use cohort::{Period, Review, Rule, Strategy};
/// let rule = Rule::new(Period::years(7), Strategy::Purge)
///     .with_review(Review::new().approvers(2).auto_approve_after(Period::days(30)));
/// assert_eq!(rule.review.map(|r| r.approvers), Some(2));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Review {
    /// How many distinct approvers a batch needs (1 or 2; a value above 2
    /// means 2, below 1 means 1).
    pub approvers: u8,
    /// When set, a batch still pending this long after it was frozen (by
    /// the freezing sweep's logical time) is approved by the next sweep,
    /// recorded as a decision by `auto`.
    pub auto_approve_after: Option<Period>,
    /// How long the rows of a rejected batch are kept before a sweep offers
    /// them for review again (counted from the rejection, by the database
    /// clock). `None`: the stage's own period. A changed rule offers them
    /// at once.
    pub reoffer_after: Option<Period>,
}

impl Default for Review {
    fn default() -> Review {
        Review::new()
    }
}

impl Review {
    /// One approver, no auto-approval, rejected rows offered again after
    /// the stage's own period.
    pub const fn new() -> Review {
        Review {
            approvers: 1,
            auto_approve_after: None,
            reoffer_after: None,
        }
    }

    /// How many distinct approvers a batch needs: 1 or 2 (clamped).
    pub const fn approvers(mut self, approvers: u8) -> Review {
        self.approvers = if approvers < 1 {
            1
        } else if approvers > 2 {
            2
        } else {
            approvers
        };
        self
    }

    /// Approves a batch still pending `period` after it was frozen, at the
    /// next sweep; the decision is recorded as taken by `auto`.
    pub const fn auto_approve_after(mut self, period: Period) -> Review {
        self.auto_approve_after = Some(period);
        self
    }

    /// Offers the rows of a rejected batch again `period` after the
    /// rejection (instead of after the stage's own period).
    pub const fn reoffer_after(mut self, period: Period) -> Review {
        self.reoffer_after = Some(period);
        self
    }

    /// The number of distinct approvers, clamped to 1..=2 (a `Review`
    /// built with a struct literal elsewhere is read the same way).
    pub(crate) fn required(&self) -> i32 {
        i32::from(self.approvers.clamp(1, 2))
    }
}

/// A rule's content as it selects the rows of one stage, in canonical form:
/// what a disposition batch records and what its hash is the SHA-256 of.
/// Two rules with the same content select the same rows; any change of a
/// period, a strategy, the legal minimum, the provenance, a stage or a
/// review setting changes it (the per-row audit does not: it changes what is
/// recorded, not which rows go).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuleContent {
    /// The canonical text: one line of JSON, keys in a fixed order, no
    /// whitespace (see `docs/disposition.md`).
    pub text: String,
    /// SHA-256 of `text`'s UTF-8 bytes.
    pub hash: [u8; 32],
}

#[derive(Serialize)]
struct ReviewText {
    approvers: i32,
    auto_approve_after: Option<String>,
    reoffer_after: Option<String>,
}

#[derive(Serialize)]
struct StageText {
    period: String,
    strategy: &'static str,
    review: Option<ReviewText>,
}

#[derive(Serialize)]
struct ContentText<'a> {
    format: &'static str,
    stage: usize,
    stages: Vec<StageText>,
    legal_minimum: Option<String>,
    source: Option<&'a str>,
    reason: Option<&'a str>,
}

fn review_text(r: &Option<Review>) -> Option<ReviewText> {
    r.as_ref().map(|r| ReviewText {
        approvers: r.required(),
        auto_approve_after: r.auto_approve_after.map(|p| p.to_string()),
        reoffer_after: r.reoffer_after.map(|p| p.to_string()),
    })
}

impl Rule {
    /// The rule's canonical content as it selects the rows of stage `stage`
    /// (0 for a single-stage rule), and its SHA-256 (contract DR1).
    ///
    /// ```
    /// use cohort::{Period, Rule, Strategy};
    /// let a = Rule::new(Period::days(30), Strategy::Purge);
    /// let b = a.clone().with_provenance("policy-7", "GDPR art. 5");
    /// assert_ne!(a.content(0).hash, b.content(0).hash);
    /// assert_eq!(a.content(0), Rule::new(Period::days(30), Strategy::Purge).content(0));
    /// assert!(a.content(0).text.starts_with(r#"{"format":"cohort-disposition-rule/1","stage":0,"#));
    /// ```
    pub fn content(&self, stage: usize) -> RuleContent {
        let mut stages = vec![StageText {
            period: self.period.to_string(),
            strategy: self.strategy.as_str(),
            review: review_text(&self.review),
        }];
        stages.extend(self.then.iter().map(|s| StageText {
            period: s.period.to_string(),
            strategy: s.strategy.as_str(),
            review: review_text(&s.review),
        }));
        let content = ContentText {
            format: RULE_CONTENT_FORMAT,
            stage,
            stages,
            legal_minimum: self.legal_minimum.map(|p| p.to_string()),
            source: self.source.as_deref(),
            reason: self.reason.as_deref(),
        };
        // Serialising a struct of strings, numbers and options cannot fail.
        let text = serde_json::to_string(&content).unwrap_or_default();
        let hash: [u8; 32] = Sha256::digest(text.as_bytes()).into();
        RuleContent { text, hash }
    }

    /// The review of stage `stage` (0: the rule's own), if it asks for one.
    pub fn review_of(&self, stage: usize) -> Option<Review> {
        match stage.checked_sub(1) {
            None => self.review,
            Some(i) => self.then.get(i).and_then(|s| s.review),
        }
    }
}

/// An approver's name as two-approver mode compares it: trimmed, lower case.
pub(crate) fn same_person(name: &str) -> String {
    name.trim().to_lowercase()
}

/// Whether `approvals` (`(name, automatic)`, as the chain records them)
/// approve a batch that needs `required` distinct approvers: an
/// auto-approval does on its own.
pub(crate) fn approved(approvals: &[(String, bool)], required: i32) -> bool {
    if approvals.iter().any(|(_, automatic)| *automatic) {
        return true;
    }
    let mut people: Vec<String> = approvals.iter().map(|(n, _)| same_person(n)).collect();
    people.sort();
    people.dedup();
    i64::try_from(people.len()).unwrap_or(i64::MAX) >= i64::from(required)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::Strategy;

    #[test]
    fn content_is_stable_and_changes_with_every_part_that_selects_rows() {
        let base = Rule::new(Period::days(30), Strategy::SoftDelete)
            .then(Period::days(60), Strategy::Purge)
            .with_review(Review::new());
        let text = base.content(1).text;
        assert_eq!(
            text,
            r#"{"format":"cohort-disposition-rule/1","stage":1,"stages":[{"period":"P30D","strategy":"SoftDelete","review":{"approvers":1,"auto_approve_after":null,"reoffer_after":null}},{"period":"P60D","strategy":"Purge","review":null}],"legal_minimum":null,"source":null,"reason":null}"#
        );
        let hash = base.content(1).hash;
        let changed = [
            base.clone().with_legal_minimum(Period::days(90)),
            base.clone().with_provenance("p", "r"),
            base.clone().with_review(Review::new().approvers(2)),
            base.clone()
                .with_review(Review::new().auto_approve_after(Period::days(1))),
            Rule::new(Period::days(31), Strategy::SoftDelete)
                .then(Period::days(60), Strategy::Purge)
                .with_review(Review::new()),
        ];
        for c in &changed {
            assert_ne!(c.content(1).hash, hash, "{c:?}");
        }
        assert_ne!(base.content(0).hash, hash);
        // Per-row audit changes what is recorded, not which rows go.
        assert_eq!(base.clone().with_per_row_audit().content(1).hash, hash);
    }

    #[test]
    fn two_approvers_are_two_people_and_auto_approves_alone() {
        let a = |n: &str| (n.to_owned(), false);
        assert!(!approved(&[a("ann")], 2));
        assert!(!approved(&[a("ann"), a(" Ann ")], 2));
        assert!(approved(&[a("ann"), a("bob")], 2));
        assert!(approved(&[a("ann")], 1));
        assert!(approved(&[("auto".into(), true)], 2));
        assert!(!approved(&[], 1));
    }

    #[test]
    fn approvers_are_one_or_two() {
        assert_eq!(Review::new().approvers(0).approvers, 1);
        assert_eq!(Review::new().approvers(7).approvers, 2);
        let literal = Review {
            approvers: 9,
            ..Review::new()
        };
        assert_eq!(literal.required(), 2);
    }
}
