//! K1: one binary, every subcommand, `--help` on each, documented exit codes.

use crate::common::*;

const LEAVES: &[&[&str]] = &[
    &["init"],
    &["schema", "sql"],
    &["schema", "check"],
    &["schema", "migrate"],
    &["validate"],
    &["preview"],
    &["sweep"],
    &["erase"],
    &["holds", "add"],
    &["holds", "list"],
    &["holds", "remove"],
    &["holds", "prune"],
    &["runs", "list"],
    &["runs", "show"],
    &["runs", "export"],
    &["coverage"],
    &["schedule"],
    &["demo"],
    &["worker"],
    &["verify"],
    &["report"],
    &["verify-report"],
    &["certificate"],
];

// contract: K1
#[test]
fn every_subcommand_has_help_with_an_example_and_the_exit_codes() {
    let dir = std::env::temp_dir();
    let top = run(command_in(&dir, None, &["--help"]));
    assert_success(&top);
    let text = stdout(&top);
    for name in [
        "init",
        "schema",
        "validate",
        "preview",
        "sweep",
        "erase",
        "holds",
        "runs",
        "coverage",
        "schedule",
        "demo",
        "worker",
        "verify",
        "report",
        "verify-report",
        "certificate",
    ] {
        assert!(
            text.contains(&format!("  {name} ")),
            "{name} missing from --help:\n{text}"
        );
    }
    for code in [
        "0    success",
        "1    error",
        "2    usage error",
        "3    a check failed",
        "130  interrupted",
    ] {
        assert!(text.contains(code), "{code:?} missing from --help:\n{text}");
    }
    for leaf in LEAVES {
        let mut args: Vec<&str> = leaf.to_vec();
        args.push("--help");
        let out = run(command_in(&dir, None, &args));
        assert_success(&out);
        let help = stdout(&out);
        assert!(
            help.contains("Examples:\n") && help.contains(" cohort "),
            "{leaf:?}:\n{help}"
        );
        assert!(
            help.contains("Exit codes:") && help.contains("3    a check failed"),
            "{leaf:?}:\n{help}"
        );
    }
    for group in [&["schema"][..], &["holds"], &["runs"]] {
        let mut args = group.to_vec();
        args.push("--help");
        assert_success(&run(command_in(&dir, None, &args)));
    }
}

// contract: K1
#[test]
fn usage_errors_exit_2_and_name_the_problem() {
    let dir = std::env::temp_dir();
    for args in [
        &["frobnicate"][..],
        &["preview", "--tenant", "not-a-uuid"],
        &[
            "preview",
            "--tenant",
            "2b0c6e1e-5d4c-4a8e-9a59-1f3c1d0e7a21",
            "--tenantless",
        ],
        &["sweep", "--tenantless", "--now", "yesterday"],
        &["erase", "--tenantless"], // no --subject
        &["holds", "add", "--entity", "users"],
    ] {
        let out = run(command_in(&dir, None, args));
        assert_code(&out, 2);
        assert!(stderr(&out).contains("error"), "{args:?}: {}", stderr(&out));
    }
}
