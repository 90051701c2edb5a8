//! stub
use super::Ctx;
use crate::cli::ScheduleArgs;
use crate::error::CliResult;
pub(crate) fn run(_ctx: &Ctx, _a: &ScheduleArgs) -> CliResult { Ok(()) }
