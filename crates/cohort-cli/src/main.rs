//! `cohort`: Cohort's retention engine for any PostgreSQL application,
//! driven by a TOML model file. See `docs/cli.md`.

mod anonymisers;
mod cli;
mod commands;
mod db;
mod error;
mod model;
mod output;
mod progress;
mod sample;
mod settings;
mod telemetry;
#[cfg(feature = "otlp")]
mod traces;

use std::process::ExitCode;

use clap::Parser;
use tracing_subscriber::EnvFilter;

fn main() -> ExitCode {
    // clap exits by itself: 0 for --help and --version, 2 for usage errors.
    let cli = cli::Cli::parse();
    let default_level = match cli.global.verbose {
        0 => "error",
        1 => "info",
        _ => "debug",
    };
    let filter =
        EnvFilter::try_from_env("COHORT_LOG").unwrap_or_else(|_| EnvFilter::new(default_level));
    use tracing_subscriber::Layer as _;
    use tracing_subscriber::layer::SubscriberExt as _;
    use tracing_subscriber::util::SubscriberInitExt as _;
    let logs = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(colours())
        .with_target(false)
        .with_filter(filter);
    // With `--features otlp` and an OTLP endpoint in the environment, the
    // spans are exported too; `_traces` flushes them when main returns.
    #[cfg(feature = "otlp")]
    let (otlp, _traces) = match traces::layer() {
        Some((layer, guard)) => (Some(layer), Some(guard)),
        None => (None, None),
    };
    #[cfg(not(feature = "otlp"))]
    let otlp: Option<tracing_subscriber::layer::Identity> = None;
    tracing_subscriber::registry().with(logs).with(otlp).init();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return error::exit(error::code::ERROR);
        }
    };
    match runtime.block_on(commands::run(cli)) {
        Ok(code) => error::exit(code),
        // A reader that went away (`cohort runs export | head`) ends the
        // command quietly, as `gh` and `kubectl` do.
        Err(e) if e.is_broken_pipe() => error::exit(error::code::SUCCESS),
        Err(e) => {
            eprintln!("{}", error::Shown(&e));
            error::exit(e.exit_code())
        }
    }
}

/// Whether log lines on stderr may carry colour codes: only on a terminal,
/// and never when `NO_COLOR` is set to anything but the empty string
/// (<https://no-color.org>), so cron mail and journald get plain text.
fn colours() -> bool {
    use std::io::IsTerminal;
    let no_color = std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty());
    !no_color && std::io::stderr().is_terminal()
}
