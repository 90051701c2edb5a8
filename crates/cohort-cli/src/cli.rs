//! The command line: every subcommand, its flags and its `--help`.

use std::path::PathBuf;

use chrono::{DateTime, FixedOffset};
use clap::{ArgAction, Args, Parser, Subcommand};
use uuid::Uuid;

use crate::error::EXIT_CODES_HELP;

/// Cohort: data retention for any PostgreSQL application, driven by a TOML
/// model file.
#[derive(Debug, Parser)]
#[command(
    name = "cohort",
    version,
    about = "Data retention for PostgreSQL: preview, sweep, erase, legal holds and an audit ledger, driven by a TOML model file",
    after_help = concat!(
        "Examples:\n",
        "  cohort demo                               # the whole story on a throwaway database\n",
        "  cohort init                               # write cohort.toml and cohort-model.toml\n",
        "  cohort schema migrate                     # install Cohort's tables (only when asked)\n",
        "  cohort validate                           # check the model against the live database\n",
        "  cohort preview --tenant 2b0c…             # what a sweep would do\n",
        "  cohort sweep --tenant 2b0c…               # do it, with progress; Ctrl-C cancels cleanly\n",
        "\n",
        "Settings come from cohort.toml (or --config) and COHORT_* environment variables\n",
        "(the environment wins); the database from --database-url, else DATABASE_URL,\n",
        "else database_url in the settings. Passwords are never printed.\n",
        "\n",
        "Exit codes:\n",
        "  0    success\n",
        "  1    error (database, settings or model file, a run that ended Failed or PartiallyFailed,\n",
        "       a worker occurrence with a failed pass)\n",
        "  2    usage error (unknown command or flag, malformed value)\n",
        "  3    a check failed (schema check: not ready; validate: problems found;\n",
        "       coverage --fail-on-unclassified: unclassified tables;\n",
        "       verify: the ledger's chain is broken; verify-report: the signature does not verify)\n",
        "  130  interrupted by Ctrl-C (the run ended Cancelled; a second Ctrl-C exits at once)"
    )
)]
pub(crate) struct Cli {
    /// Options every subcommand takes.
    #[command(flatten)]
    pub(crate) global: Global,
    /// What to do.
    #[command(subcommand)]
    pub(crate) command: Command,
}

/// Options every subcommand takes.
#[derive(Debug, Args)]
#[command(next_help_heading = "Global options")]
pub(crate) struct Global {
    /// The settings file [default: cohort.toml, when it exists].
    #[arg(long, global = true, value_name = "FILE")]
    pub(crate) config: Option<PathBuf>,
    /// The model file [default: `model` in the settings, else cohort-model.toml].
    #[arg(long, global = true, value_name = "FILE")]
    pub(crate) model: Option<PathBuf>,
    /// The database [default: DATABASE_URL, else `database_url` in the settings].
    #[arg(long, global = true, value_name = "URL")]
    pub(crate) database_url: Option<String>,
    /// Print JSON on stdout instead of tables (stable field names, see docs/cli.md).
    #[arg(long, global = true)]
    pub(crate) json: bool,
    /// More log output on stderr (-v: info, -vv: debug).
    #[arg(short, long, global = true, action = ArgAction::Count)]
    pub(crate) verbose: u8,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Write a starter cohort.toml and model file in the current directory.
    #[command(after_help = after("  cohort init\n  cohort init --model retention/model.toml --force"))]
    Init(InitArgs),
    /// Cohort's own tables: print, check or apply the migrations.
    #[command(subcommand)]
    Schema(SchemaCommand),
    /// Check the model file, then the model against the live database.
    #[command(after_help = after(
        "  cohort validate\n  cohort validate --offline          # the file only, no database\n  cohort validate --json"
    ))]
    Validate(ValidateArgs),
    /// Count what a sweep would change, per retained table; changes nothing.
    #[command(after_help = after(
        "  cohort preview --tenant 2b0c6e1e-5d4c-4a8e-9a59-1f3c1d0e7a21\n  cohort preview --tenantless --now 2026-01-01T00:00:00Z --json"
    ))]
    Preview(ScopeArgs),
    /// The retention backlog: rows past their cutoff still there, how far
    /// past, and why. Exit 3 when --max-overdue-days is exceeded.
    #[command(after_help = after("  cohort status --tenant 2b0c6e1e-5d4c-4a8e-9a59-1f3c1d0e7a21\n  cohort status --tenantless --max-overdue-days 2 --json"))]
    Status(StatusArgs),
    /// Apply each category's rule to the rows old enough, in committed batches.
    #[command(after_help = after(
        "  cohort sweep --tenant 2b0c6e1e-5d4c-4a8e-9a59-1f3c1d0e7a21\n  cohort sweep --tenant 2b0c6e1e-5d4c-4a8e-9a59-1f3c1d0e7a21 --dry-run\n\nProgress per table (rows done, rows/s) on a terminal, log lines otherwise.\nCtrl-C stops after the current batch (the run ends Cancelled); a second Ctrl-C exits at once."
    ))]
    Sweep(SweepArgs),
    /// Erase one data subject's rows in a tenant (right to erasure).
    #[command(after_help = after(
        "  cohort erase --tenant 2b0c6e1e-5d4c-4a8e-9a59-1f3c1d0e7a21 --subject 9f1c0d4e-4d7e-4a59-8f0b-3f2b1c0d9e8a --dry-run\n  cohort erase --tenant 2b0c6e1e-5d4c-4a8e-9a59-1f3c1d0e7a21 --subject ann@example.org"
    ))]
    Erase(EraseArgs),
    /// Legal holds: add, list, remove, prune.
    #[command(subcommand)]
    Holds(HoldsCommand),
    /// Matter holds: a data subject, or a whole table of a tenant (within an
    /// anchor window), on hold, rows written later included.
    #[command(subcommand)]
    Matters(MattersCommand),
    /// Disposition review: the batches sweeps froze for review; approve,
    /// reject or extend them.
    #[command(subcommand)]
    Disposition(DispositionCommand),
    /// Events of event-based retention ("7 years after account-closed"):
    /// record, list, withdraw.
    #[command(subcommand)]
    Events(EventsCommand),
    /// The erasure register: write it, or replay it after a restore.
    #[command(subcommand)]
    Erasures(ErasuresCommand),
    /// Data subjects: export every row held about one (an access request).
    #[command(subcommand)]
    Subject(SubjectCommand),
    /// The audit ledger: list runs, show one.
    #[command(subcommand)]
    Runs(RunsCommand),
    /// Classify every table of the database: retained, exempt or unclassified.
    #[command(after_help = after(
        "  cohort coverage\n  cohort coverage --fail-on-unclassified     # a CI gate: exit 3 when a table is unclassified"
    ))]
    Coverage(CoverageArgs),
    /// Write the retention schedule (Markdown) from the model and its rules.
    #[command(after_help = after("  cohort schedule > docs/retention-schedule.md\n  cohort schedule --output schedule.md"))]
    Schedule(ScheduleArgs),
    /// Walk preview, hold, sweep, erasure and the ledger on a throwaway database.
    #[command(after_help = after(
        "  cargo run -p cohort-cli -- demo\n  cohort demo --keep              # keep the database to look around\n\nUses DATABASE_URL (a server where it may create databases), else a server on\n127.0.0.1:5432, else starts a private throwaway cluster with initdb/pg_ctl."
    ))]
    Demo(DemoArgs),
    /// Sweep on a cron schedule, once across replicas (the scheduled worker).
    #[command(after_help = after(
        "  cohort worker                                   # runs until SIGTERM or Ctrl-C\n  cohort worker --tenant 2b0c6e1e-5d4c-4a8e-9a59-1f3c1d0e7a21 --tenant 7d1e…\n  cohort worker --once --at 2026-12-01T02:00:00Z --json   # one occurrence, then exit\n\nThe schedule, time zone, dry-run flag, kill switch and tenants come from the\n[worker] section of cohort.toml (COHORT_WORKER__SCHEDULE, ...); flags win.\nSIGTERM or Ctrl-C stops after the current batch (the run ends Cancelled) and\nthe long-running worker exits 0; a second Ctrl-C exits at once."
    ))]
    Worker(WorkerArgs),
    /// Walk the audit ledger's hash chain and name every row changed, deleted or out of order.
    #[command(after_help = after(
        "  cohort verify\n  cohort verify --json     # a CI or cron check: exit 3 when the chain is broken"
    ))]
    Verify,
    /// Write the auditor's report (one HTML file: the chain's state and how to check its head, retained types
    /// and exempt tables, rules in force, runs, erasures, failures, holds and matters, charts), optionally signed.
    #[command(after_help = after(
        "  cohort report --output retention-report.html\n  cohort report --from 2026-01-01T00:00:00Z --to 2027-01-01T00:00:00Z -o 2026.html\n  cohort report --sign signing.key -o 2026.html          # also writes 2026.html.sig\n\nThe model file's exempt tables are listed when the file is there (--no-model: not read).\nLists show at most --list-limit rows each and say how many more there are."
    ))]
    Report(ReportArgs),
    /// Check a report's detached signature (`<file>.sig`) against the host's public key.
    #[command(after_help = after(
        "  cohort verify-report 2026.html --public-key 3b6a27bcceb6a42d62a3a8d02a6f0d73653215771de243a63ac048a18b59da29\n  cohort verify-report 2026.html --signature signatures/2026.sig --public-key host.pub\n\nNeeds no database. Exit 0 when the signature is the key's over the file as it is, 3 when not."
    ))]
    VerifyReport(VerifyReportArgs),
    /// Print the certificate of an erasure run (JSON), optionally signed.
    #[command(after_help = after(
        "  COHORT_CERTIFICATE_KEY=... cohort certificate 0b6a3c9e-1f2d-4e5f-8a9b-0c1d2e3f4a5b --subject ann@example.org\n  cohort certificate latest --subject ann@example.org --signing-key signing.key -o cert.json\n\nThe subject appears only as HMAC-SHA256(certificate_key, subject) unless\n--subject-in-clear; the key comes from `certificate_key` in the settings\n(better: COHORT_CERTIFICATE_KEY) and is never printed."
    ))]
    Certificate(CertificateArgs),
}

/// The exit-code table after each subcommand's examples.
fn after(examples: &str) -> String {
    format!("Examples:\n{examples}\n\n{EXIT_CODES_HELP}")
}

/// `init`.
#[derive(Debug, Args)]
pub(crate) struct InitArgs {
    /// Overwrite files that exist.
    #[arg(long)]
    pub(crate) force: bool,
}

/// `validate`.
#[derive(Debug, Args)]
pub(crate) struct ValidateArgs {
    /// Check the file only; do not connect to the database.
    #[arg(long)]
    pub(crate) offline: bool,
}

/// `schema ...`.
#[derive(Debug, Subcommand)]
pub(crate) enum SchemaCommand {
    /// Print Cohort's migrations (SQL) for your migration tool.
    #[command(after_help = after("  cohort schema sql > migrations/cohort.sql\n  COHORT_SCHEMA=retention cohort schema sql --json"))]
    Sql,
    /// Check that Cohort's tables are installed and current (readiness).
    #[command(after_help = after("  cohort schema check\n  cohort schema check --json"))]
    Check,
    /// Apply the migrations the database lacks. Nothing else changes the schema.
    #[command(after_help = after("  cohort schema migrate"))]
    Migrate,
    /// Print the SQL that installs the guards of the model's guarded tables
    /// (`guard = true`): the database then refuses, for any role, a DELETE
    /// or a disallowed UPDATE of a held row. Apply it as the tables' owner.
    #[command(after_help = after("  cohort schema guards > migrations/cohort_guards.sql\n  cohort schema guards | psql -1 \"$DATABASE_URL\""))]
    Guards,
    /// Print the SQL that creates the archive tables of the model's tables
    /// whose rules may archive (`archive = "<schema>"`): each table's
    /// columns, Cohort's three, and a unique key on the record id.
    #[command(after_help = after("  cohort schema archive > migrations/cohort_archive.sql\n  cohort schema archive | psql -1 \"$DATABASE_URL\""))]
    Archive,
}

/// Which rows: one tenant or the tenantless tables, at which time.
#[derive(Debug, Args)]
pub(crate) struct ScopeArgs {
    /// The tenant (its id in the tables' tenant columns).
    /// (Without --tenant or --tenantless the command asks which, unless
    /// every retained table is tenantless: then --tenantless is the default.)
    #[arg(long, value_name = "UUID", conflicts_with = "tenantless")]
    pub(crate) tenant: Option<Uuid>,
    /// The tables marked tenantless instead of a tenant's rows.
    #[arg(long)]
    pub(crate) tenantless: bool,
    /// The tenant's jurisdiction, for rules with per-jurisdiction overrides.
    #[arg(long, value_name = "CODE", requires = "tenant")]
    pub(crate) jurisdiction: Option<String>,
    /// A tag of the tenant, for rules with per-tag overrides (repeatable).
    #[arg(long = "tag", value_name = "TAG", requires = "tenant")]
    pub(crate) tags: Vec<String>,
    /// The logical time, RFC 3339 [default: now].
    #[arg(long, value_name = "TIME", value_parser = parse_time)]
    pub(crate) now: Option<DateTime<FixedOffset>>,
}

/// `sweep`.
#[derive(Debug, Args)]
pub(crate) struct SweepArgs {
    /// Which rows.
    #[command(flatten)]
    pub(crate) scope: ScopeArgs,
    /// Count and write the ledger, but change no row.
    #[arg(long)]
    pub(crate) dry_run: bool,
    /// End with VACUUM (ANALYZE) of each table the sweep changed at least
    /// ROWS rows in (the table's owner may; other roles get a report).
    #[arg(long, value_name = "ROWS")]
    pub(crate) vacuum: Option<u64>,
}

/// `status`.
#[derive(Debug, Args)]
pub(crate) struct StatusArgs {
    /// Which rows.
    #[command(flatten)]
    pub(crate) scope: ScopeArgs,
    /// Exit 3 when a row has been past its cutoff for longer than this
    /// many days (a gate for deploys, or a page).
    #[arg(long, value_name = "DAYS")]
    pub(crate) max_overdue_days: Option<u32>,
}

/// `erase`.
#[derive(Debug, Args)]
pub(crate) struct EraseArgs {
    /// Which rows.
    #[command(flatten)]
    pub(crate) scope: ScopeArgs,
    /// The data subject, as the text of the value in the erasure-subject columns.
    #[arg(long, value_name = "ID")]
    pub(crate) subject: String,
    /// Count and write the ledger, but change no row.
    #[arg(long)]
    pub(crate) dry_run: bool,
    /// Accept soft-delete as erasure for categories that resolve to it.
    #[arg(long)]
    pub(crate) allow_soft_delete: bool,
    /// End with VACUUM (ANALYZE) of each table the erasure changed, so the
    /// erased rows' old versions leave the table's files (the table's owner
    /// may; other roles get a report).
    #[arg(long)]
    pub(crate) vacuum: bool,
    /// Append the erasure to this register file (JSON Lines, the subject
    /// only as its keyed hash) once it settled: keep it outside the
    /// database, to replay after a restore (`cohort erasures replay`).
    #[arg(long, value_name = "FILE")]
    pub(crate) register: Option<PathBuf>,
}

/// `holds ...`.
#[derive(Debug, Subcommand)]
pub(crate) enum HoldsCommand {
    /// Put a legal hold on one row.
    #[command(after_help = after(
        "  cohort holds add --entity users --record 42 --tenant 2b0c6e1e-5d4c-4a8e-9a59-1f3c1d0e7a21 \\\n      --reason \"Litigation hold - case #12345\" --expires 2027-01-01T00:00:00Z"
    ))]
    Add(HoldsAddArgs),
    /// List the holds active at a time (default: now).
    #[command(after_help = after("  cohort holds list\n  cohort holds list --entity users --json"))]
    List(HoldsListArgs),
    /// Remove a hold (it stops protecting from then on).
    #[command(after_help = after("  cohort holds remove 7d1f0f5e-0c3b-4d8e-9a1b-2c3d4e5f6a7b"))]
    Remove(HoldsRemoveArgs),
    /// Delete holds inactive for longer than `inactive_hold_retention`.
    #[command(after_help = after("  COHORT_INACTIVE_HOLD_RETENTION=31536000 cohort holds prune"))]
    Prune,
}

/// `holds add`.
#[derive(Debug, Args)]
pub(crate) struct HoldsAddArgs {
    /// The retained table: its name in the model, or its retained-entity id.
    #[arg(long, value_name = "NAME")]
    pub(crate) entity: String,
    /// The row's record id, as text.
    #[arg(long, value_name = "ID")]
    pub(crate) record: String,
    /// The row's tenant (not for tenantless tables).
    #[arg(long, value_name = "UUID")]
    pub(crate) tenant: Option<Uuid>,
    /// Why the row is held.
    #[arg(long)]
    pub(crate) reason: String,
    /// When the hold stops protecting, RFC 3339 [default: never, until removed].
    #[arg(long, value_name = "TIME", value_parser = parse_time)]
    pub(crate) expires: Option<DateTime<FixedOffset>>,
    /// The hold's id [default: a new random UUID].
    #[arg(long, value_name = "UUID")]
    pub(crate) hold_id: Option<Uuid>,
}

/// `holds list`.
#[derive(Debug, Args)]
pub(crate) struct HoldsListArgs {
    /// Only holds of this retained table (name or id).
    #[arg(long, value_name = "NAME")]
    pub(crate) entity: Option<String>,
    /// Only holds of this tenant.
    #[arg(long, value_name = "UUID")]
    pub(crate) tenant: Option<Uuid>,
    /// Active at this time, RFC 3339 [default: now].
    #[arg(long, value_name = "TIME", value_parser = parse_time, conflicts_with = "all")]
    pub(crate) as_of: Option<DateTime<FixedOffset>>,
    /// Every hold, active or not (expired, removed, not yet started).
    #[arg(long)]
    pub(crate) all: bool,
}

/// `holds remove`.
#[derive(Debug, Args)]
pub(crate) struct HoldsRemoveArgs {
    /// The hold's id.
    pub(crate) hold_id: Uuid,
    /// When it stops protecting, RFC 3339 [default: now].
    #[arg(long, value_name = "TIME", value_parser = parse_time)]
    pub(crate) at: Option<DateTime<FixedOffset>>,
}

/// `erasures ...`.
#[derive(Debug, Subcommand)]
pub(crate) enum ErasuresCommand {
    /// Write the register of the erasures that settled since a time (JSON
    /// Lines: run, tenant, subject hash, time), to keep outside the database.
    #[command(after_help = after(
        "  cohort erasures register -o /backup/erasures.jsonl\n  cohort erasures register --since 2026-11-24T00:00:00Z >> erasures.jsonl"
    ))]
    Register(ErasuresRegisterArgs),
    /// After a restore: erase again every subject of the register erased
    /// since a time, taking the subjects from your own list of requests.
    #[command(after_help = after(
        "  cohort erasures replay --register erasures.jsonl --subjects requests.jsonl --since 2026-11-24T00:00:00Z\n\nThe register holds only HMAC-SHA256(certificate_key, subject): --subjects is your\nown list of erasure requests, one JSON object per line, {\"tenant\": \"<uuid>\" or\nnull, \"subject\": \"...\"}. A replay is an erasure run (certify it with `cohort\ncertificate`); a second replay changes nothing. Nothing to replay: exit 0."
    ))]
    Replay(ErasuresReplayArgs),
}

/// `erasures register`.
#[derive(Debug, Args)]
pub(crate) struct ErasuresRegisterArgs {
    /// Erasures that settled at or after this time, RFC 3339 [default: all].
    #[arg(long, value_name = "TIME", value_parser = parse_time)]
    pub(crate) since: Option<DateTime<FixedOffset>>,
    /// Write to this file instead of stdout.
    #[arg(long, short, value_name = "FILE")]
    pub(crate) output: Option<PathBuf>,
}

/// `erasures replay`.
#[derive(Debug, Args)]
pub(crate) struct ErasuresReplayArgs {
    /// The register, as `cohort erasures register` or `erase --register` wrote it.
    #[arg(long, value_name = "FILE")]
    pub(crate) register: PathBuf,
    /// Your own list of erasure requests: one `{"tenant": .., "subject": ..}` per line.
    #[arg(long, value_name = "FILE")]
    pub(crate) subjects: PathBuf,
    /// Replay the erasures that settled at or after this time (the backup's), RFC 3339.
    #[arg(long, value_name = "TIME", value_parser = parse_time)]
    pub(crate) since: DateTime<FixedOffset>,
}

/// `subject ...`.
#[derive(Debug, Subcommand)]
pub(crate) enum SubjectCommand {
    /// Export every row an erasure of the subject would match, across the
    /// retained tables of the tenant, held rows included and marked.
    #[command(after_help = after(
        "  cohort subject export --tenant 2b0c6e1e-5d4c-4a8e-9a59-1f3c1d0e7a21 --subject ann@example.org \\\n      --requested-by \"ticket DSAR-1042\" -o ann.jsonl\n  cohort subject export --tenant 2b0c6e1e-5d4c-4a8e-9a59-1f3c1d0e7a21 --subject 42 --requested-by dpo --format csv > 42.csv\n\nJSON Lines: one object per row ({type, table, record_id, held, row}); CSV: one\nline per column of each row (type,table,record_id,held,column,value). The export\nis recorded in the ledger (who asked, when, counts per table) with the subject\nonly as HMAC-SHA256(certificate_key, subject): certificate_key must be set."
    ))]
    Export(SubjectExportArgs),
}

/// `subject export`.
#[derive(Debug, Args)]
pub(crate) struct SubjectExportArgs {
    /// Which rows.
    #[command(flatten)]
    pub(crate) scope: ScopeArgs,
    /// The data subject, as the text of the value in the erasure-subject columns.
    #[arg(long, value_name = "ID")]
    pub(crate) subject: String,
    /// Who asked for the export (a person, a ticket): recorded with it.
    #[arg(long, value_name = "WHO")]
    pub(crate) requested_by: String,
    /// The format.
    #[arg(long, value_enum, default_value = "jsonl")]
    pub(crate) format: ExportFormatArg,
    /// Write to this file instead of stdout.
    #[arg(long, short, value_name = "FILE")]
    pub(crate) output: Option<PathBuf>,
}

/// `matters ...`.
#[derive(Debug, Subcommand)]
pub(crate) enum MattersCommand {
    /// Put a matter on hold: a data subject (`--subject`), or a table of a
    /// tenant (`--entity`, optionally `--from`/`--to` on its anchor).
    #[command(after_help = after(
        "  cohort matters add --subject customer-4711 --tenant 2b0c6e1e-5d4c-4a8e-9a59-1f3c1d0e7a21 \\\n      --reason \"Litigation - case #12345\" --owner legal@example.com\n  cohort matters add --entity invoices --tenant 2b0c6e1e-5d4c-4a8e-9a59-1f3c1d0e7a21 \\\n      --from 2025-01-01T00:00:00Z --to 2026-01-01T00:00:00Z --reason \"Tax audit FY2025\" --owner cfo@example.com"
    ))]
    Add(MattersAddArgs),
    /// List the matters active now (`--all`: released and expired too).
    #[command(after_help = after("  cohort matters list\n  cohort matters list --all --json"))]
    List(MattersListArgs),
    /// One matter, and how many rows of each table it protects now.
    #[command(after_help = after("  cohort matters show 7d1f0f5e-0c3b-4d8e-9a1b-2c3d4e5f6a7b"))]
    Show(MatterIdArgs),
    /// Move a matter's expiry later (`--no-expiry`: until released).
    #[command(after_help = after("  cohort matters extend 7d1f0f5e-0c3b-4d8e-9a1b-2c3d4e5f6a7b --expires 2028-01-01T00:00:00Z"))]
    Extend(MattersExtendArgs),
    /// Release a matter: everything it covered stops being protected by it.
    #[command(after_help = after("  cohort matters release 7d1f0f5e-0c3b-4d8e-9a1b-2c3d4e5f6a7b"))]
    Release(MatterIdArgs),
}

/// `matters add`.
#[derive(Debug, Args)]
pub(crate) struct MattersAddArgs {
    /// The data subject: every row whose erasure-subject column equals it.
    #[arg(long, value_name = "SUBJECT")]
    pub(crate) subject: Option<String>,
    /// With `--subject`: only these tables (repeat it) [default: every
    /// table of the tenant]. Without: the table the matter covers.
    #[arg(long = "entity", value_name = "NAME")]
    pub(crate) entities: Vec<String>,
    /// The tenant whose rows it covers (not for tenantless tables).
    #[arg(long, value_name = "UUID")]
    pub(crate) tenant: Option<Uuid>,
    /// A table matter: only rows whose anchor is at or after this, RFC 3339.
    #[arg(long, value_name = "TIME", value_parser = parse_time, conflicts_with = "subject")]
    pub(crate) from: Option<DateTime<FixedOffset>>,
    /// A table matter: only rows whose anchor is before this, RFC 3339.
    #[arg(long, value_name = "TIME", value_parser = parse_time, conflicts_with = "subject")]
    pub(crate) to: Option<DateTime<FixedOffset>>,
    /// Why (a citation).
    #[arg(long)]
    pub(crate) reason: String,
    /// Who asked for it.
    #[arg(long)]
    pub(crate) owner: String,
    /// When it stops protecting by itself, RFC 3339 [default: until released].
    #[arg(long, value_name = "TIME", value_parser = parse_time)]
    pub(crate) expires: Option<DateTime<FixedOffset>>,
    /// The matter's id [default: a new random UUID].
    #[arg(long, value_name = "UUID")]
    pub(crate) id: Option<Uuid>,
}

/// `matters list`.
#[derive(Debug, Args)]
pub(crate) struct MattersListArgs {
    /// Every matter, released and expired ones too.
    #[arg(long)]
    pub(crate) all: bool,
}

/// A matter's id.
#[derive(Debug, Args)]
pub(crate) struct MatterIdArgs {
    /// The matter's id.
    pub(crate) matter_id: Uuid,
}

/// `matters extend`.
#[derive(Debug, Args)]
pub(crate) struct MattersExtendArgs {
    /// The matter's id.
    pub(crate) matter_id: Uuid,
    /// The new expiry, RFC 3339 (not earlier than the current one).
    #[arg(long, value_name = "TIME", value_parser = parse_time, required_unless_present = "no_expiry")]
    pub(crate) expires: Option<DateTime<FixedOffset>>,
    /// No expiry: until released.
    #[arg(long, conflicts_with = "expires")]
    pub(crate) no_expiry: bool,
}

/// `events ...`.
#[derive(Debug, Subcommand)]
pub(crate) enum EventsCommand {
    /// Record that an event happened to a subject: rows keyed by it start
    /// aging under every rule counting from the event's type.
    #[command(after_help = after(
        "  cohort events add --type account-closed --subject customer-4711 \\\n      --tenant 2b0c6e1e-5d4c-4a8e-9a59-1f3c1d0e7a21 --at 2026-03-31T17:00:00Z --by crm-sync"
    ))]
    Add(EventsAddArgs),
    /// The events recorded (`--all`: withdrawn ones too), latest first.
    #[command(after_help = after("  cohort events list --subject customer-4711\n  cohort events list --type account-closed --all --json"))]
    List(EventsListArgs),
    /// Withdraw an event recorded by mistake: from the next sweep on it
    /// counts no more (a correction is a withdrawal and a new event).
    #[command(after_help = after("  cohort events withdraw 4c1d2e3f-... --by ann --reason \"the account was reopened\""))]
    Withdraw(EventsWithdrawArgs),
}

/// `events add`.
#[derive(Debug, Args)]
pub(crate) struct EventsAddArgs {
    /// The event's type (a rule's `after_event`).
    #[arg(long = "type", value_name = "TYPE")]
    pub(crate) event_type: String,
    /// The subject it happened to: the value of the tables' `event_key` column.
    #[arg(long, value_name = "KEY")]
    pub(crate) subject: String,
    /// The tenant it happened in (omit for tenantless tables).
    #[arg(long, value_name = "UUID")]
    pub(crate) tenant: Option<Uuid>,
    /// When it happened, RFC 3339 [default: now].
    #[arg(long, value_name = "TIME", value_parser = parse_time)]
    pub(crate) at: Option<DateTime<FixedOffset>>,
    /// Who records it.
    #[arg(long, value_name = "WHO")]
    pub(crate) by: String,
}

/// `events list`.
#[derive(Debug, Args)]
pub(crate) struct EventsListArgs {
    /// Of this type only.
    #[arg(long = "type", value_name = "TYPE")]
    pub(crate) event_type: Option<String>,
    /// For this subject key only.
    #[arg(long, value_name = "KEY")]
    pub(crate) subject: Option<String>,
    /// In this tenant only.
    #[arg(long, value_name = "UUID")]
    pub(crate) tenant: Option<Uuid>,
    /// Withdrawn events too.
    #[arg(long)]
    pub(crate) all: bool,
    /// At most this many [default: 100].
    #[arg(long, default_value_t = 100)]
    pub(crate) limit: u32,
}

/// `events withdraw`.
#[derive(Debug, Args)]
pub(crate) struct EventsWithdrawArgs {
    /// The event's id.
    pub(crate) event_id: Uuid,
    /// Who withdraws it.
    #[arg(long, value_name = "WHO")]
    pub(crate) by: String,
    /// Why.
    #[arg(long)]
    pub(crate) reason: String,
}

/// `disposition ...`.
#[derive(Debug, Subcommand)]
pub(crate) enum DispositionCommand {
    /// The batches waiting for a decision or a sweep (`--all`: every batch).
    #[command(after_help = after("  cohort disposition list
  cohort disposition list --all --json"))]
    List(DispositionListArgs),
    /// One batch: its rule, every decision on it, and some of its record ids.
    #[command(after_help = after("  cohort disposition show 5b2e9c1a
  cohort disposition show 5b2e9c1a-... --rows 100 --json"))]
    Show(DispositionShowArgs),
    /// Approve a batch: the next sweep changes its rows that are still
    /// eligible and not held (a batch needing two approvers needs two names).
    #[command(after_help = after("  cohort disposition approve 5b2e9c1a --by \"Ann Archivist\""))]
    Approve(DispositionApproveArgs),
    /// Reject a batch, with a reason: its rows are kept and not offered
    /// again until the rule changes or the re-offer period passes.
    #[command(after_help = after("  cohort disposition reject 5b2e9c1a --by bob --reason \"audit 2026-17 still open\""))]
    Reject(DispositionRejectArgs),
    /// Keep a batch's rows until a date; then they are offered again.
    #[command(after_help = after("  cohort disposition extend 5b2e9c1a --by bob --until 2027-06-30T00:00:00Z"))]
    Extend(DispositionExtendArgs),
}

/// `disposition list`.
#[derive(Debug, Args)]
pub(crate) struct DispositionListArgs {
    /// Every batch: rejected, extended, voided and carried out ones too.
    #[arg(long)]
    pub(crate) all: bool,
}

/// `disposition show`.
#[derive(Debug, Args)]
pub(crate) struct DispositionShowArgs {
    /// The batch's id, or its first digits (as `list` shows them).
    pub(crate) batch: String,
    /// How many of its frozen record ids to list.
    #[arg(long, default_value_t = 20, value_name = "N")]
    pub(crate) rows: u32,
}

/// `disposition approve`.
#[derive(Debug, Args)]
pub(crate) struct DispositionApproveArgs {
    /// The batch's id, or its first digits.
    pub(crate) batch: String,
    /// Who approves (recorded in the evidence chain).
    #[arg(long, value_name = "NAME")]
    pub(crate) by: String,
}

/// `disposition reject`.
#[derive(Debug, Args)]
pub(crate) struct DispositionRejectArgs {
    /// The batch's id, or its first digits.
    pub(crate) batch: String,
    /// Who rejects (recorded in the evidence chain).
    #[arg(long, value_name = "NAME")]
    pub(crate) by: String,
    /// Why (recorded in the evidence chain).
    #[arg(long)]
    pub(crate) reason: String,
}

/// `disposition extend`.
#[derive(Debug, Args)]
pub(crate) struct DispositionExtendArgs {
    /// The batch's id, or its first digits.
    pub(crate) batch: String,
    /// Who extends (recorded in the evidence chain).
    #[arg(long, value_name = "NAME")]
    pub(crate) by: String,
    /// Keep the rows until this time, RFC 3339 (later than now).
    #[arg(long, value_name = "TIME", value_parser = parse_time)]
    pub(crate) until: DateTime<FixedOffset>,
}

/// `runs ...`.
#[derive(Debug, Subcommand)]
pub(crate) enum RunsCommand {
    /// The latest runs, newest first.
    #[command(after_help = after("  cohort runs list\n  cohort runs list --status Cancelled --limit 5 --json"))]
    List(RunsListArgs),
    /// One run: its status and one summary per table.
    #[command(after_help = after("  cohort runs show 0b6a3c9e-1f2d-4e5f-8a9b-0c1d2e3f4a5b\n  cohort runs show latest --rows 20"))]
    Show(RunsShowArgs),
    /// Export the ledger (runs, summaries or row details) as JSON Lines or CSV.
    #[command(after_help = after(
        "  cohort runs export --records row-details --format csv -o details.csv\n  cohort runs export --from 2026-01-01T00:00:00Z --to 2026-02-01T00:00:00Z > runs.jsonl\n\nAn export holds the runs that started in [--from, --to) and their summaries\nor row details, each with its chain columns so an auditor can re-verify it.\nThe captured payloads of row handlers are never exported (their digest is)."
    ))]
    Export(RunsExportArgs),
    /// Settle the runs whose owner is gone (its lease expired): they end
    /// `Failed` with the batches they committed counted. A live run is
    /// never settled.
    #[command(after_help = after("  cohort runs settle
  cohort runs settle --json"))]
    Settle,
}

/// `runs export`.
#[derive(Debug, Args)]
pub(crate) struct RunsExportArgs {
    /// Which records.
    #[arg(long, value_enum, default_value = "runs")]
    pub(crate) records: ExportRecordsArg,
    /// The format.
    #[arg(long, value_enum, default_value = "jsonl")]
    pub(crate) format: ExportFormatArg,
    /// Runs that started at or after this time, RFC 3339 [default: the beginning].
    #[arg(long, value_name = "TIME", value_parser = parse_time)]
    pub(crate) from: Option<DateTime<FixedOffset>>,
    /// Runs that started before this time, RFC 3339 [default: no end].
    #[arg(long, value_name = "TIME", value_parser = parse_time)]
    pub(crate) to: Option<DateTime<FixedOffset>>,
    /// Write to this file instead of stdout.
    #[arg(long, short, value_name = "FILE")]
    pub(crate) output: Option<PathBuf>,
}

/// Which ledger records `runs export` writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum ExportRecordsArg {
    /// `sweep_run` rows.
    Runs,
    /// `sweep_run_entity_summary` rows.
    Summaries,
    /// `sweep_run_row_detail` rows.
    RowDetails,
    /// `retention_disposition_decisions` rows: the decisions on disposition
    /// batches taken in [--from, --to).
    Decisions,
}

/// The format of `runs export`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum ExportFormatArg {
    /// JSON Lines: one object per line.
    Jsonl,
    /// RFC 4180 CSV with a header line.
    Csv,
}

/// `worker`.
#[derive(Debug, Args)]
pub(crate) struct WorkerArgs {
    /// Sweep this tenant at each occurrence (repeatable; replaces
    /// `worker.tenants` of the settings). With none, only the tenantless
    /// tables are swept.
    #[arg(long = "tenant", value_name = "UUID")]
    pub(crate) tenants: Vec<Uuid>,
    /// Count and write the ledger, but change no row (overrides `worker.dry_run`).
    #[arg(long)]
    pub(crate) dry_run: bool,
    /// Sweep one occurrence and exit, instead of running on the schedule.
    #[arg(long)]
    pub(crate) once: bool,
    /// With --once: the occurrence's time, RFC 3339 [default: now].
    #[arg(long, value_name = "TIME", value_parser = parse_time, requires = "once")]
    pub(crate) at: Option<DateTime<FixedOffset>>,
    /// Serve `/metrics` (Prometheus text format) and `/healthz` on this
    /// address, e.g. 127.0.0.1:9464 (docs/operating.md, "Metrics").
    #[arg(long, value_name = "ADDR", env = "COHORT_METRICS_ADDR")]
    pub(crate) metrics_addr: Option<std::net::SocketAddr>,
}

/// `report`.
#[derive(Debug, Args)]
pub(crate) struct ReportArgs {
    /// Runs that started at or after this time, RFC 3339 [default: the beginning].
    #[arg(long, value_name = "TIME", value_parser = parse_time)]
    pub(crate) from: Option<DateTime<FixedOffset>>,
    /// Runs that started before this time, RFC 3339 [default: now].
    #[arg(long, value_name = "TIME", value_parser = parse_time)]
    pub(crate) to: Option<DateTime<FixedOffset>>,
    /// The report's title.
    #[arg(long)]
    pub(crate) title: Option<String>,
    /// Write to this file instead of stdout.
    #[arg(long, short, value_name = "FILE")]
    pub(crate) output: Option<PathBuf>,
    /// Sign the file with the Ed25519 key whose 32-byte seed this file holds, in hex (the certificates'
    /// key): writes a detached signature to `<output>.sig`. Needs --output.
    #[arg(
        long,
        visible_alias = "signing-key",
        value_name = "KEYFILE",
        requires = "output"
    )]
    pub(crate) sign: Option<PathBuf>,
    /// The longest list the report shows (runs, erasures, failed runs, holds, matters).
    #[arg(long, value_name = "N", default_value_t = cohort::evidence::DEFAULT_LIST_LIMIT,
          value_parser = clap::value_parser!(u32).range(1..))]
    pub(crate) list_limit: u32,
    /// Do not read the model file (its exempt tables are then not listed).
    #[arg(long)]
    pub(crate) no_model: bool,
}

/// `verify-report`.
#[derive(Debug, Args)]
pub(crate) struct VerifyReportArgs {
    /// The report file.
    pub(crate) file: PathBuf,
    /// Its signature [default: FILE.sig].
    #[arg(long, value_name = "SIGFILE")]
    pub(crate) signature: Option<PathBuf>,
    /// The host's Ed25519 public key: 64 hex digits, or a file holding them.
    #[arg(long, value_name = "HEX|FILE", required_unless_present = "signing_key")]
    pub(crate) public_key: Option<String>,
    /// Or the signing key's seed file (as `report --sign` takes): its public key is used.
    #[arg(long, value_name = "KEYFILE", conflicts_with = "public_key")]
    pub(crate) signing_key: Option<PathBuf>,
}

/// `certificate`.
#[derive(Debug, Args)]
pub(crate) struct CertificateArgs {
    /// The erasure run's id, or `latest` (the latest settled erasure).
    pub(crate) run: String,
    /// The subject the erasure was for, exactly as it was passed to `erase`.
    #[arg(long, value_name = "ID")]
    pub(crate) subject: String,
    /// Also put the subject in clear.
    #[arg(long)]
    pub(crate) subject_in_clear: bool,
    /// Sign with the Ed25519 key whose 32-byte seed this file holds, in hex.
    #[arg(long, value_name = "FILE")]
    pub(crate) signing_key: Option<PathBuf>,
    /// Write to this file instead of stdout.
    #[arg(long, short, value_name = "FILE")]
    pub(crate) output: Option<PathBuf>,
}

/// `runs list`.
#[derive(Debug, Args)]
pub(crate) struct RunsListArgs {
    /// At most this many runs.
    #[arg(long, default_value_t = 20)]
    pub(crate) limit: i64,
    /// Only runs with this status (Started, Succeeded, PartiallyFailed, Failed, Cancelled).
    #[arg(long)]
    pub(crate) status: Option<String>,
    /// Only runs of this kind (Sweep, Erasure).
    #[arg(long)]
    pub(crate) kind: Option<String>,
    /// Only runs of this tenant (the nil UUID for tenantless runs).
    #[arg(long, value_name = "UUID")]
    pub(crate) tenant: Option<Uuid>,
    /// Every column, ids and times in full (the default fits a terminal:
    /// short ids, times to the second).
    #[arg(long)]
    pub(crate) wide: bool,
    /// `wide` (as --wide) or `json` (as --json), as kubectl spells them.
    #[arg(short = 'o', long = "output", value_enum, value_name = "FORMAT")]
    pub(crate) output: Option<Output>,
}

/// `-o FORMAT` of the runs tables.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Output {
    /// Every column, in full.
    Wide,
    /// JSON.
    Json,
}

/// `runs show`.
#[derive(Debug, Args)]
pub(crate) struct RunsShowArgs {
    /// The run's id (or a unique prefix of it, as `runs list` shows), or `latest`.
    pub(crate) run: String,
    /// Also list up to this many per-row audit records.
    #[arg(long, default_value_t = 0, value_name = "N")]
    pub(crate) rows: i64,
    /// Every column of the summaries (category, NULL anchors, period, the
    /// rule's source and reason, errors), times in full.
    #[arg(long)]
    pub(crate) wide: bool,
    /// `wide` (as --wide) or `json` (as --json), as kubectl spells them.
    #[arg(short = 'o', long = "output", value_enum, value_name = "FORMAT")]
    pub(crate) output: Option<Output>,
}

/// `coverage`.
#[derive(Debug, Args)]
pub(crate) struct CoverageArgs {
    /// Exit with code 3 when any table is unclassified (a CI gate).
    #[arg(long)]
    pub(crate) fail_on_unclassified: bool,
}

/// `schedule`.
#[derive(Debug, Args)]
pub(crate) struct ScheduleArgs {
    /// Write to this file instead of stdout.
    #[arg(long, short, value_name = "FILE")]
    pub(crate) output: Option<PathBuf>,
    /// The document's title.
    #[arg(long, default_value = "Retention schedule")]
    pub(crate) title: String,
}

/// `demo`.
#[derive(Debug, Args)]
pub(crate) struct DemoArgs {
    /// Keep the demo database instead of dropping it (its URL is printed).
    #[arg(long)]
    pub(crate) keep: bool,
}

/// An RFC 3339 time (`2026-01-01T00:00:00Z`, `2026-01-01T02:00:00+02:00`).
fn parse_time(s: &str) -> Result<DateTime<FixedOffset>, String> {
    DateTime::parse_from_rfc3339(s.trim()).map_err(|e| {
        format!("{s:?} is not an RFC 3339 time ({e}); write for example 2026-01-01T00:00:00Z")
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn the_command_line_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn every_subcommand_has_help_with_an_example_and_the_exit_codes() {
        let mut cmd = Cli::command();
        cmd.build();
        let mut stack: Vec<clap::Command> = cmd.get_subcommands().cloned().collect();
        while let Some(mut c) = stack.pop() {
            if c.get_name() == "help" {
                continue;
            }
            let subs: Vec<clap::Command> = c.get_subcommands().cloned().collect();
            if subs.is_empty() {
                let help = c.render_long_help().to_string();
                assert!(help.contains("Examples:"), "{}", c.get_name());
                assert!(help.contains("130"), "{}", c.get_name());
            }
            stack.extend(subs);
        }
    }
}
