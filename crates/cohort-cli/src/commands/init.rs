//! `init`: a starter `cohort.toml` and model file in the current directory.

use std::path::Path;

use uuid::Uuid;

use super::Ctx;
use crate::cli::InitArgs;
use crate::error::{CliError, CliResult};
use crate::output;
use crate::sample;
use crate::settings::DEFAULT_SETTINGS_FILE;

/// Writes `text` to `path`; `private` files (the settings, which hold the
/// keys) are readable by their owner only (mode 600).
fn write(path: &Path, text: &str, force: bool, private: bool) -> CliResult {
    if path.exists() && !force {
        return Err(CliError::Usage(format!(
            "{} exists; pass --force to overwrite it",
            path.display()
        )));
    }
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|e| CliError::io("cannot create", dir, e))?;
    }
    std::fs::write(path, text).map_err(|e| CliError::io("cannot write", path, e))?;
    #[cfg(unix)]
    if private {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
            .map_err(|e| CliError::io("cannot restrict", path, e))?;
    }
    #[cfg(not(unix))]
    let _ = private;
    Ok(())
}

/// `init`.
pub(crate) fn run(ctx: &Ctx, args: &InitArgs) -> CliResult {
    let settings_path = ctx
        .global
        .config
        .clone()
        .unwrap_or_else(|| DEFAULT_SETTINGS_FILE.into());
    let model_path = ctx.model_path();
    for p in [&settings_path, &model_path] {
        if p.exists() && !args.force {
            return Err(CliError::Usage(format!(
                "{} exists; pass --force to overwrite it",
                p.display()
            )));
        }
    }
    // Fresh random keys (256 bits each) for the `hash` anonymiser and for
    // erasure certificates' subject hashes.
    let key = || format!("{}{}", Uuid::new_v4().simple(), Uuid::new_v4().simple());
    let settings = sample::SETTINGS
        .replace("{hash_key}", &key())
        .replace("{certificate_key}", &key())
        .replace(
            "model = \"cohort-model.toml\"",
            &format!("model = {:?}", model_path.display().to_string()),
        );
    write(&settings_path, &settings, args.force, true)?;
    write(&model_path, sample::MODEL, args.force, false)?;
    output::line(format!(
        "wrote {} (readable by you only: it holds the keys)",
        settings_path.display()
    ))?;
    output::line(format!("wrote {}", model_path.display()))?;
    output::line(
        "next: edit the model for your tables, then\n  \
         cohort schema migrate     # install Cohort's tables (once)\n  \
         cohort validate           # check the model against the database\n  \
         cohort coverage           # find tables nobody classified",
    )
}
