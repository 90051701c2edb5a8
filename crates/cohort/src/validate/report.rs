//! The problems validation reports, and where each one is.

use std::collections::BTreeMap;

pub use crate::error::validation::{ValidationProblem, ValidationReport};

/// What is wrong and how to fix it, before it is placed on a type and table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Issue {
    pub(super) problem: String,
    pub(super) fix: String,
}

impl Issue {
    pub(super) fn new(problem: impl Into<String>, fix: impl Into<String>) -> Issue {
        Issue {
            problem: problem.into(),
            fix: fix.into(),
        }
    }
}

/// A registered type and its (schema-qualified, unquoted) table, for messages.
#[derive(Debug, Clone)]
pub(super) struct Place {
    pub(super) type_name: &'static str,
    pub(super) table: String,
}

impl Place {
    pub(super) fn problem(&self, column: Option<&str>, issue: Issue) -> ValidationProblem {
        ValidationProblem {
            option: None,
            type_name: Some(self.type_name.to_owned()),
            table: Some(self.table.clone()),
            column: column.map(str::to_owned),
            problem: issue.problem,
            fix: issue.fix,
        }
    }
}

/// Problems as they are found, reported in registration order: problems
/// about the registration as a whole first, then each type's in the order the
/// checks found them.
#[derive(Debug, Default)]
pub(super) struct Problems {
    general: Vec<ValidationProblem>,
    by_type: BTreeMap<usize, Vec<ValidationProblem>>,
}

impl Problems {
    /// A problem with the registration as a whole.
    pub(super) fn general(&mut self, issue: Issue) {
        self.general
            .push(ValidationProblem::general(issue.problem, issue.fix));
    }

    /// A problem of the type registered at `index`.
    pub(super) fn push(&mut self, index: usize, problem: ValidationProblem) {
        self.by_type.entry(index).or_default().push(problem);
    }

    /// Whether the type registered at `index` has any problem.
    pub(super) fn has(&self, index: usize) -> bool {
        self.by_type.get(&index).is_some_and(|p| !p.is_empty())
    }

    pub(super) fn is_empty(&self) -> bool {
        self.general.is_empty() && self.by_type.values().all(Vec::is_empty)
    }

    pub(super) fn into_report(self) -> ValidationReport {
        let mut problems = self.general;
        problems.extend(self.by_type.into_values().flatten());
        ValidationReport {
            problems,
            readiness: Vec::new(),
        }
    }
}
