//! Connecting, showing URLs without passwords, and quoting identifiers.
//!
//! Cohort's own SQL module is private to the library, so the command's few
//! statements that name tables (the ledger reads, the demo's tables) quote
//! their identifiers here. Values are always bound, never spliced.

use std::time::Duration;

use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{Connection, PgConnection, PgPool};

use crate::error::{CliError, CliResult};

/// The longest identifier PostgreSQL keeps (longer ones are silently
/// truncated, which would name another table: refused instead).
const MAX_IDENT_BYTES: usize = 63;

/// How long connecting may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);

/// Why a name cannot be an identifier.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum IdentError {
    /// The empty string.
    #[error("an identifier cannot be empty")]
    Empty,
    /// A NUL byte, which PostgreSQL cannot store in a name.
    #[error("an identifier cannot contain a NUL byte")]
    Nul,
    /// Longer than PostgreSQL keeps.
    #[error("an identifier is at most {MAX_IDENT_BYTES} bytes; this one is {0}")]
    TooLong(usize),
}

/// `name` as a quoted PostgreSQL identifier: wrapped in `"` with every `"`
/// doubled, so any name (spaces, capitals, quotes, semicolons) names exactly
/// itself.
pub(crate) fn quote_ident(name: &str) -> Result<String, IdentError> {
    if name.is_empty() {
        return Err(IdentError::Empty);
    }
    if name.contains('\0') {
        return Err(IdentError::Nul);
    }
    if name.len() > MAX_IDENT_BYTES {
        return Err(IdentError::TooLong(name.len()));
    }
    Ok(format!("\"{}\"", name.replace('"', "\"\"")))
}

/// `"schema"."table"`, both quoted.
pub(crate) fn qualified(schema: &str, table: &str) -> CliResult<String> {
    let s =
        quote_ident(schema).map_err(|e| CliError::Usage(format!("schema name {schema:?}: {e}")))?;
    let t =
        quote_ident(table).map_err(|e| CliError::Usage(format!("table name {table:?}: {e}")))?;
    Ok(format!("{s}.{t}"))
}

/// The URL with its password (if any) replaced by `***`, for messages. A
/// string that does not parse as a URL is not shown at all.
pub(crate) fn redact_url(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return "<the configured database URL>".into();
    };
    // userinfo ends at the last '@' before the first '/', '?' or '#'.
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let authority = &rest[..authority_end];
    let tail = &rest[authority_end..];
    let redacted_tail = redact_query_password(tail);
    match authority.rfind('@') {
        Some(at) => {
            let userinfo = &authority[..at];
            let host = &authority[at + 1..];
            let user = match userinfo.split_once(':') {
                Some((user, _password)) => format!("{user}:***"),
                None => userinfo.to_owned(),
            };
            format!("{scheme}://{user}@{host}{redacted_tail}")
        }
        None => format!("{scheme}://{authority}{redacted_tail}"),
    }
}

/// `?password=...` in the query string is a password too.
fn redact_query_password(tail: &str) -> String {
    let Some((path, query)) = tail.split_once('?') else {
        return tail.to_owned();
    };
    let params: Vec<String> = query
        .split('&')
        .map(|p| match p.split_once('=') {
            Some((k, _)) if k.eq_ignore_ascii_case("password") => format!("{k}=***"),
            _ => p.to_owned(),
        })
        .collect();
    format!("{path}?{}", params.join("&"))
}

/// A small pool on `url`: enough for a run, its ledger and the command's
/// own reads.
pub(crate) async fn connect(url: &str) -> CliResult<PgPool> {
    // Another database's URL is refused before anything is tried.
    if let Some((scheme, _)) = url.split_once("://")
        && !matches!(
            scheme.to_ascii_lowercase().as_str(),
            "postgres" | "postgresql"
        )
    {
        return Err(CliError::Usage(format!(
            "{} is a {scheme}:// URL; Cohort works with PostgreSQL only (postgres:// or postgresql://)",
            redact_url(url)
        )));
    }
    let options: PgConnectOptions = url.parse().map_err(|e| CliError::Connect {
        url: redact_url(url),
        source: e,
    })?;
    // One connection first: an unreachable server or a refused login fails
    // at once, instead of after the pool's acquire timeout.
    let probe = tokio::time::timeout(CONNECT_TIMEOUT, PgConnection::connect_with(&options))
        .await
        .map_err(|_| CliError::Connect {
            url: redact_url(url),
            source: sqlx::Error::PoolTimedOut,
        })?
        .map_err(|e| CliError::Connect {
            url: redact_url(url),
            source: e,
        })?;
    let _ = probe.close().await;
    PgPoolOptions::new()
        .max_connections(4)
        .acquire_timeout(CONNECT_TIMEOUT)
        .connect_with(options)
        .await
        .map_err(|e| CliError::Connect {
            url: redact_url(url),
            source: e,
        })
}

/// A refused login says where its credentials came from (the URL is
/// never shown with its password).
pub(crate) fn with_login_hint(e: CliError, source: &str) -> CliError {
    match e {
        CliError::Connect {
            url,
            source: sqlx::Error::Database(db),
        } if matches!(db.code().as_deref(), Some("28P01" | "28000")) => CliError::Login(format!(
            "cannot connect to {url}: {}; the user and password came from {source}",
            db.message()
        )),
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hostile_names_are_quoted_to_name_exactly_themselves() {
        assert_eq!(quote_ident("users").as_deref(), Ok("\"users\""));
        assert_eq!(quote_ident("Users").as_deref(), Ok("\"Users\""));
        assert_eq!(quote_ident("a\"b").as_deref(), Ok("\"a\"\"b\""));
        assert_eq!(
            quote_ident("x\"; DROP TABLE users; --").as_deref(),
            Ok("\"x\"\"; DROP TABLE users; --\"")
        );
        assert_eq!(quote_ident("\"").as_deref(), Ok("\"\"\"\""));
        assert_eq!(quote_ident("sp ace").as_deref(), Ok("\"sp ace\""));
        assert_eq!(quote_ident("naïve").as_deref(), Ok("\"naïve\""));
        assert_eq!(quote_ident("new\nline").as_deref(), Ok("\"new\nline\""));
        assert_eq!(quote_ident(""), Err(IdentError::Empty));
        assert_eq!(quote_ident("a\0b"), Err(IdentError::Nul));
        assert_eq!(quote_ident(&"x".repeat(64)), Err(IdentError::TooLong(64)));
        assert!(quote_ident(&"x".repeat(63)).is_ok());
        // Every quote inside is doubled: stripping the outer quotes and
        // undoubling gives the name back.
        for name in ["a\"b", "\"\"", "x\"; --", "\"start", "end\""] {
            let q = quote_ident(name).expect("quotable");
            let inner = &q[1..q.len() - 1];
            assert_eq!(inner.replace("\"\"", "\""), name);
            assert!(!inner.replace("\"\"", "").contains('"'), "{q}");
        }
    }

    #[test]
    fn qualified_names_quote_both_parts() {
        assert_eq!(
            qualified("my schema", "a\"b").expect("valid"),
            "\"my schema\".\"a\"\"b\""
        );
        assert!(qualified("", "t").is_err());
    }

    #[test]
    fn passwords_are_never_shown() {
        assert_eq!(
            redact_url("postgres://ann:s3cret@db.example:5432/app"),
            "postgres://ann:***@db.example:5432/app"
        );
        assert_eq!(
            redact_url("postgres://ann:p@ss@word@db/app?sslmode=require"),
            "postgres://ann:***@db/app?sslmode=require"
        );
        assert_eq!(
            redact_url("postgres://ann@db/app?password=s3cret&sslmode=require"),
            "postgres://ann@db/app?password=***&sslmode=require"
        );
        assert_eq!(
            redact_url("postgres://127.0.0.1:5432/app"),
            "postgres://127.0.0.1:5432/app"
        );
        assert!(!redact_url("host=db password=s3cret").contains("s3cret"));
    }
}
