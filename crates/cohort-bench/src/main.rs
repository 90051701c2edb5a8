//! Cohort's throughput against raw SQL on the same data, in one run.
//!
//! ```sh
//! cargo run --release -p cohort-bench -- --quick                 # smoke run: 100,000 rows, batch 1,000
//! cargo run --release -p cohort-bench -- --rows 1000000          # batches 1,000 and 5,000
//! cargo run --release -p cohort-bench -- --rows 1000000 --runs 2 --only purge,preview
//! ```
//!
//! One table of `--rows` expired rows of tenant A (1,000 of them under an
//! active hold) plus 10% as many rows of tenant B; an index on
//! `(tenant_id, created_at, id)`. Each measurement runs in a child process of
//! its own on a fresh copy of the table (`VACUUM ANALYZE`, `CHECKPOINT`
//! before), so the peak memory reported (`VmHWM`) is that of the measuring
//! process alone, and is compared with one raw SQL statement on the same data
//! in the same run (see `plan.rs` for the list, `docs/performance.md` for the
//! figures). Every Cohort measurement checks its result (rows changed, the
//! 1,000 held rows kept, status) and the table afterwards, and the run fails
//! when one does not add up.
//!
//! Prints one JSON line per measurement, then a Markdown summary per run (and
//! the best of the runs when `--runs` is above 1). Not a test: numbers depend
//! on the machine; read the ratios.
//!
//! Options:
//! - `--rows N`: tenant A's expired rows (default 1,000,000);
//! - `--batch A,B`: batch sizes of the sweeps (default 1000,5000);
//! - `--quick`: 100,000 rows and batch 1,000 unless given;
//! - `--only X,Y` / `--skip X,Y`: measurements by name or group (`purge`,
//!   `soft-delete`, `anonymise`, `preview`, `random`, `noindex`); the raw
//!   references of what is selected always run too;
//! - `--max-seconds S`: stop a missing-index measurement (group `noindex`)
//!   after S seconds (default 120) and report it as "> S s" with the rows it
//!   had done; the others run to the end;
//! - `--repeat R`: read-only measurements (count, preview) run R times on
//!   their copy and the fastest counts (default 5);
//! - `--runs K`: the whole plan K times (default 1);
//! - `--profile`: per-statement timings of each Cohort measurement, from the
//!   client (adds a `tracing` subscriber: use it for a separate run);
//! - `--holds N`: how many of tenant A's rows are under an active hold
//!   (default 1,000; the matrix of issue 23 also runs 100,000);
//! - `--stale-holds`: never analyse nor vacuum the holds table (autovacuum
//!   off for it), so every statement is planned knowing nothing of the
//!   holds (contract X22);
//! - `--order auto|anchor|physical`: the sweeps' `Options::batch_order`
//!   (default `auto`);
//! - `--setup-only`: build the data and one copy, then stop (times the setup);
//! - `--list`: print the measurements and stop.

mod data;
mod measure;
mod model;
mod plan;
mod profile;
mod report;

use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::plan::{SPECS, Spec};

type BoxError = Box<dyn std::error::Error>;

/// The command line, parsed.
#[derive(Debug)]
struct Args {
    rows: u64,
    batches: Vec<u32>,
    only: Vec<String>,
    skip: Vec<String>,
    max_seconds: f64,
    repeat: u32,
    runs: u32,
    profile: bool,
    holds: data::Holds,
    order: cohort::BatchOrder,
    setup_only: bool,
    list: bool,
    /// Child mode: the measurement to run.
    measure: Option<String>,
    url: String,
}

fn list(value: &str) -> Vec<String> {
    value
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .collect()
}

fn parse_args() -> Result<Args, BoxError> {
    let mut args = Args {
        rows: 1_000_000,
        batches: vec![1_000, 5_000],
        only: Vec::new(),
        skip: Vec::new(),
        max_seconds: 120.0,
        repeat: 5,
        runs: 1,
        profile: false,
        holds: data::Holds {
            count: data::HOLDS,
            stale: false,
        },
        order: cohort::BatchOrder::Auto,
        setup_only: false,
        list: false,
        measure: None,
        url: String::new(),
    };
    let mut quick = false;
    let mut rows_given = false;
    let mut batch_given = false;
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or_else(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--rows" => {
                args.rows = value()?.replace(['_', ','], "").parse()?;
                rows_given = true;
            }
            "--batch" => {
                args.batches = list(&value()?)
                    .iter()
                    .map(|b| b.replace('_', "").parse())
                    .collect::<Result<_, _>>()?;
                batch_given = true;
            }
            "--only" => args.only = list(&value()?),
            "--skip" => args.skip = list(&value()?),
            "--max-seconds" => args.max_seconds = value()?.parse()?,
            "--repeat" => args.repeat = value()?.parse()?,
            "--runs" => args.runs = value()?.parse()?,
            "--quick" => quick = true,
            "--profile" => args.profile = true,
            "--holds" => args.holds.count = value()?.replace(['_', ','], "").parse()?,
            "--stale-holds" => args.holds.stale = true,
            "--order" => {
                args.order = match value()?.as_str() {
                    "auto" => cohort::BatchOrder::Auto,
                    "anchor" => cohort::BatchOrder::Anchor,
                    "physical" => cohort::BatchOrder::Physical,
                    other => {
                        return Err(format!("--order {other}: auto, anchor or physical").into());
                    }
                }
            }
            "--setup-only" => args.setup_only = true,
            "--list" => args.list = true,
            "--measure" => args.measure = Some(value()?),
            "--url" => args.url = value()?,
            other => return Err(format!("unknown argument {other} (see the crate docs)").into()),
        }
    }
    if quick {
        if !rows_given {
            args.rows = 100_000;
        }
        if !batch_given {
            args.batches = vec![1_000];
        }
    }
    if args.batches.is_empty() {
        return Err("--batch needs at least one size".into());
    }
    if args.rows < args.holds.count {
        return Err(format!("--rows must be at least --holds ({})", args.holds.count).into());
    }
    if !(args.max_seconds > 0.0 && args.max_seconds.is_finite()) {
        return Err("--max-seconds must be a positive number".into());
    }
    for name in args.only.iter().chain(&args.skip) {
        if !SPECS.iter().any(|s| s.name == name || s.group == name) {
            return Err(format!("no measurement or group named {name} (try --list)").into());
        }
    }
    Ok(args)
}

/// The peak resident set (`VmHWM`) of this process, in KiB.
fn peak_rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}

/// Child mode: one measurement, one JSON line on stdout.
async fn child(args: &Args, name: &str) -> Result<(), BoxError> {
    let spec = plan::find(name).ok_or_else(|| format!("unknown measurement {name}"))?;
    if args.profile {
        profile::install();
    }
    let job = measure::Job {
        spec,
        url: args.url.clone(),
        rows: args.rows,
        batch: args.batches.first().copied().unwrap_or(1_000),
        max: spec
            .bounded()
            .then(|| Duration::from_secs_f64(args.max_seconds)),
        repeat: args.repeat,
        holds: args.holds.count,
        order: args.order,
    };
    let mut line = measure::run(&job).await?;
    line["peak_rss_kib"] = Value::from(peak_rss_kib());
    println!("{line}");
    Ok(())
}

/// `--order`'s word for `order`.
fn order_name(order: cohort::BatchOrder) -> &'static str {
    match order {
        cohort::BatchOrder::Anchor => "anchor",
        cohort::BatchOrder::Physical => "physical",
        _ => "auto",
    }
}

/// Runs one measurement in a child process and returns its JSON line, or a
/// line that records how the child failed.
fn spawn(args: &Args, url: &str, spec: &Spec, batch: Option<u32>) -> Result<Value, BoxError> {
    let mut cmd = Command::new(std::env::current_exe()?);
    cmd.args([
        "--measure",
        spec.name,
        "--url",
        url,
        "--rows",
        &args.rows.to_string(),
        "--batch",
        &batch.unwrap_or(1_000).to_string(),
        "--max-seconds",
        &args.max_seconds.to_string(),
        "--repeat",
        &args.repeat.to_string(),
        "--holds",
        &args.holds.count.to_string(),
        "--order",
        order_name(args.order),
    ]);
    if args.profile {
        cmd.arg("--profile");
    }
    let out = cmd.output()?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = stdout.lines().last().unwrap_or("").trim();
    if !out.status.success() || line.is_empty() {
        let stderr = String::from_utf8_lossy(&out.stderr);
        return Ok(serde_json::json!({
            "what": spec.name,
            "data": spec.data.name(),
            "batch": batch,
            "problems": [format!("the measuring process failed ({}): {}", out.status, stderr.trim())],
        }));
    }
    Ok(serde_json::from_str(line)?)
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let args = parse_args()?;
    if let Some(name) = args.measure.clone() {
        return child(&args, &name).await;
    }
    let selected = plan::select(&args.only, &args.skip);
    if args.list {
        for s in SPECS {
            println!(
                "{:<26} group {:<12} data {:<8} reference {:<26} target {}",
                s.name,
                s.group,
                s.data,
                s.reference.unwrap_or("-"),
                s.target.label()
            );
        }
        return Ok(());
    }
    let db = cohort_testdb::TestDb::try_new().await?;
    eprintln!(
        "setting up {} rows of tenant A (+{} of tenant B, {} holds{}) in {}",
        args.rows,
        args.rows / 10,
        args.holds.count,
        if args.holds.stale {
            ", never analysed"
        } else {
            ""
        },
        db.name()
    );
    let started = Instant::now();
    data::setup(db.pool(), args.rows, args.holds).await?;
    eprintln!(
        "templates built in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    if args.setup_only {
        for d in [data::Data::Ordered, data::Data::Random, data::Data::NoIndex] {
            let started = Instant::now();
            data::fresh_copy(db.pool(), d).await?;
            eprintln!(
                "a fresh copy of {d} took {:.1} s",
                started.elapsed().as_secs_f64()
            );
        }
        return Ok(());
    }
    let mut runs: Vec<Vec<Value>> = Vec::new();
    for run in 1..=args.runs {
        let mut results = Vec::new();
        for spec in &selected {
            let batches: Vec<Option<u32>> = if spec.kind.batched() {
                args.batches.iter().copied().map(Some).collect()
            } else {
                vec![None]
            };
            for batch in batches {
                eprintln!(
                    "run {run}/{}: {}{}",
                    args.runs,
                    spec.name,
                    batch.map(|b| format!(" batch {b}")).unwrap_or_default()
                );
                let line = spawn(&args, &db.url(), spec, batch)?;
                println!("{line}");
                results.push(line);
            }
        }
        runs.push(results);
    }
    let mut failed = false;
    for (i, results) in runs.iter().enumerate() {
        println!(
            "\n### Run {} of {} ({} rows, batches {:?}, {} holds, {} statistics, {} order)\n",
            i + 1,
            args.runs,
            args.rows,
            args.batches,
            args.holds.count,
            if args.holds.stale { "stale" } else { "fresh" },
            order_name(args.order)
        );
        failed |= report::table(results);
    }
    if runs.len() > 1 {
        println!(
            "\n### Best of {} runs per measurement (fastest time of each, ratios between bests)\n",
            runs.len()
        );
        report::table(&report::best(&runs));
    }
    if args.profile {
        for results in &runs {
            report::profiles(results);
        }
    }
    if failed {
        return Err("some measurements failed their checks (see the summary)".into());
    }
    Ok(())
}
