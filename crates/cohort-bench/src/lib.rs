//! What the benchmark programs in `src/bin/` share: a rule provider with one
//! rule for every category, running one SQL script, and the median of runs.
//! (`src/main.rs`, the sweep benchmark, has its own modules.)

use cohort::policy::ProviderError;
use cohort::{Capabilities, Period, ResolutionContext, Rule, RuleProvider, Strategy};
use futures_util::future::BoxFuture;
use sqlx::{AssertSqlSafe, PgPool};

/// Any error of a benchmark program.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Every category: 30 days, then `strategy` (the only one it allows).
#[derive(Debug, Clone, Copy)]
pub struct ThirtyDays(pub Strategy);

impl RuleProvider for ThirtyDays {
    fn resolve<'a>(
        &'a self,
        _ctx: ResolutionContext<'a>,
    ) -> BoxFuture<'a, Result<Option<Rule>, ProviderError>> {
        let strategy = self.0;
        Box::pin(async move { Ok(Some(Rule::new(Period::days(30), strategy))) })
    }

    fn capabilities(&self, _category: &str) -> Option<Capabilities> {
        Some(Capabilities::only(self.0))
    }
}

/// Runs `sql` (one or more statements, no parameters).
pub async fn exec(pool: &PgPool, sql: &str) -> Result<(), sqlx::Error> {
    sqlx::raw_sql(AssertSqlSafe(sql.to_owned()))
        .execute(pool)
        .await
        .map(|_| ())
}

/// The median of `v` (NaN when empty).
pub fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_median_is_the_middle_value() {
        assert_eq!(median(vec![3.0, 1.0, 2.0]), 2.0);
        assert!(median(Vec::new()).is_nan());
    }
}
