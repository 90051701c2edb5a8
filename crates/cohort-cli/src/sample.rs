//! The sample application: the model `init` writes and `demo` runs, and
//! the demo's tables.

/// The starter model file (`cohort init`), which is also the demo's.
pub(crate) const MODEL: &str = r#"# Cohort model file: which tables hold personal data, how long rows are kept,
# and what happens to them then. `cohort validate` checks it against the
# database; `cohort schedule` turns it into the retention schedule.
#
# Conventions (override them in cohort.toml under [conventions]): the record
# id column is `id`, the tenant column `tenant_id`, the soft-delete flag
# `is_deleted`, deleted-at `deleted_at`, anonymised-at `anonymised_at`.

# --- Retained tables -------------------------------------------------------

[[entity]]
name = "users"                                 # shown in reports and the ledger
id = "6b619c19-6e3c-44e8-a87f-975c68fd3988"    # stable identity: never change it
table = "users"
# schema = "app"                               # default: default_table_schema, then public
category = "accounts"
anchor = "last_seen_at"                        # the timestamptz that ages a row
erasure_subjects = ["id"]                      # a subject matching any of these is erased

[entity.anonymise]                             # what the anonymise strategy does per column
email = "hash"                                 # HMAC-SHA256 with hash_key, hex
full_name = { literal = "former user" }
phone = { mask = { keep_first = 0, keep_last = 2, with = "*" } }

[[entity]]
name = "orders"
id = "0f1b7e52-6a3d-4c1e-9b8a-7d2c5e4f3a10"
table = "orders"
category = "orders"
anchor = "placed_at"
erasure_subjects = ["user_id"]

[[entity]]
name = "sessions"
id = "9c4e2b1a-3f5d-4e6c-8a7b-1d2e3f4a5b6c"
table = "sessions"
category = "sessions"
anchor = "created_at"
erasure_subjects = ["user_id"]

[[entity]]
name = "audit_notes"
id = "3a2b1c0d-9e8f-4a7b-b6c5-d4e3f2a1b0c9"
table = "audit_notes"
category = "audit-notes"
anchor = "created_at"
# soft_delete = "is_deleted" and deleted_at = "deleted_at" by convention

# --- Explicitly exempt tables (they show up in reports with the reason) ----

[[exempt]]
table = "countries"
reason = "reference data: no personal data"

# --- Rules: category -> strategy, period, legal minimum --------------------

[rules.accounts]
strategy = "anonymise"
period = "2 years"                             # 30d, 18 months, P1Y, ...
legal_minimum = "30d"                          # no rule or erasure goes below it
source = "privacy-policy-2026"
reason = "GDPR art. 5(1)(e): storage limitation"

[[rules.accounts.override]]                    # per tenant, jurisdiction or tag
jurisdiction = "DE"
period = "1 year"

[rules.orders]
strategy = "purge"
period = "7 years"
legal_minimum = "7 years"                      # tax law: erasure waits for it too
audit = "per-row"                              # one ledger row per purged order
source = "finance-retention-2026"
reason = "HGB section 257: commercial records"

[rules.sessions]
strategy = "purge"
period = "30d"

[rules.audit-notes]
strategy = "soft-delete"
period = "P1Y"
"#;

/// The starter settings file (`cohort init`); `{hash_key}` is replaced by a
/// fresh random key.
pub(crate) const SETTINGS: &str = r#"# Cohort settings. Every key can also come from the environment as
# COHORT_<KEY> (COHORT_BATCH_SIZE=500, COHORT_CONVENTIONS__TENANT=org_id);
# the environment wins. The database comes from --database-url, else
# DATABASE_URL, else database_url here.

# database_url = "postgres://cohort@localhost/app"
model = "cohort-model.toml"
schema = "public"                # where Cohort's own tables live
default_table_schema = "public"  # for model entries without `schema`
batch_size = 1000                # rows per committed batch
# lock_wait = 0.2                # seconds a batch waits for a locked row
# fence_wait = 30                # seconds a batch waits behind a hold being created
# inactive_hold_retention = 31536000  # seconds; `holds prune` deletes older inactive holds

# The key of the `hash` anonymiser. Keep it secret and stable (changing it
# changes every future hash); better set COHORT_HASH_KEY from your secret store.
hash_key = "{hash_key}"

# The key of erasure certificates' subject hash (`cohort certificate`): an
# erasure records its subject as HMAC-SHA256 under it, so only the subject
# that was erased can be certified. Keep it secret and stable; better set
# COHORT_CERTIFICATE_KEY from your secret store.
certificate_key = "{certificate_key}"

# [conventions]
# record_id = "id"
# tenant = "tenant_id"
# soft_delete = "is_deleted"
# deleted_at = "deleted_at"
# anonymised_at = "anonymised_at"
"#;

/// The demo's tables, in `public` of a fresh database.
pub(crate) const TABLES: &str = include_str!("sample_tables.sql");

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{ParseOptions, parse};

    #[test]
    fn the_sample_model_parses_cleanly() {
        let m = parse(
            "cohort-model.toml",
            MODEL,
            &ParseOptions {
                default_table_schema: "public".into(),
                hash_key_set: true,
            },
        )
        .expect("the sample model is valid");
        assert_eq!(m.entities.len(), 4);
        assert_eq!(m.exempt.len(), 1);
        assert!(m.warnings.is_empty(), "{:?}", m.warnings);
    }

    #[test]
    fn the_settings_template_is_valid_toml() {
        let text = SETTINGS
            .replace("{hash_key}", "k")
            .replace("{certificate_key}", "c");
        let v: toml::Table = toml::from_str(&text).expect("valid TOML");
        assert_eq!(
            v.get("model").and_then(|m| m.as_str()),
            Some("cohort-model.toml")
        );
    }
}
