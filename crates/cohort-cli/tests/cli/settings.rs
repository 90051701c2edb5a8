//! K8: settings from the file and `COHORT_*` (the environment wins), the
//! database from `DATABASE_URL` or `--database-url`, passwords never shown.

use crate::common::*;

// contract: K8
#[tokio::test]
async fn the_environment_wins_over_the_file() {
    let p = Project::new().await;
    p.write("cohort.toml", "schema = \"from_file\"\nbatch_size = 5\n");
    let out = run(command_in(&p.dir, None, &["schema", "sql"]));
    assert_success(&out);
    assert!(stdout(&out).contains("CREATE TABLE IF NOT EXISTS \"from_file\".\"sweep_run\""));

    let mut c = command_in(&p.dir, None, &["schema", "sql"]);
    c.env("COHORT_SCHEMA", "from_env");
    let out = run(c);
    assert_success(&out);
    assert!(stdout(&out).contains("CREATE TABLE IF NOT EXISTS \"from_env\".\"sweep_run\""));

    // --config names another file; a typo in it is reported with its key.
    p.write("other.toml", "schema = \"other\"\nbatch_sise = 5\n");
    let out = run(command_in(
        &p.dir,
        None,
        &["--config", "other.toml", "schema", "sql"],
    ));
    assert_code(&out, 1);
    assert!(stderr(&out).contains("batch_sise"), "{}", stderr(&out));

    // Unrelated COHORT_* variables (the test harness's) are not settings.
    let mut c = command_in(&p.dir, None, &["schema", "sql"]);
    c.env("COHORT_KEEP_TEST_DB", "1");
    assert_success(&run(c));
}

// contract: K8
#[tokio::test]
async fn the_database_comes_from_the_flag_then_database_url_then_the_settings() {
    let p = Project::new().await;
    assert_success(&p.cohort(&["schema", "migrate"]));

    // The settings' database_url, when nothing else is given.
    p.write("cohort.toml", &format!("database_url = {:?}\n", p.db.url()));
    assert_success(&run(command_in(&p.dir, None, &["schema", "check"])));

    // DATABASE_URL beats the settings; --database-url beats both.
    let bad = "postgres://postgres:SuperSecret%21@127.0.0.1:1/nowhere";
    let out = run(command_in(&p.dir, Some(bad), &["schema", "check"]));
    assert_code(&out, 1);
    let good = p.db.url();
    assert_success(&run(command_in(
        &p.dir,
        Some(bad),
        &["--database-url", &good, "schema", "check"],
    )));

    // Passwords are never printed, in any error.
    let out = run(command_in(
        &p.dir,
        None,
        &["--database-url", bad, "schema", "check"],
    ));
    assert_code(&out, 1);
    let all = format!("{}{}", stdout(&out), stderr(&out));
    assert!(!all.contains("SuperSecret"), "{all}");
    assert!(
        all.contains("postgres://postgres:***@127.0.0.1:1/nowhere"),
        "{all}"
    );

    // No database anywhere: an actionable message.
    std::fs::remove_file(p.dir.join("cohort.toml")).expect("remove");
    let out = run(command_in(&p.dir, None, &["schema", "check"]));
    assert_code(&out, 1);
    assert!(
        stderr(&out).contains("set DATABASE_URL, pass --database-url"),
        "{}",
        stderr(&out)
    );
}

// contract: K1
// Only `schema migrate` changes the schema: every other command refuses to
// run against a database without Cohort's tables, and creates nothing.
#[tokio::test]
async fn nothing_but_schema_migrate_changes_the_schema() {
    let p = Project::new().await;
    assert_success(&p.cohort(&["init"]));
    p.db.exec(SAMPLE_TABLES).await;
    let out = p.cohort(&["schema", "check"]);
    assert_code(&out, 3);
    assert!(stdout(&out).contains("NOT READY"), "{}", stdout(&out));
    for args in [
        &["validate"][..],
        &["preview", "--tenantless"],
        &["sweep", "--tenantless"],
        &["holds", "list"],
        &["runs", "list"],
    ] {
        let out = p.cohort(args);
        assert!(
            matches!(code(&out), Some(1) | Some(3)),
            "{args:?}: {}",
            stderr(&out)
        );
        let all = format!("{}{}", stdout(&out), stderr(&out));
        assert!(
            all.contains("schema migrate"),
            "{args:?} should say how to fix it: {all}"
        );
    }
    let tables: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM pg_class WHERE relname IN ('sweep_run', 'retention_holds')",
    )
    .fetch_one(p.db.pool())
    .await
    .expect("count");
    assert_eq!(
        tables, 0,
        "no command but schema migrate created Cohort's tables"
    );
    assert_success(&p.cohort(&["schema", "migrate"]));
    assert_success(&p.cohort(&["schema", "check"]));
    let out = p.cohort(&["schema", "migrate"]);
    assert_success(&out);
    assert!(stdout(&out).contains("nothing to apply"));
}
