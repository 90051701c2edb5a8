//! What validation reports: every problem with the options, the model and
//! Cohort's tables, found at start-up all at once. Produced by the validate
//! layer (and `Options::validate`); defined here, beside the error that
//! carries them, so the one [`Error`](super::Error) composes nothing from
//! the layers above it.

use std::fmt;

use super::readiness::ReadinessProblem;

/// One thing wrong with the options or the registered model, with where and
/// how to fix it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ValidationProblem {
    /// The option concerned (`"batch_size"`, `"conventions.tenant"`), for a
    /// problem with [`crate::Options`].
    pub option: Option<&'static str>,
    /// The Rust type concerned, when there is one.
    pub type_name: Option<String>,
    /// The table concerned (schema-qualified), when there is one.
    pub table: Option<String>,
    /// The column concerned, when there is one.
    pub column: Option<String>,
    /// What is wrong.
    pub problem: String,
    /// How to fix it.
    pub fix: String,
}

impl ValidationProblem {
    /// A problem with the registration as a whole (no type, table or column).
    pub(crate) fn general(problem: impl Into<String>, fix: impl Into<String>) -> Self {
        ValidationProblem {
            option: None,
            type_name: None,
            table: None,
            column: None,
            problem: problem.into(),
            fix: fix.into(),
        }
    }

    /// A problem of one registered type that no catalog lookup found.
    pub(crate) fn for_type(
        type_name: &str,
        problem: impl Into<String>,
        fix: impl Into<String>,
    ) -> Self {
        ValidationProblem {
            type_name: Some(type_name.to_owned()),
            ..ValidationProblem::general(problem, fix)
        }
    }

    /// A problem with option `option`.
    pub(crate) fn option(
        option: &'static str,
        problem: impl Into<String>,
        fix: impl Into<String>,
    ) -> Self {
        ValidationProblem {
            option: Some(option),
            ..ValidationProblem::general(problem, fix)
        }
    }
}

impl fmt::Display for ValidationProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(o) = self.option {
            write!(f, "options.{o}")?;
        }
        if let Some(t) = &self.type_name {
            write!(f, "{t}")?;
        }
        match (&self.table, &self.column) {
            (Some(t), Some(c)) => write!(f, " ({t}.{c})")?,
            (Some(t), None) => write!(f, " ({t})")?,
            _ => {}
        }
        write!(f, ": {}; fix: {}", self.problem, self.fix)
    }
}

/// Every problem found at start-up: with the options, the registered model
/// and Cohort's tables, all at once.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct ValidationReport {
    /// The problems with the options and the model, options first, then the
    /// model's in registration order.
    pub problems: Vec<ValidationProblem>,
    /// What is wrong with Cohort's tables (their readiness), typed.
    pub readiness: Vec<ReadinessProblem>,
}

impl ValidationReport {
    /// How many problems in all.
    pub fn len(&self) -> usize {
        self.problems.len() + self.readiness.len()
    }

    /// Whether there is no problem at all.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl fmt::Display for ValidationReport {
    /// One line per problem.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "{} problem(s):", self.len())?;
        for p in &self.problems {
            writeln!(f, "  - {p}")?;
        }
        for p in &self.readiness {
            writeln!(
                f,
                "  - Cohort's tables: {p}; fix: apply Cohort's schema migrations"
            )?;
        }
        Ok(())
    }
}
