//! stub
use super::Ctx;
use crate::cli::InitArgs;
use crate::error::CliResult;
pub(crate) fn run(_ctx: &Ctx, _a: &InitArgs) -> CliResult { Ok(()) }
