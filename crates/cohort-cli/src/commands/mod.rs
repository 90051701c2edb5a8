//! The subcommands, and what they share: settings, the model, the
//! database, the handle.

mod coverage;
mod demo;
mod disposition;
mod events;
mod evidence;
mod holds;
mod init;
mod matters;
mod rows;
mod runs;
mod schedule;
mod schema;
mod status;
mod subject;
mod sweep;
mod validate;
mod worker;

use std::collections::HashMap;
use std::path::PathBuf;

use chrono::{DateTime, Utc};
use cohort::{Cohort, Scope, TenantContext};
use sqlx::PgPool;
use uuid::Uuid;

use crate::cli::{Cli, Command, Global, ScopeArgs};
use crate::error::{CliError, CliResult, code};
use crate::model::{Diagnostics, Model, ParseOptions};
use crate::progress::Progress;
use crate::settings::{self, Settings};

/// What every subcommand gets: the global flags and the settings.
pub(crate) struct Ctx {
    /// The global flags.
    pub(crate) global: Global,
    /// The settings (file and environment).
    pub(crate) settings: Settings,
}

impl Ctx {
    /// Whether to print JSON.
    pub(crate) fn json(&self) -> bool {
        self.global.json
    }

    /// The model file: `--model`, else the settings' `model`.
    pub(crate) fn model_path(&self) -> PathBuf {
        self.global
            .model
            .clone()
            .unwrap_or_else(|| self.settings.model.clone())
    }

    /// Reads and parses the model file, or every mistake in it.
    pub(crate) fn parse_model(&self) -> CliResult<Result<Model, Diagnostics>> {
        let path = self.model_path();
        let text = std::fs::read_to_string(&path).map_err(|e| {
            if e.kind() == std::io::ErrorKind::NotFound {
                CliError::Settings(format!(
                    "the model file {} does not exist; run `cohort init` to write a starter, or point --model (or `model` in cohort.toml) at yours",
                    path.display()
                ))
            } else {
                CliError::io("cannot read", &path, e)
            }
        })?;
        let options = ParseOptions {
            default_table_schema: self.settings.default_table_schema.clone(),
            hash_key_set: self.settings.hash_key.is_some(),
        };
        Ok(crate::model::parse(
            &path.display().to_string(),
            &text,
            &options,
        ))
    }

    /// The model, or an error listing every mistake in it. Warnings go to
    /// stderr.
    pub(crate) fn model(&self) -> CliResult<Model> {
        let model = self.parse_model()?.map_err(CliError::Model)?;
        for w in &model.warnings {
            eprintln!("{w}");
        }
        Ok(model)
    }

    /// A pool on the configured database.
    pub(crate) async fn pool(&self) -> CliResult<PgPool> {
        let flag = self.global.database_url.as_deref();
        let url = self.settings.database_url(flag)?;
        crate::db::connect(&url)
            .await
            .map_err(|e| crate::db::with_login_hint(e, self.settings.database_url_source(flag)))
    }

    /// The handle on `model`, validated against the live catalog, with
    /// `progress` as an observer when given.
    pub(crate) async fn cohort(
        &self,
        pool: &PgPool,
        model: &Model,
        progress: Option<Progress>,
    ) -> CliResult<Cohort> {
        let mut b = crate::model::build::builder(pool, model, &self.settings).await?;
        if let Some(p) = progress {
            b = b.observer(p);
        }
        Ok(b.build().await?)
    }
}

/// Retained-entity ids to the names the model gives them.
pub(crate) fn names(model: &Model) -> HashMap<Uuid, String> {
    let mut m: HashMap<Uuid, String> = model
        .entities
        .iter()
        .map(|e| (e.id, e.name.clone()))
        .collect();
    for x in &model.exempt {
        if let Some(id) = x.id {
            m.insert(id, x.name.clone());
        }
    }
    m
}

/// The scope and the logical time a command runs at.
pub(crate) fn scope(args: &ScopeArgs, model: &Model) -> CliResult<(Scope, DateTime<Utc>)> {
    let now = args.now.map_or_else(Utc::now, |t| t.with_timezone(&Utc));
    let any_scoped = model.entities.iter().any(|e| !e.tenantless);
    let scope = match args.tenant {
        Some(_) if !any_scoped => {
            return Err(CliError::Usage(
                "--tenant: every retained table of the model is tenantless, so a tenant's pass would \
                 change nothing; use --tenantless (or give no scope: it is the default for such a model)"
                    .into(),
            ));
        }
        Some(id) if !args.tenantless => {
            let mut t = TenantContext::new(id);
            t.jurisdiction = args.jurisdiction.clone();
            t.tags = args.tags.clone();
            Scope::Tenant(t)
        }
        // A single-tenant application: the tenantless pass is the only one.
        None if !args.tenantless && any_scoped => {
            return Err(CliError::Usage(
                "which rows? give --tenant <UUID> for one tenant's rows, or --tenantless for the tables \
                 marked tenantless"
                    .into(),
            ));
        }
        _ => Scope::Tenantless,
    };
    Ok((scope, now))
}

/// Runs the command line and returns the exit code.
pub(crate) async fn run(cli: Cli) -> CliResult<u8> {
    let settings = settings::load(cli.global.config.as_deref())?;
    let ctx = Ctx {
        global: cli.global,
        settings,
    };
    match cli.command {
        Command::Init(args) => init::run(&ctx, &args),
        Command::Schema(cmd) => schema::run(&ctx, &cmd).await,
        Command::Validate(args) => validate::run(&ctx, &args).await,
        Command::Preview(args) => sweep::preview(&ctx, &args).await,
        Command::Status(args) => status::run(&ctx, &args).await,
        Command::Sweep(args) => sweep::sweep(&ctx, &args).await,
        Command::Erase(args) => sweep::erase(&ctx, &args).await,
        Command::Holds(cmd) => holds::run(&ctx, &cmd).await,
        Command::Matters(cmd) => matters::run(&ctx, &cmd).await,
        Command::Events(cmd) => events::run(&ctx, &cmd).await,
        Command::Disposition(cmd) => disposition::run(&ctx, &cmd).await,
        Command::Runs(cmd) => runs::run(&ctx, &cmd).await,
        Command::Subject(cmd) => subject::run(&ctx, &cmd).await,
        Command::Erasures(cmd) => subject::erasures(&ctx, &cmd).await,
        Command::Coverage(args) => coverage::run(&ctx, &args).await,
        Command::Schedule(args) => schedule::run(&ctx, &args),
        Command::Demo(args) => demo::run(&ctx, &args).await,
        Command::Worker(args) => worker::run(&ctx, &args).await,
        Command::Verify => evidence::verify(&ctx).await,
        Command::Report(args) => evidence::report(&ctx, &args).await,
        Command::VerifyReport(args) => evidence::verify_report(&ctx, &args),
        Command::Certificate(args) => evidence::certificate(&ctx, &args).await,
    }?;
    Ok(code::SUCCESS)
}
