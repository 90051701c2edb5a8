//! The auditor's report (contract EV3): gathered from the ledger, rendered
//! as one self-contained HTML file (inline CSS and SVG, no script, no
//! request at view time), from a compile-time template (askama) with charts
//! drawn by plotters' SVG backend.

use std::collections::BTreeMap;
use std::io::Write;

use askama::Template;
use chrono::{DateTime, Utc};
use futures_util::TryStreamExt;
use plotters::prelude::*;
use sqlx::{PgConnection, Row};
use uuid::Uuid;

use super::{ChainHead, EvidenceError, TimeRange, VerifyReport, verify};
use crate::error::Error;
use crate::schema::SchemaName;
use crate::sql::AssertSqlSafe;

/// What to put in the report.
#[derive(Debug, Clone)]
pub struct ReportOptions {
    /// The runs to report on: those that started in this range.
    pub range: TimeRange,
    /// The instant active holds are judged at (and their age measured to).
    pub as_of: DateTime<Utc>,
    /// The report's title.
    pub title: String,
}

impl ReportOptions {
    /// Runs that started in `range`; holds active now.
    pub fn new(range: TimeRange) -> ReportOptions {
        ReportOptions {
            range,
            as_of: Utc::now(),
            title: "Data retention: auditor's report".to_owned(),
        }
    }
}

/// Rows changed and held for one category in one month (of the runs'
/// start, UTC), dry runs excluded.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct CategoryMonth {
    /// The category.
    pub category: String,
    /// `YYYY-MM`.
    pub month: String,
    /// Rows purged (sweeps and erasures).
    pub purged: i64,
    /// Rows soft-deleted.
    pub soft_deleted: i64,
    /// Rows anonymised.
    pub anonymised: i64,
    /// Rows left because an active hold covered them, as the month's
    /// latest run of each type and tenant found them: a held row counts
    /// once, however many runs met it.
    pub held: i64,
}

/// A run that failed as a whole or in part.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct FailedRun {
    /// The run.
    pub run_id: Uuid,
    /// `Sweep` or `Erasure`.
    pub kind: String,
    /// `Failed` or `PartiallyFailed`.
    pub status: String,
    /// When it started (RFC 3339, UTC).
    pub started_at: String,
    /// When it settled.
    pub settled_at: Option<String>,
    /// Its sanitized error envelope (kind, SQLSTATE, diagnostic id).
    pub error: Option<String>,
}

/// A hold active at the report's `as_of`.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ActiveHold {
    /// The hold.
    pub hold_id: Uuid,
    /// The retained-entity id.
    pub entity_id: Uuid,
    /// The held row's record id.
    pub record_id: String,
    /// The tenant (`-` for tenantless).
    pub tenant: String,
    /// Why it is held.
    pub reason: String,
    /// When it was created (RFC 3339, UTC).
    pub created_at: String,
    /// Whole days since its creation, at `as_of`.
    pub age_days: i64,
}

/// A matter hold active at the report's `as_of` (contract MH3).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ActiveMatter {
    /// The matter.
    pub matter_id: Uuid,
    /// What it protects, in words: the subject and the types it covers, or
    /// the type and its anchor window.
    pub scope: String,
    /// The tenant (`-` for tenantless).
    pub tenant: String,
    /// Who asked for it.
    pub owner: String,
    /// Why.
    pub reason: String,
    /// When it was created (RFC 3339, UTC).
    pub created_at: String,
    /// When it stops by itself (RFC 3339, UTC), if it does.
    pub expires_at: Option<String>,
    /// Whole days since its creation, at `as_of`.
    pub age_days: i64,
}

/// An auditor's report, gathered by [`audit_report`]; [`AuditReport::to_html`]
/// renders it.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct AuditReport {
    /// The install.
    pub schema: SchemaName,
    /// What was asked for.
    pub options: ReportOptions,
    /// When it was gathered.
    pub generated_at: DateTime<Utc>,
    /// Per category and month, in order.
    pub rows: Vec<CategoryMonth>,
    /// Failed and partially failed runs, oldest first.
    pub failed_runs: Vec<FailedRun>,
    /// Active holds, oldest first.
    pub active_holds: Vec<ActiveHold>,
    /// Active matter holds, oldest first.
    pub active_matters: Vec<ActiveMatter>,
    /// The chain's verification.
    pub verification: VerifyReport,
}

fn rfc3339(prefix: &str, c: &str) -> String {
    format!(
        "CASE WHEN {prefix}.{c} IS NULL THEN NULL WHEN pg_catalog.isfinite({prefix}.{c}) THEN \
           pg_catalog.to_char({prefix}.{c} AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"') \
         WHEN {prefix}.{c} OPERATOR(pg_catalog.>) 'epoch'::pg_catalog.timestamptz THEN 'infinity' \
         ELSE '-infinity' END AS {c}"
    )
}

/// Gathers the auditor's report of the install in `schema`: activity per
/// category and month, failed runs, active holds and the chain's
/// verification ([`verify`]).
///
/// ```no_run
/// # async fn demo(pool: sqlx::PgPool) -> Result<(), cohort::Error> {
/// use cohort::evidence::{ReportOptions, TimeRange, audit_report};
/// let mut conn = pool.acquire().await?;
/// let schema = cohort::schema::SchemaName::public();
/// let report = audit_report(&mut conn, &schema, &ReportOptions::new(TimeRange::all())).await?;
/// std::fs::write("retention-report.html", report.to_html()?)
///     .map_err(cohort::evidence::EvidenceError::from)?;
/// # Ok(()) }
/// ```
pub async fn audit_report(
    conn: &mut PgConnection,
    schema: &SchemaName,
    options: &ReportOptions,
) -> Result<AuditReport, Error> {
    if options.range.from >= options.range.to {
        return Err(EvidenceError::EmptyRange.into());
    }
    // One read-only snapshot for the verification and the figures, every
    // statement inside it (a pooler in transaction mode keeps them on one
    // server connection).
    let mut tx = super::snapshot(conn).await?;
    let report = read_report(&mut tx, schema, options).await?;
    tx.commit().await?;
    Ok(report)
}

async fn read_report(
    conn: &mut PgConnection,
    schema: &SchemaName,
    options: &ReportOptions,
) -> Result<AuditReport, Error> {
    let verification = verify(conn, schema).await?;
    let runs = schema.table("sweep_run");
    let summaries = schema.table("sweep_run_entity_summary");
    let holds = schema.table("retention_holds");

    let mut rows = Vec::new();
    {
        let mut stream = crate::sql::query(AssertSqlSafe(format!(
            // Rows changed add up over the month's runs; rows held do not
            // (the same held row is counted by every run that meets it):
            // per type and tenant, the held count of the month's latest run.
            "SELECT m.category, m.month, \
                    pg_catalog.sum(m.purged)::bigint AS purged, \
                    pg_catalog.sum(m.soft_deleted)::bigint AS soft_deleted, \
                    pg_catalog.sum(m.anonymised)::bigint AS anonymised, \
                    pg_catalog.sum(m.held)::bigint AS held \
             FROM (SELECT s.category, \
                          pg_catalog.to_char(pg_catalog.date_trunc('month', r.started_at AT TIME ZONE 'UTC'), 'YYYY-MM') AS month, \
                          pg_catalog.sum(CASE WHEN s.strategy OPERATOR(pg_catalog.=) 'Purge' THEN s.affected_count ELSE 0 END) AS purged, \
                          pg_catalog.sum(CASE WHEN s.strategy OPERATOR(pg_catalog.=) 'SoftDelete' THEN s.affected_count ELSE 0 END) AS soft_deleted, \
                          pg_catalog.sum(CASE WHEN s.strategy OPERATOR(pg_catalog.=) 'Anonymise' THEN s.affected_count ELSE 0 END) AS anonymised, \
                          (pg_catalog.array_agg(s.held_count ORDER BY r.started_at DESC, r.run_id DESC))[1] AS held \
                   FROM {summaries} AS s JOIN {runs} AS r ON r.run_id OPERATOR(pg_catalog.=) s.run_id \
                   WHERE NOT r.dry_run AND pg_catalog.isfinite(r.started_at) \
                     AND r.started_at OPERATOR(pg_catalog.>=) $1 AND r.started_at OPERATOR(pg_catalog.<) $2 \
                   GROUP BY 1, 2, s.retained_entity_id, s.tenant_id) AS m \
             GROUP BY 1, 2 ORDER BY 2, 1"
        )))
        .bind(options.range.from)
        .bind(options.range.to)
        .fetch(&mut *conn);
        while let Some(r) = stream.try_next().await? {
            rows.push(CategoryMonth {
                category: r.try_get("category")?,
                month: r.try_get("month")?,
                purged: r.try_get("purged")?,
                soft_deleted: r.try_get("soft_deleted")?,
                anonymised: r.try_get("anonymised")?,
                held: r.try_get("held")?,
            });
        }
    }

    let mut failed_runs = Vec::new();
    for r in crate::sql::query(AssertSqlSafe(format!(
        "SELECT r.run_id, r.run_kind, r.status, r.error, {}, {} FROM {runs} AS r \
         WHERE r.status OPERATOR(pg_catalog.=) ANY (ARRAY['Failed', 'PartiallyFailed']) \
           AND r.started_at OPERATOR(pg_catalog.>=) $1 AND r.started_at OPERATOR(pg_catalog.<) $2 \
         ORDER BY r.started_at, r.run_id",
        rfc3339("r", "started_at"),
        rfc3339("r", "settled_at")
    )))
    .bind(options.range.from)
    .bind(options.range.to)
    .fetch_all(&mut *conn)
    .await?
    {
        failed_runs.push(FailedRun {
            run_id: r.try_get("run_id")?,
            kind: r.try_get("run_kind")?,
            status: r.try_get("status")?,
            started_at: r
                .try_get::<Option<String>, _>("started_at")?
                .unwrap_or_default(),
            settled_at: r.try_get("settled_at")?,
            error: r.try_get("error")?,
        });
    }

    let mut active_holds = Vec::new();
    for r in crate::sql::query(AssertSqlSafe(format!(
        "SELECT h.hold_id, h.retained_entity_id, h.record_id, h.tenant_id, h.reason, {}, \
                pg_catalog.floor(pg_catalog.date_part('epoch', $1::pg_catalog.timestamptz OPERATOR(pg_catalog.-) h.created_at) \
                    OPERATOR(pg_catalog./) 86400)::bigint AS age_days \
         FROM {holds} AS h WHERE {} AND pg_catalog.isfinite(h.created_at) \
         ORDER BY h.created_at, h.hold_id",
        rfc3339("h", "created_at"),
        "h.created_at OPERATOR(pg_catalog.<=) $1::pg_catalog.timestamptz \
         AND (h.expires_at IS NULL OR h.expires_at OPERATOR(pg_catalog.>) $1::pg_catalog.timestamptz) \
         AND (h.removed_at IS NULL OR h.removed_at OPERATOR(pg_catalog.>) $1::pg_catalog.timestamptz)",
    )))
    .bind(options.as_of)
    .fetch_all(&mut *conn)
    .await?
    {
        let tenant: Option<Uuid> = r.try_get("tenant_id")?;
        active_holds.push(ActiveHold {
            hold_id: r.try_get("hold_id")?,
            entity_id: r.try_get("retained_entity_id")?,
            record_id: r.try_get("record_id")?,
            tenant: tenant.map_or_else(|| "-".to_owned(), |t| t.to_string()),
            reason: r.try_get("reason")?,
            created_at: r
                .try_get::<Option<String>, _>("created_at")?
                .unwrap_or_default(),
            age_days: r.try_get::<Option<i64>, _>("age_days")?.unwrap_or(0),
        });
    }

    let mut active_matters = Vec::new();
    for r in crate::sql::query(AssertSqlSafe(format!(
        "SELECT m.matter_id, m.tenant_id, m.scope_kind, m.subject, \
                pg_catalog.array_to_string(m.entity_ids, ', ') AS entities, \
                (m.retained_entity_id)::pg_catalog.text AS entity, m.owner, m.reason, {}, {}, {}, {}, \
                pg_catalog.floor(pg_catalog.date_part('epoch', $1::pg_catalog.timestamptz OPERATOR(pg_catalog.-) m.created_at) \
                    OPERATOR(pg_catalog./) 86400)::bigint AS age_days \
         FROM {matters} AS m \
         WHERE m.created_at OPERATOR(pg_catalog.<=) $1::pg_catalog.timestamptz \
           AND (m.expires_at IS NULL OR m.expires_at OPERATOR(pg_catalog.>) $1::pg_catalog.timestamptz) \
           AND (m.released_at IS NULL OR m.released_at OPERATOR(pg_catalog.>) $1::pg_catalog.timestamptz) \
           AND pg_catalog.isfinite(m.created_at) \
         ORDER BY m.created_at, m.matter_id",
        rfc3339("m", "created_at"),
        rfc3339("m", "expires_at"),
        rfc3339("m", "anchor_from"),
        rfc3339("m", "anchor_to"),
        matters = schema.table("retention_matters"),
    )))
    .bind(options.as_of)
    .fetch_all(&mut *conn)
    .await?
    {
        let tenant: Option<Uuid> = r.try_get("tenant_id")?;
        let kind: String = r.try_get("scope_kind")?;
        let scope = if kind == "Subject" {
            let subject: Option<String> = r.try_get("subject")?;
            let entities: Option<String> = r.try_get("entities")?;
            format!(
                "subject {} in {}",
                subject.unwrap_or_default(),
                entities.map_or_else(|| "every retained type".to_owned(), |e| format!("types {e}"))
            )
        } else {
            let entity: Option<String> = r.try_get("entity")?;
            let from: Option<String> = r.try_get("anchor_from")?;
            let to: Option<String> = r.try_get("anchor_to")?;
            match (from, to) {
                (None, None) => format!("every row of type {}", entity.unwrap_or_default()),
                (f, t) => format!(
                    "type {}, anchors from {} to {}",
                    entity.unwrap_or_default(),
                    f.unwrap_or_else(|| "-".to_owned()),
                    t.unwrap_or_else(|| "-".to_owned())
                ),
            }
        };
        active_matters.push(ActiveMatter {
            matter_id: r.try_get("matter_id")?,
            scope,
            tenant: tenant.map_or_else(|| "-".to_owned(), |t| t.to_string()),
            owner: r.try_get("owner")?,
            reason: r.try_get("reason")?,
            created_at: r
                .try_get::<Option<String>, _>("created_at")?
                .unwrap_or_default(),
            expires_at: r.try_get("expires_at")?,
            age_days: r.try_get::<Option<i64>, _>("age_days")?.unwrap_or(0),
        });
    }

    Ok(AuditReport {
        active_matters,
        schema: schema.clone(),
        options: options.clone(),
        generated_at: Utc::now(),
        rows,
        failed_runs,
        active_holds,
        verification,
    })
}

#[derive(Template)]
#[template(path = "evidence_report.html")]
struct Page<'a> {
    title: &'a str,
    schema: &'a str,
    from: String,
    to: String,
    generated_at: String,
    as_of: String,
    intact: bool,
    problems: Vec<String>,
    verification_summary: String,
    head: Option<&'a ChainHead>,
    month_chart: String,
    category_chart: String,
    rows: &'a [CategoryMonth],
    failed_runs: &'a [FailedRun],
    active_holds: &'a [ActiveHold],
    active_matters: &'a [ActiveMatter],
}

/// The four series of the charts, with their colours.
const SERIES: [(&str, RGBColor); 4] = [
    ("purged", RGBColor(0xb4, 0x23, 0x18)),
    ("soft-deleted", RGBColor(0xdc, 0x68, 0x03)),
    ("anonymised", RGBColor(0x17, 0x5c, 0xd3)),
    ("held", RGBColor(0x1a, 0x7f, 0x37)),
];

fn render_error<E: std::fmt::Display>(e: E) -> Error {
    EvidenceError::Render {
        reason: e.to_string(),
    }
    .into()
}

/// A grouped bar chart as an SVG document: one group per label, one bar
/// per series.
fn bar_chart(caption: &str, groups: &[(String, [i64; 4])]) -> Result<String, Error> {
    let mut svg = String::new();
    {
        let width = (220 + 90 * groups.len().max(1)).min(1040) as u32;
        let root = SVGBackend::with_string(&mut svg, (width, 320)).into_drawing_area();
        root.fill(&WHITE).map_err(render_error)?;
        let max = groups
            .iter()
            .flat_map(|(_, v)| v.iter().copied())
            .max()
            .unwrap_or(0)
            .max(1);
        // One segment per group: `(0..n).into_segmented()` has the
        // segments 0..n, so one group is `0..1` (a range `0..0` had no
        // width, and its bars negative ones).
        let n = i32::try_from(groups.len().max(1)).unwrap_or(i32::MAX);
        let labels: Vec<String> = groups.iter().map(|(l, _)| l.clone()).collect();
        let mut chart = ChartBuilder::on(&root)
            .caption(caption, ("sans-serif", 18))
            .margin(12)
            .x_label_area_size(36)
            .y_label_area_size(60)
            .build_cartesian_2d((0..n).into_segmented(), 0i64..max + max / 2 + 1)
            .map_err(render_error)?;
        chart
            .configure_mesh()
            .disable_x_mesh()
            .x_labels(labels.len().max(1))
            .x_label_formatter(&|v| match v {
                SegmentValue::CenterOf(i) => usize::try_from(*i)
                    .ok()
                    .and_then(|i| labels.get(i))
                    .cloned()
                    .unwrap_or_default(),
                _ => String::new(),
            })
            .y_desc("rows")
            .draw()
            .map_err(render_error)?;
        let mapping = chart.as_coord_spec().clone();
        let chart_coord = |c: &(SegmentValue<i32>, i64)| mapping.translate(c);
        for (s, (name, colour)) in SERIES.iter().enumerate() {
            let bars = groups.iter().enumerate().map(|(i, (_, values))| {
                let i = i as i32;
                let value = values[s];
                // Each group is split in five: bar s takes the (s + 1/2)-th fifth.
                let mut bar = Rectangle::new(
                    [
                        (SegmentValue::Exact(i), 0),
                        (SegmentValue::Exact(i + 1), value),
                    ],
                    colour.filled(),
                );
                // The group's pixels as the chart maps them.
                let x0 = chart_coord(&(SegmentValue::Exact(i), 0)).0;
                let x1 = chart_coord(&(SegmentValue::Exact(i + 1), 0)).0;
                let group_px = f64::from((x1 - x0).max(0));
                let bar_px = group_px / 5.0;
                let left = (bar_px / 2.0 + s as f64 * bar_px) as u32;
                let right = (group_px - bar_px / 2.0 - (s as f64 + 1.0) * bar_px).max(0.0) as u32;
                bar.set_margin(0, 0, left, right);
                bar
            });
            chart
                .draw_series(bars)
                .map_err(render_error)?
                .label(*name)
                .legend(move |(x, y)| {
                    Rectangle::new([(x, y - 5), (x + 10, y + 5)], colour.filled())
                });
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperRight)
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .draw()
            .map_err(render_error)?;
        root.present().map_err(render_error)?;
    }
    Ok(svg)
}

impl AuditReport {
    /// The report as one self-contained HTML document.
    pub fn to_html(&self) -> Result<String, Error> {
        let mut months: BTreeMap<String, [i64; 4]> = BTreeMap::new();
        let mut categories: BTreeMap<String, [i64; 4]> = BTreeMap::new();
        // Rows are in month order: a category's held rows are its latest
        // month's (held rows are a state, not a sum over time).
        for r in &self.rows {
            for (totals, over_time) in [
                (months.entry(r.month.clone()).or_default(), false),
                (categories.entry(r.category.clone()).or_default(), true),
            ] {
                totals[0] += r.purged;
                totals[1] += r.soft_deleted;
                totals[2] += r.anonymised;
                totals[3] = if over_time {
                    r.held
                } else {
                    totals[3] + r.held
                };
            }
        }
        let month_chart = bar_chart("Rows per month", &months.into_iter().collect::<Vec<_>>())?;
        let category_chart = bar_chart(
            "Rows per category",
            &categories.into_iter().collect::<Vec<_>>(),
        )?;
        let v = &self.verification;
        let time = |t: DateTime<Utc>| t.format("%Y-%m-%d %H:%M:%S").to_string();
        let page = Page {
            title: &self.options.title,
            schema: self.schema.as_str(),
            from: if self.options.range.from == TimeRange::all().from {
                "the first run".to_owned()
            } else {
                time(self.options.range.from)
            },
            to: if self.options.range.to == TimeRange::all().to {
                "now".to_owned()
            } else {
                time(self.options.range.to)
            },
            generated_at: time(self.generated_at),
            as_of: time(self.options.as_of),
            intact: v.is_intact(),
            problems: v.problems.iter().map(|p| p.to_string()).collect(),
            verification_summary: format!(
                "{} sealed runs, {} runs in progress, {} summaries, {} row details, {} hold links, {} matter links checked; {} pruned hold links.",
                v.runs,
                v.runs_in_progress,
                v.summaries,
                v.details,
                v.hold_links,
                v.matter_links,
                v.pruned.len()
            ),
            head: v.head.as_ref(),
            month_chart: strip_xml_declaration(month_chart),
            category_chart: strip_xml_declaration(category_chart),
            rows: &self.rows,
            failed_runs: &self.failed_runs,
            active_holds: &self.active_holds,
            active_matters: &self.active_matters,
        };
        page.render().map_err(render_error)
    }

    /// Writes [`Self::to_html`] to `out`.
    pub fn write_html<W: Write + ?Sized>(&self, out: &mut W) -> Result<(), Error> {
        let html = self.to_html()?;
        out.write_all(html.as_bytes())
            .map_err(|e| Error::from(EvidenceError::Io(e)))
    }
}

/// Inline SVG in HTML takes the `<svg>` element, not an XML document.
fn strip_xml_declaration(svg: String) -> String {
    match svg.find("<svg") {
        Some(i) => svg[i..].to_owned(),
        None => svg,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn charts_are_svg_with_a_bar_per_value() {
        let svg = bar_chart(
            "t",
            &[
                ("2026-01".to_owned(), [3, 1, 0, 2]),
                ("2026-02".to_owned(), [5, 0, 4, 0]),
            ],
        )
        .expect("chart");
        assert!(svg.contains("<svg"), "{svg}");
        assert!(svg.contains("2026-02"));
        assert!(svg.matches("<rect").count() >= 8, "{svg}");
    }

    #[test]
    fn an_empty_chart_still_renders() {
        let svg = bar_chart("nothing", &[]).expect("chart");
        assert!(svg.contains("<svg"));
    }
}
