//! The command as operators use it (issue 26): a reader that goes away ends
//! it quietly, logs carry no colour codes outside a terminal, another
//! database's URL is refused, PostgreSQL's source lines stay out of its
//! messages, `init` keeps the keys private, a bad UUID gets a fresh one to
//! paste, and `runs settle` settles the runs whose owner is gone.

use std::io::Read;
use std::process::Stdio;

use crate::common::*;

const TENANT: &str = "2b0c6e1e-5d4c-4a8e-9a59-1f3c1d0e7a21";
const NOW: &str = "2030-01-01T00:00:00Z";

async fn with_runs(p: &Project) {
    p.sample().await;
    p.db.exec(&format!(
        "INSERT INTO sessions (id, tenant_id, user_id, ip, user_agent, created_at) \
         SELECT gen_random_uuid(), '{TENANT}', gen_random_uuid(), '10.0.0.1', 'x', '2029-11-01T00:00:00Z' \
         FROM generate_series(1, 5);"
    ))
    .await;
    for _ in 0..3 {
        assert_success(&p.cohort(&["sweep", "--tenant", TENANT, "--now", NOW]));
    }
}

#[tokio::test]
async fn a_closed_pipe_ends_an_export_quietly() {
    let p = Project::new().await;
    with_runs(&p).await;
    let mut c = p.command(&["runs", "export", "--records", "summaries"]);
    let mut child = c
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    // The reader goes away before the command writes (`| head -0`).
    drop(child.stdout.take());
    let mut err = String::new();
    child
        .stderr
        .take()
        .expect("stderr")
        .read_to_string(&mut err)
        .expect("stderr");
    let status = child.wait().expect("exit");
    assert_eq!(status.code(), Some(0), "{err}");
    assert!(
        !err.contains("Broken pipe") && !err.contains("error"),
        "{err}"
    );
}

#[tokio::test]
async fn log_lines_carry_no_colour_codes_outside_a_terminal() {
    let p = Project::new().await;
    with_runs(&p).await;
    // -vv: debug lines, so there is something on stderr to look at.
    let out = p.cohort(&["-vv", "runs", "list"]);
    assert_success(&out);
    let err = stderr(&out);
    assert!(!err.is_empty(), "nothing was logged");
    assert!(!err.contains('\u{1b}'), "colour codes in a pipe: {err:?}");
}

#[tokio::test]
async fn another_databases_url_is_refused_before_it_is_tried() {
    let p = Project::new().await;
    let out = run(command_in(
        &p.dir,
        Some("mysql://root:secret@127.0.0.1:1/app"),
        &["schema", "check"],
    ));
    assert_code(&out, 2);
    let err = stderr(&out);
    assert!(err.contains("PostgreSQL only"), "{err}");
    assert!(
        !err.contains("secret"),
        "the password is never shown: {err}"
    );
}

#[tokio::test]
async fn database_errors_carry_no_postgres_source_line() {
    let p = Project::new().await;
    let url = p.db.url();
    let (server, _) = url.rsplit_once('/').expect("a database in the URL");
    let missing = format!("{server}/cohort_no_such_database_{}", std::process::id());
    let out = run(command_in(&p.dir, Some(&missing), &["schema", "check"]));
    assert_ne!(code(&out), Some(0));
    let err = stderr(&out);
    assert!(err.contains("does not exist"), "{err}");
    assert!(!err.contains(" at line "), "{err}");
}

#[tokio::test]
async fn init_keeps_the_keys_private_and_generates_both() {
    let p = Project::new().await;
    assert_success(&p.cohort(&["init"]));
    let settings = p.dir.join("cohort.toml");
    let text = std::fs::read_to_string(&settings).expect("settings");
    for key in ["hash_key", "certificate_key"] {
        let line = text
            .lines()
            .find(|l| l.starts_with(&format!("{key} = \"")))
            .unwrap_or_else(|| panic!("no {key} in {text}"));
        let value = line.trim_end_matches('"').rsplit('"').next().unwrap_or("");
        assert_eq!(value.len(), 64, "{line}");
        assert!(value.bytes().all(|b| b.is_ascii_hexdigit()), "{line}");
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&settings)
            .expect("metadata")
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600, "{mode:o}");
    }
}

#[tokio::test]
async fn a_bad_entity_id_is_answered_with_a_fresh_uuid_to_use() {
    let p = Project::new().await;
    p.write(
        "cohort-model.toml",
        "[[entity]]\nid = \"00000000-0000-0000-0000-000000000000\"\ntable = \"t\"\ncategory = \"c\"\nanchor = \"a\"\n\n[rules.c]\nstrategy = \"purge\"\nperiod = \"P1Y\"\n",
    );
    let out = p.cohort(&["validate", "--offline"]);
    assert_ne!(code(&out), Some(0));
    let err = format!("{}{}", stdout(&out), stderr(&out));
    let suggested = err
        .split("for example ")
        .nth(1)
        .map(|rest| rest.chars().take(36).collect::<String>())
        .unwrap_or_default();
    let id =
        uuid::Uuid::parse_str(&suggested).unwrap_or_else(|e| panic!("{suggested:?}: {e}\n{err}"));
    assert!(!id.is_nil());
    assert!(!err.contains("uuidgen"), "{err}");
}

#[tokio::test]
async fn runs_settle_settles_a_run_whose_owner_is_gone_and_no_other() {
    let p = Project::new().await;
    with_runs(&p).await;
    p.db.exec(&format!(
        "INSERT INTO sweep_run (run_id, run_kind, trigger, dry_run, tenant_id, logical_now, status, started_at, \
                                owner_token, lease_expires_at) VALUES \
         ('0badc0de-0000-4000-8000-000000000001', 'Sweep', 'Manual', false, '{TENANT}', now(), 'Started', \
          now() - interval '1 hour', gen_random_uuid(), now() - interval '1 minute'), \
         ('0badc0de-0000-4000-8000-000000000002', 'Sweep', 'Manual', false, '{TENANT}', now(), 'Started', \
          now(), gen_random_uuid(), now() + interval '1 hour');"
    ))
    .await;
    let out = p.cohort(&["runs", "settle", "--json"]);
    assert_success(&out);
    assert_eq!(json(&out)["settled"], 1, "{}", stdout(&out));
    let statuses: Vec<String> = sqlx::query_scalar(
        "SELECT status FROM sweep_run WHERE run_id::text LIKE '0badc0de%' ORDER BY run_id",
    )
    .fetch_all(p.db.pool())
    .await
    .expect("runs");
    assert_eq!(statuses, vec!["Failed", "Started"]);
}

#[tokio::test]
async fn a_scope_is_asked_for_by_name_and_tenantless_is_the_default_of_a_single_tenant_model() {
    let p = Project::new().await;
    p.sample().await;
    // The sample has tenant-scoped tables: which rows, then?
    let out = p.cohort(&["preview"]);
    assert_code(&out, 2);
    let err = stderr(&out);
    assert!(
        err.contains("--tenant") && err.contains("--tenantless"),
        "{err}"
    );

    // A model whose every table is tenantless: no scope means tenantless,
    // and a tenant is refused rather than swept as nothing.
    p.db.exec("CREATE TABLE app_log (id bigint PRIMARY KEY, at timestamptz NOT NULL); \
               INSERT INTO app_log SELECT g, '2020-01-01'::timestamptz FROM generate_series(1, 3) g;")
        .await;
    p.write(
        "cohort-model.toml",
        "[[entity]]\nid = \"7e3a1f60-2b4c-4d8e-9f01-a2b3c4d5e6f7\"\ntable = \"app_log\"\ncategory = \"logs\"\n\
         anchor = \"at\"\ntenantless = true\n\n[rules.logs]\nstrategy = \"purge\"\nperiod = \"P1Y\"\n",
    );
    let out = p.cohort(&["preview", "--json"]);
    assert_success(&out);
    let out = p.cohort(&["sweep", "--tenant", TENANT]);
    assert_code(&out, 2);
    assert!(stderr(&out).contains("tenantless"), "{}", stderr(&out));
    assert_success(&p.cohort(&["sweep"]));
    assert_eq!(crate::common::count_rows(&p, "app_log").await, 0);
    // The tenantless run shows `-` for its tenant, as holds do.
    let out = p.cohort(&["runs", "show", "latest"]);
    assert_success(&out);
    assert!(stdout(&out).contains("tenant -"), "{}", stdout(&out));
    assert!(
        !stdout(&out).contains("00000000-0000-0000-0000-000000000000"),
        "{}",
        stdout(&out)
    );
}

#[tokio::test]
async fn the_pg_variables_alone_name_the_database_as_for_psql() {
    let p = Project::new().await;
    p.sample().await;
    let options = p.db.options();
    let mut c = command_in(&p.dir, None, &["schema", "check"]);
    c.env("PGHOST", options.get_host())
        .env("PGPORT", options.get_port().to_string())
        .env("PGUSER", options.get_username())
        .env("PGDATABASE", options.get_database().expect("a database"));
    assert_success(&run(c));
    // A service file is not read: said so, rather than another database tried.
    let mut c = command_in(&p.dir, None, &["schema", "check"]);
    c.env("PGSERVICE", "app");
    let out = run(c);
    assert_code(&out, 2);
    assert!(stderr(&out).contains("PGSERVICE"), "{}", stderr(&out));
}

#[tokio::test]
async fn a_refused_login_says_where_the_credentials_came_from() {
    let p = Project::new().await;
    p.sample().await;
    let options = p.db.options();
    let url = format!(
        "postgres://no_such_role_{}:not-the-password@{}:{}/{}",
        std::process::id(),
        options.get_host(),
        options.get_port(),
        options.get_database().expect("a database")
    );
    let out = run(command_in(&p.dir, Some(&url), &["schema", "check"]));
    assert_code(&out, 1);
    let err = stderr(&out);
    assert!(err.contains("came from DATABASE_URL"), "{err}");
    assert!(
        !err.contains("not-the-password"),
        "the password is never shown: {err}"
    );
}

#[tokio::test]
async fn a_typo_in_the_settings_file_is_answered_with_its_line_and_the_key_meant() {
    let p = Project::new().await;
    p.write(
        "cohort.toml",
        "# settings\nbatch_sise = 10\n\n[worker]\nshedule = \"0 3 * * *\"\n",
    );
    let out = p.cohort(&["schema", "sql"]);
    assert_ne!(code(&out), Some(0));
    let err = stderr(&out);
    assert!(
        err.contains(
            "cohort.toml:2: batch_sise: unknown key `batch_sise`; did you mean `batch_size`?"
        ),
        "{err}"
    );
    // Serde stops at the first unknown key; fixed, the next is named.
    p.write(
        "cohort.toml",
        "# settings\nbatch_size = 10\n\n[worker]\nshedule = \"0 3 * * *\"\n",
    );
    let err = stderr(&p.cohort(&["schema", "sql"]));
    assert!(
        err.contains(
            "cohort.toml:5: worker.shedule: unknown key `shedule`; did you mean `schedule`?"
        ),
        "{err}"
    );
}

#[tokio::test]
async fn validate_speaks_the_model_files_language_and_drops_what_follows_from_a_missing_table() {
    let p = Project::new().await;
    p.sample().await;
    p.db.exec("CREATE TABLE public.keyless (code text, made_at timestamptz NOT NULL, tenant_id uuid NOT NULL);")
        .await;
    let model = std::fs::read_to_string(p.dir.join("cohort-model.toml")).expect("model");
    let model = model.replacen("table = \"sessions\"", "table = \"sesions\"", 1)
        + "\n[[entity]]\nid = \"5a1e0b9c-0d2e-4f3a-8b4c-6d7e8f9a0b1c\"\ntable = \"keyless\"\ncategory = \"sessions\"\nanchor = \"made_at\"\n";
    p.write("cohort-model.toml", &model);
    let out = p.cohort(&["validate"]);
    assert_code(&out, 3);
    let text = stdout(&out);
    // The misspelt table: its line, the name it is closest to, and nothing
    // that only follows from its absence.
    let line = model
        .lines()
        .position(|l| l.contains("table = \"sesions\""))
        .expect("the line");
    let entry = model
        .lines()
        .take(line)
        .enumerate()
        .filter(|(_, l)| l.starts_with("[[entity]]"))
        .last()
        .map(|(i, _)| i + 1)
        .expect("its entry");
    assert!(
        text.contains(&format!("cohort-model.toml:{entry}: sessions")),
        "{text}"
    );
    assert!(text.contains("did you mean public.sessions?"), "{text}");
    let sessions_lines: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("public.sesions"))
        .collect();
    assert_eq!(sessions_lines.len(), 1, "{text}");
    // The keyless table: the fix names the model file's key, not the derive's.
    assert!(text.contains("record_id = \"<column>\""), "{text}");
    assert!(!text.contains("#[cohort("), "{text}");
}
