//! `runs list` and `runs show` fit a terminal by default (short ids, times
//! to the second, the columns that matter) and show everything with
//! `--wide`; `runs show` takes the short id back.

use crate::common::*;

const TENANT: &str = "2b0c6e1e-5d4c-4a8e-9a59-1f3c1d0e7a21";
const NOW: &str = "2030-01-01T00:00:00Z";

fn widest(text: &str) -> usize {
    text.lines().map(|l| l.chars().count()).max().unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_tables_fit_a_terminal_and_wide_shows_every_column() {
    let p = Project::new().await;
    p.sample().await;
    p.db.exec(&format!(
        "INSERT INTO sessions (id, tenant_id, user_id, ip, user_agent, created_at) \
         SELECT gen_random_uuid(), '{TENANT}', gen_random_uuid(), '10.0.0.1', 'x', \
                '2029-10-01T00:00:00Z'::timestamptz + g * interval '1 day' FROM generate_series(1, 3) g;"
    ))
    .await;
    let out = p.cohort(&["sweep", "--tenant", TENANT, "--now", NOW, "--json"]);
    assert_success(&out);
    let run_id = json(&out)["run_id"].as_str().expect("run id").to_owned();

    let list = p.cohort(&["runs", "list"]);
    assert_success(&list);
    let text = stdout(&list);
    assert!(widest(&text) <= 100, "{} columns:\n{text}", widest(&text));
    assert!(
        text.contains(&run_id[..8]) && !text.contains(&run_id),
        "{text}"
    );
    let wide = stdout(&p.cohort(&["runs", "list", "--wide"]));
    assert!(wide.contains(&run_id) && wide.contains("trigger"), "{wide}");
    // kubectl's spelling: -o wide, -o json.
    assert_eq!(stdout(&p.cohort(&["runs", "list", "-o", "wide"])), wide);
    let listed = p.cohort(&["runs", "list", "-o", "json"]);
    assert_success(&listed);
    assert_eq!(json(&listed)[0]["run_id"].as_str(), Some(run_id.as_str()));

    // The short id is enough to show the run.
    let show = p.cohort(&["runs", "show", &run_id[..8]]);
    assert_success(&show);
    let text = stdout(&show);
    assert!(
        text.starts_with(&format!("run {run_id}: Sweep Succeeded")),
        "{text}"
    );
    assert!(widest(&text) <= 110, "{} columns:\n{text}", widest(&text));
    assert!(!text.contains("rule source"), "{text}");
    let wide = stdout(&p.cohort(&["runs", "show", &run_id, "--wide"]));
    assert!(
        wide.contains("rule source") && wide.contains("null anchor"),
        "{wide}"
    );
    assert_eq!(
        stdout(&p.cohort(&["runs", "show", &run_id, "-o", "wide"])),
        wide
    );
    let shown = p.cohort(&["runs", "show", &run_id, "-o", "json"]);
    assert_success(&shown);
    assert_eq!(
        json(&shown)["run"]["run_id"].as_str(),
        Some(run_id.as_str())
    );

    // Not an id, nor a prefix of one: a usage error.
    let bad = p.cohort(&["runs", "show", "zz"]);
    assert_eq!(code(&bad), Some(2), "{}", stderr(&bad));
    assert!(
        stderr(&bad).contains("first 4 hex digits"),
        "{}",
        stderr(&bad)
    );
    let none = p.cohort(&["runs", "show", "ffffffff"]);
    assert_eq!(code(&none), Some(2), "{}", stderr(&none));
}
