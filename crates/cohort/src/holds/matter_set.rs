//! The matters that cover one retained type in one tenant, read once and
//! bound into every statement that must not touch a protected row
//! (contracts MH1, MH4).
//!
//! A matter writes no row per record, so a statement cannot probe an index
//! of held rows for it. Instead the statement's caller reads the type's
//! live matters (a handful, however many rows they cover) into arrays, and
//! the statement tests each row against them without a per-row lookup:
//!
//! * type matters: the row's anchor against the multirange of their anchor
//!   windows (`<@`, one uncorrelated aggregate per statement, a binary
//!   search per row);
//! * subject matters: each erasure-subject column against the subjects
//!   that column's type can hold (`= ANY (subquery)`, one hashed subplan
//!   per statement, a hash probe per row), compared in the column's own
//!   type as erasure compares (contract E9).
//!
//! So a batch's cost follows its rows, not the number of matters or the
//! rows they cover. Each entry carries the instant it stops protecting
//! (expiry or release), tested in the statement against the database clock.
//!
//! The arrays are right only while no matter of the type is written: every
//! write of a matter moves the type's `holds_version` under the entity
//! fence (migration 8's trigger), the set records the version it was read
//! at, and the batch loop checks under the fence that it has not moved
//! before it uses the set (see `run::batch`).

use sqlx::PgConnection;
use uuid::Uuid;

use crate::model::resolved::ResolvedEntity;
use crate::schema::SchemaName;
use crate::sql::{AssertSqlSafe, PgTime, Pinned};

/// A bound value of the matter predicate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum MatterParam {
    /// The type matters' window starts (timestamptz[], NULL: unbounded).
    From,
    /// Their window ends (timestamptz[], NULL: unbounded).
    To,
    /// When each stops protecting (timestamptz[], NULL: not yet known).
    Until,
    /// The subjects the subject column at this index of `entity.subjects`
    /// can hold (text[]).
    Subjects(usize),
    /// When each of them stops protecting (timestamptz[]).
    SubjectsUntil(usize),
}

/// The live matters of one type in one tenant.
#[derive(Debug, Clone, Default)]
pub(crate) struct MatterSet {
    /// The type's holds version the set was read at (`None`: the type is
    /// not registered, so no matter can name it).
    pub(crate) version: Option<i64>,
    from: Vec<Option<PgTime>>,
    to: Vec<Option<PgTime>>,
    until: Vec<Option<PgTime>>,
    /// Per subject column: the subjects its type can hold, and their ends.
    subjects: Vec<(Vec<String>, Vec<Option<PgTime>>)>,
    /// How many matters it was read from.
    pub(crate) matters: u64,
    /// Their ids, oldest first.
    pub(crate) ids: Vec<Uuid>,
}

/// When a matter is live at `at`: created, neither expired nor released.
pub(crate) fn matter_active_at(at: &str) -> String {
    format!(
        "m.created_at <= {at} \
         AND (m.expires_at IS NULL OR m.expires_at > {at}) \
         AND (m.released_at IS NULL OR m.released_at > {at})"
    )
}

/// Matter alias `m` covers retained type `entity` (an expression) in the
/// tenant `tenant` (an expression, NULL for tenantless).
pub(crate) fn matter_covers(entity: &str, tenant: &str) -> String {
    format!(
        "m.tenant_id IS NOT DISTINCT FROM {tenant} \
         AND ((m.scope_kind = 'Type' AND m.retained_entity_id = {entity}) \
              OR (m.scope_kind = 'Subject' AND (m.entity_ids IS NULL OR {entity} = ANY (m.entity_ids))))"
    )
}

impl MatterSet {
    /// Reads the matters of `e` in `tenant` live at `at` (`None`: the
    /// database clock), in a transaction of its own.
    pub(crate) async fn read(
        conn: &mut PgConnection,
        schema: &SchemaName,
        e: &ResolvedEntity,
        tenant: Option<Uuid>,
        at: Option<PgTime>,
    ) -> Result<MatterSet, sqlx::Error> {
        let mut tx = Pinned::begin(conn).await?;
        let read = Self::read_in(tx.conn(), schema, e, tenant, at, None).await;
        tx.finish(read).await
    }

    /// [`MatterSet::read`] on a connection already in a transaction (sqlx's
    /// or a raw `BEGIN`) with `pg_catalog` first on its path (a savepoint
    /// guards each cast). With
    /// `only`, just that matter, live or not (a matter's own report).
    pub(crate) async fn read_in(
        conn: &mut PgConnection,
        schema: &SchemaName,
        e: &ResolvedEntity,
        tenant: Option<Uuid>,
        at: Option<PgTime>,
        only: Option<Uuid>,
    ) -> Result<MatterSet, sqlx::Error> {
        let matters = schema.table("retention_matters");
        let registry = schema.table("retention_entities");
        // `$4` names one matter, live or not; otherwise the live ones at `$3`.
        let live = format!(
            "(m.matter_id = $4 OR ($4::pg_catalog.uuid IS NULL AND {}))",
            matter_active_at(
                "COALESCE($3::pg_catalog.timestamptz, pg_catalog.statement_timestamp())"
            )
        );
        let sql = format!(
            "SELECT (SELECT r.holds_version FROM {registry} AS r WHERE r.retained_entity_id = $1) AS version, \
                    x.scope_kind, x.subject, x.anchor_from, x.anchor_to, x.until, x.matter_id \
             FROM (SELECT 1) AS one LEFT JOIN LATERAL ( \
               SELECT m.matter_id, m.created_at, m.scope_kind, m.subject, \
                      (m.anchor_from)::pg_catalog.timestamptz AS anchor_from, \
                      (m.anchor_to)::pg_catalog.timestamptz AS anchor_to, \
                      LEAST(m.expires_at, m.released_at) AS until \
               FROM {matters} AS m \
               WHERE {covers} AND {live} \
               ORDER BY m.created_at, m.matter_id) AS x ON true",
            covers = matter_covers("$1", "$2::pg_catalog.uuid"),
        );
        type Row = (
            Option<i64>,
            Option<String>,
            Option<String>,
            Option<PgTime>,
            Option<PgTime>,
            Option<PgTime>,
            Option<Uuid>,
        );
        let rows: Vec<Row> = crate::sql::query_as(AssertSqlSafe(sql))
            .bind(e.entity_id)
            .bind(tenant)
            .bind(at)
            .bind(only)
            .fetch_all(&mut *conn)
            .await?;
        let mut set = MatterSet {
            subjects: vec![(Vec::new(), Vec::new()); e.subjects.len()],
            ..MatterSet::default()
        };
        let mut subjects: Vec<(String, Option<PgTime>)> = Vec::new();
        for (version, kind, subject, from, to, until, id) in rows {
            set.version = version;
            set.ids.extend(id);
            match kind.as_deref() {
                Some("Type") => {
                    set.from.push(from);
                    set.to.push(to);
                    set.until.push(until);
                    set.matters += 1;
                }
                Some(_) => {
                    if let Some(s) = subject {
                        subjects.push((s, until));
                    }
                    set.matters += 1;
                }
                None => {}
            }
        }
        if subjects.is_empty() {
            return Ok(set);
        }
        // Which subjects each subject column's type can hold: one cast of
        // them all, and only when that fails one cast each (a subject the
        // type cannot read matches nothing of that column, as in erasure).
        let mut by_type: Vec<(String, Vec<bool>)> = Vec::new();
        for (i, c) in e.subjects.iter().enumerate() {
            let usable = match by_type.iter().find(|(t, _)| *t == c.cmp_type) {
                Some((_, usable)) => usable.clone(),
                None => {
                    let usable = castable(conn, &c.cmp_type, &subjects).await?;
                    by_type.push((c.cmp_type.clone(), usable.clone()));
                    usable
                }
            };
            if let Some(slot) = set.subjects.get_mut(i) {
                for ((s, until), ok) in subjects.iter().zip(&usable) {
                    if *ok {
                        slot.0.push(s.clone());
                        slot.1.push(*until);
                    }
                }
            }
        }
        Ok(set)
    }

    /// The window starts.
    pub(crate) fn from(&self) -> Vec<Option<PgTime>> {
        self.from.clone()
    }

    /// The window ends.
    pub(crate) fn to(&self) -> Vec<Option<PgTime>> {
        self.to.clone()
    }

    /// When each type matter stops protecting.
    pub(crate) fn until(&self) -> Vec<Option<PgTime>> {
        self.until.clone()
    }

    /// The subjects of subject column `i`.
    pub(crate) fn subjects(&self, i: usize) -> Vec<String> {
        self.subjects
            .get(i)
            .map(|s| s.0.clone())
            .unwrap_or_default()
    }

    /// When each subject of column `i` stops protecting.
    pub(crate) fn subjects_until(&self, i: usize) -> Vec<Option<PgTime>> {
        self.subjects
            .get(i)
            .map(|s| s.1.clone())
            .unwrap_or_default()
    }

    /// Binds `p` on `q`.
    pub(crate) fn bind<'q>(
        &self,
        q: sqlx::query::Query<'q, sqlx::Postgres, sqlx::postgres::PgArguments>,
        p: MatterParam,
    ) -> sqlx::query::Query<'q, sqlx::Postgres, sqlx::postgres::PgArguments> {
        match p {
            MatterParam::From => q.bind(self.from()),
            MatterParam::To => q.bind(self.to()),
            MatterParam::Until => q.bind(self.until()),
            MatterParam::Subjects(i) => q.bind(self.subjects(i)),
            MatterParam::SubjectsUntil(i) => q.bind(self.subjects_until(i)),
        }
    }
}

impl MatterSet {
    /// [`MatterSet::bind`] for a scalar query.
    pub(crate) fn bind_scalar<'q, O>(
        &self,
        q: sqlx::query::QueryScalar<'q, sqlx::Postgres, O, sqlx::postgres::PgArguments>,
        p: MatterParam,
    ) -> sqlx::query::QueryScalar<'q, sqlx::Postgres, O, sqlx::postgres::PgArguments> {
        match p {
            MatterParam::From => q.bind(self.from()),
            MatterParam::To => q.bind(self.to()),
            MatterParam::Until => q.bind(self.until()),
            MatterParam::Subjects(i) => q.bind(self.subjects(i)),
            MatterParam::SubjectsUntil(i) => q.bind(self.subjects_until(i)),
        }
    }
}

/// Which of `subjects` the type `cmp_type` (catalog text) can read.
async fn castable(
    conn: &mut PgConnection,
    cmp_type: &str,
    subjects: &[(String, Option<PgTime>)],
) -> Result<Vec<bool>, sqlx::Error> {
    let all: Vec<&str> = subjects.iter().map(|(s, _)| s.as_str()).collect();
    // A boolean result, not the host's type (see `run::erasure`).
    let bulk = format!(
        "SELECT pg_catalog.count(CAST(s AS {cmp_type})) FROM pg_catalog.unnest($1::pg_catalog.text[]) AS s"
    );
    if try_cast(conn, &bulk, all).await? {
        return Ok(vec![true; subjects.len()]);
    }
    let one = format!("SELECT CAST($1::pg_catalog.text AS {cmp_type}) IS NOT NULL");
    let mut out = Vec::with_capacity(subjects.len());
    for (s, _) in subjects {
        out.push(try_cast(conn, &one, s.as_str()).await?);
    }
    Ok(out)
}

/// Runs `sql` with `value` under a savepoint, and says whether it worked.
/// Written as SQL, not through sqlx's nesting: the caller's transaction may
/// be one sqlx does not track (a batch's, begun with a raw `BEGIN`).
async fn try_cast<T>(conn: &mut PgConnection, sql: &str, value: T) -> Result<bool, sqlx::Error>
where
    T: for<'q> sqlx::Encode<'q, sqlx::Postgres> + sqlx::Type<sqlx::Postgres> + Send,
{
    crate::sql::query("SAVEPOINT cohort_matter_cast")
        .execute(&mut *conn)
        .await?;
    let ok = crate::sql::query(AssertSqlSafe(sql.to_owned()))
        .bind(value)
        .execute(&mut *conn)
        .await
        .is_ok();
    let end = if ok {
        "RELEASE SAVEPOINT cohort_matter_cast"
    } else {
        "ROLLBACK TO SAVEPOINT cohort_matter_cast"
    };
    crate::sql::query(end).execute(&mut *conn).await?;
    Ok(ok)
}

/// [`matter_held`] with positional placeholders `$first`, `$first + 1`, ...:
/// the SQL, and the values to bind there in order ([`MatterSet::bind`]).
pub(crate) fn matter_held_numbered(
    e: &ResolvedEntity,
    alias: &str,
    now: &str,
    first: usize,
) -> (String, Vec<MatterParam>) {
    let mut params = Vec::new();
    let sql = matter_held(e, alias, now, &mut |p| {
        params.push(p);
        format!("${}", first + params.len() - 1)
    });
    (sql, params)
}

/// The SQL of "a matter of the set protects row `alias`": `ph` gives each
/// bound value's placeholder, `now` the instant matters are judged at
/// (`pg_catalog.statement_timestamp()` for mutations). Written for a
/// session with `pg_catalog` first on its path, as all of Cohort's
/// statements are.
pub(crate) fn matter_held(
    e: &ResolvedEntity,
    alias: &str,
    now: &str,
    ph: &mut dyn FnMut(MatterParam) -> String,
) -> String {
    let mut parts = vec![format!(
        "COALESCE(({alias}.{anchor})::pg_catalog.timestamptz OPERATOR(pg_catalog.<@) \
           (SELECT pg_catalog.range_agg(pg_catalog.tstzrange(w.f, w.u, '[)')) \
              FROM ROWS FROM (pg_catalog.unnest({f}::pg_catalog.timestamptz[]), \
                              pg_catalog.unnest({u}::pg_catalog.timestamptz[]), \
                              pg_catalog.unnest({x}::pg_catalog.timestamptz[])) AS w(f, u, x) \
             WHERE w.x IS NULL OR w.x > {now}), false)",
        anchor = e.anchor.name,
        f = ph(MatterParam::From),
        u = ph(MatterParam::To),
        x = ph(MatterParam::Until),
    )];
    for (i, c) in e.subjects.iter().enumerate() {
        parts.push(format!(
            "COALESCE({alias}.{col} {eq} ANY ( \
               SELECT CAST(s.v AS {cmp}) \
                 FROM ROWS FROM (pg_catalog.unnest({v}::pg_catalog.text[]), \
                                 pg_catalog.unnest({x}::pg_catalog.timestamptz[])) AS s(v, x) \
                WHERE s.x IS NULL OR s.x > {now}), false)",
            col = c.name,
            eq = c.eq,
            cmp = c.cmp_type,
            v = ph(MatterParam::Subjects(i)),
            x = ph(MatterParam::SubjectsUntil(i)),
        ));
    }
    format!("({})", parts.join(" OR "))
}
