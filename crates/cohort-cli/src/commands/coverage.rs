//! stub
use super::Ctx;
use crate::cli::CoverageArgs;
use crate::error::CliResult;
pub(crate) async fn run(_ctx: &Ctx, _a: &CoverageArgs) -> CliResult { Ok(()) }
