//! stub
use super::Ctx;
use crate::cli::DemoArgs;
use crate::error::CliResult;
pub(crate) async fn run(_ctx: &Ctx, _a: &DemoArgs) -> CliResult { Ok(()) }
