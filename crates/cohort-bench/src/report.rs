//! The Markdown summary of a run, from its JSON lines.

use serde_json::Value;

use crate::plan;

/// `1234567` as `1,234,567`.
fn thousands(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

fn problems(r: &Value) -> Vec<String> {
    r["problems"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|p| p.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

fn timed_out(r: &Value) -> bool {
    r["timed_out"].as_bool().unwrap_or(false)
}

/// Rows per second of a usable line (finished, checks passed).
fn rate(r: &Value) -> Option<f64> {
    if timed_out(r) || !problems(r).is_empty() {
        return None;
    }
    r["rows_per_second"].as_f64()
}

/// The reference line of `name` among `results`.
fn reference<'a>(results: &'a [Value], name: &str) -> Option<&'a Value> {
    results.iter().find(|r| r["what"] == name)
}

/// Prints the summary table of one run's `results`; returns whether any
/// measurement failed its checks.
pub(crate) fn table(results: &[Value]) -> bool {
    println!(
        "| measurement | batch | rows | seconds | rows/s | ratio to reference | target | met? | peak RSS |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    let mut failures = Vec::new();
    for r in results {
        let what = r["what"].as_str().unwrap_or("?");
        let spec = plan::find(what);
        let batch = r["batch"]
            .as_u64()
            .map(thousands)
            .unwrap_or_else(|| "-".to_owned());
        let rss = r["peak_rss_kib"]
            .as_f64()
            .map(|k| format!("{:.1} MiB", k / 1024.0))
            .unwrap_or_else(|| "-".to_owned());
        let seconds = r["seconds"].as_f64().unwrap_or(f64::NAN);
        let errors = problems(r);
        if !errors.is_empty() {
            println!("| {what} | {batch} | - | - | - | - | - | CHECK FAILED | {rss} |");
            failures.push(format!("{what} (batch {batch}): {}", errors.join("; ")));
            continue;
        }
        let reference_line = spec
            .and_then(|s| s.reference)
            .and_then(|name| reference(results, name).map(|l| (name, l)));
        let target = spec.map(|s| s.target).unwrap_or(plan::Target::None);
        if timed_out(r) {
            let done = r["rows_done"].as_u64().unwrap_or(0);
            let max = r["max_seconds"].as_f64().unwrap_or(seconds);
            let rps = done as f64 / seconds;
            let ratio = reference_line
                .and_then(|(name, l)| rate(l).map(|base| format!("~{:.3} ({name})", rps / base)))
                .unwrap_or_else(|| "-".to_owned());
            println!(
                "| {what} | {batch} | {} done when stopped | > {max:.0} | ~{} | {ratio} | {} | stopped | {rss} |",
                thousands(done),
                thousands(rps as u64),
                target.label()
            );
            continue;
        }
        let rows = r["rows"].as_u64().unwrap_or(0);
        let rps = r["rows_per_second"].as_f64().unwrap_or(f64::NAN);
        let (ratio, met) = match reference_line {
            None => ("-".to_owned(), "-".to_owned()),
            Some((name, l)) => match rate(l) {
                None => (format!("- ({name} unusable)"), "-".to_owned()),
                Some(base) => {
                    let ratio = rps / base;
                    let met = match target.met(ratio) {
                        None => "-".to_owned(),
                        Some(true) => "yes".to_owned(),
                        Some(false) => "**no**".to_owned(),
                    };
                    (format!("{ratio:.2} ({name})"), met)
                }
            },
        };
        println!(
            "| {what} | {batch} | {} | {seconds:.2} | {} | {ratio} | {} | {met} | {rss} |",
            thousands(rows),
            thousands(rps as u64),
            target.label()
        );
    }
    // The purge's second reference: the raw DELETE without the hold check.
    if let Some(base) = reference(results, "raw-delete").and_then(rate) {
        for r in results.iter().filter(|r| r["what"] == "sweep-purge") {
            if let Some(rps) = rate(r) {
                println!(
                    "\nsweep-purge batch {} against raw-delete (no hold check): {:.2}",
                    r["batch"],
                    rps / base
                );
            }
        }
    }
    for f in &failures {
        println!("\n**CHECK FAILED** {f}");
    }
    !failures.is_empty()
}

/// The fastest line of each measurement and batch across `runs` (lines that
/// failed or were stopped count only when no run has a usable one).
pub(crate) fn best(runs: &[Vec<Value>]) -> Vec<Value> {
    let mut out: Vec<Value> = Vec::new();
    for r in runs.iter().flatten() {
        let same = out
            .iter_mut()
            .find(|o| o["what"] == r["what"] && o["batch"] == r["batch"]);
        match same {
            None => out.push(r.clone()),
            Some(o) => {
                let better = match (rate(o), rate(r)) {
                    (None, Some(_)) => true,
                    (Some(a), Some(b)) => b > a,
                    _ => false,
                };
                if better {
                    *o = r.clone();
                }
            }
        }
    }
    out
}

/// Prints the per-statement timings of the Cohort measurements (`--profile`).
pub(crate) fn profiles(results: &[Value]) {
    for r in results {
        let Some(statements) = r["profile"]["statements"].as_array() else {
            continue;
        };
        // Read-only measurements repeat: the statements cover every attempt.
        let total: f64 = r["attempts"]
            .as_array()
            .map(|a| a.iter().filter_map(Value::as_f64).sum())
            .unwrap_or(f64::NAN);
        let batches = statements
            .iter()
            .find(|s| s["kind"] == "BEGIN + entity fence (one message)")
            .and_then(|s| s["count"].as_u64())
            .unwrap_or(0);
        println!(
            "\n#### Where the time goes: {} batch {} ({total:.2} s over {} attempt(s), {batches} batches; client-side, each statement's time includes its round trip)\n",
            r["what"].as_str().unwrap_or("?"),
            r["batch"],
            r["attempts"].as_array().map_or(0, Vec::len)
        );
        println!("| statement | count | total s | share | ms per batch |");
        println!("|---|---|---|---|---|");
        let mut rows: Vec<(&str, u64, f64)> = statements
            .iter()
            .map(|s| {
                (
                    s["kind"].as_str().unwrap_or("?"),
                    s["count"].as_u64().unwrap_or(0),
                    s["seconds"].as_f64().unwrap_or(0.0),
                )
            })
            .collect();
        rows.sort_by(|a, b| b.2.total_cmp(&a.2));
        let mut sum = 0.0;
        for (kind, count, secs) in &rows {
            sum += secs;
            println!(
                "| {kind} | {count} | {secs:.3} | {:.0}% | {:.3} |",
                100.0 * secs / total,
                1000.0 * secs / batches.max(1) as f64
            );
        }
        println!(
            "| (outside statements: client, scheduling) | - | {:.3} | {:.0}% | {:.3} |",
            total - sum,
            100.0 * (total - sum) / total,
            1000.0 * (total - sum) / batches.max(1) as f64
        );
        if let Some(messages) = r["profile"]["messages"].as_array() {
            for m in messages {
                println!(
                    "\nCohort said {} time(s): {}",
                    m["count"],
                    m["message"].as_str().unwrap_or("?")
                );
            }
        }
    }
}
