//! Which order a sweep's range batches take through a table (contract X18;
//! `docs/design.md`, "Two batch orders").
//!
//! **Anchor order** walks the `(anchor, record id)` index: each batch is the
//! next rows by age. When a table's rows do not lie in anchor order, each
//! batch of 1,000 rows touches about a thousand different pages, and the
//! sweep touches every page of the table about as many times as a page
//! holds rows: 0.1 of one raw `DELETE`, which reads each page once.
//!
//! **Physical order** walks the table's pages: each batch is the eligible
//! rows after a `tid`, up to the batch size of them, found within a bounded
//! window of pages by a `tid` range scan, so each page is read by one batch.
//! It is chosen per type and run ([`choose`]) from the catalog and the
//! planner's estimate, and only for plain tables (a partitioned table's
//! `ctid`s repeat in its partitions).
//!
//! Rows a physical pass cannot see stay for the next run and are counted
//! as left behind, as locked rows are: rows written, or moved by an update,
//! to pages past the table's end when the pass began.

use sqlx::postgres::PgArguments;
use sqlx::query::Query;
use sqlx::{PgConnection, Postgres, Row};
use uuid::Uuid;

use crate::config::BatchOrder;

/// A statement with its values bound.
type PgQuery<'q> = Query<'q, Postgres, PgArguments>;

/// What [`choose`] reads, bound by the batch loop: the type's table and
/// batch size, and its estimate and sample statements
/// (`EntitySql::estimate`, `EntitySql::sample`) with their values.
pub(crate) struct Probe<'q> {
    /// The quoted, schema-qualified table.
    pub(crate) table: String,
    /// The retained type's id, for the log.
    pub(crate) entity: Uuid,
    pub(crate) batch_size: u32,
    pub(crate) estimate: PgQuery<'q>,
    pub(crate) sample: PgQuery<'q>,
}

/// The smallest table (in pages) [`BatchOrder::Auto`] sweeps in physical
/// order: below it every page is in the buffer cache after a few batches
/// and the order makes no measurable difference.
const AUTO_MIN_PAGES: i64 = 1_000;
/// [`BatchOrder::Auto`] takes physical order when an anchor-ordered batch's
/// rows lie on more than this many times the pages a physical-order batch
/// of as many rows would read.
const AUTO_MIN_SCATTER: f64 = 2.0;
/// [`BatchOrder::Auto`]'s smallest share of the table's rows estimated
/// eligible for which it takes physical order.
const AUTO_MIN_SHARE: f64 = 0.25;
/// How much larger than one batch's expected rows a window of pages is, so
/// that most batches find their full batch within it.
const WINDOW_MARGIN: f64 = 1.25;

/// Where a physical-order pass is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Pages {
    /// The last `tid` a batch covered (exclusive lower bound of the next),
    /// as text: `(page,offset)`.
    pub(crate) lo: String,
    /// How many pages past `lo`'s a batch looks for its rows in.
    pub(crate) window: u32,
    /// The table's size in pages when the pass began: the pass ends there.
    pub(crate) blocks: u32,
}

impl Pages {
    /// The first batch's position.
    fn start(window: u32, blocks: u32) -> Pages {
        Pages {
            lo: "(0,0)".to_owned(),
            window: window.max(1),
            blocks,
        }
    }

    /// The page of `lo`.
    fn page(&self) -> u32 {
        tid_page(&self.lo).unwrap_or(0)
    }

    /// The first page past this batch's window.
    pub(crate) fn end(&self) -> u32 {
        self.page().saturating_add(self.window).saturating_add(1)
    }

    /// `(end, 0)`: the window's exclusive end.
    pub(crate) fn end_tid(&self) -> String {
        format!("({},0)", self.end())
    }

    /// `(end - 1, 65535)`: the window's last possible `tid`.
    pub(crate) fn last_tid(&self) -> String {
        format!("({},65535)", self.end().saturating_sub(1))
    }

    /// The position after a batch that found its upper `tid` `hi` (`None`:
    /// the window held less than a batch, so the batch took all of it), and
    /// whether the pass goes on.
    pub(crate) fn next(&self, hi: Option<String>) -> (Pages, bool) {
        let (lo, more) = match hi {
            Some(hi) => (hi, true),
            None => (self.last_tid(), self.end() < self.blocks),
        };
        (
            Pages {
                lo,
                window: self.window,
                blocks: self.blocks,
            },
            more,
        )
    }
}

/// The page number of a `tid`'s text `(page,offset)`.
fn tid_page(tid: &str) -> Option<u32> {
    tid.trim()
        .strip_prefix('(')?
        .split(',')
        .next()?
        .trim()
        .parse()
        .ok()
}

/// The order a type's range batches take in this run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Order {
    /// By `(anchor, record id)`.
    Anchor,
    /// By page, from this position.
    Pages(Pages),
}

/// What the catalog says of the type's table.
struct Shape {
    /// A plain table with no inheritance children.
    plain: bool,
    /// Its size in pages now.
    blocks: i64,
    /// The planner's row count (`reltuples`; negative when never analysed).
    tuples: f64,
}

/// The first anchor-ordered batch: its rows, and the pages they lie on.
#[derive(Debug, Clone, Copy)]
struct Sample {
    rows: f64,
    pages: f64,
}

async fn shape(conn: &mut PgConnection, table: &str) -> Result<Option<Shape>, sqlx::Error> {
    let row = crate::sql::query(
        "SELECT c.relkind OPERATOR(pg_catalog.=) 'r' AND NOT c.relhassubclass AS plain, \
                pg_catalog.pg_relation_size(c.oid) \
                  OPERATOR(pg_catalog./) pg_catalog.current_setting('block_size')::pg_catalog.int8 AS blocks, \
                c.reltuples::pg_catalog.float8 AS tuples \
         FROM pg_catalog.pg_class AS c \
         WHERE c.oid OPERATOR(pg_catalog.=) pg_catalog.to_regclass($1)",
    )
    .persistent(false)
    .bind(table)
    .fetch_optional(&mut *conn)
    .await?;
    let Some(row) = row else {
        return Ok(None);
    };
    Ok(Some(Shape {
        plain: row.try_get("plain")?,
        blocks: row.try_get("blocks")?,
        tuples: row.try_get("tuples")?,
    }))
}

/// The first anchor-ordered batch's rows and the pages they lie on.
async fn sample(conn: &mut PgConnection, query: PgQuery<'_>) -> Result<Sample, sqlx::Error> {
    let row = query.persistent(false).fetch_one(&mut *conn).await?;
    let pages: i64 = row.try_get("pages")?;
    let rows: i64 = row.try_get("n")?;
    Ok(Sample {
        rows: rows as f64,
        pages: pages as f64,
    })
}

/// The planner's estimate of the eligible rows (`rows=N` on the first line
/// of `EXPLAIN`).
async fn eligible_estimate(
    conn: &mut PgConnection,
    query: PgQuery<'_>,
) -> Result<Option<f64>, sqlx::Error> {
    let rows = query.persistent(false).fetch_all(&mut *conn).await?;
    let Some(first) = rows.first() else {
        return Ok(None);
    };
    let line: String = first.try_get(0)?;
    Ok(plan_rows(&line))
}

/// `N` of `rows=N` in a line of `EXPLAIN`'s text.
fn plan_rows(line: &str) -> Option<f64> {
    let at = line.find("rows=")? + "rows=".len();
    line[at..]
        .split(|c: char| !c.is_ascii_digit() && c != '.')
        .next()?
        .parse()
        .ok()
}

/// Chooses the order of a type's range batches for this run, reading the
/// catalog and, for [`BatchOrder::Auto`], the planner's estimate (two
/// statements, once per type and run). Anchor order when the type has no
/// physical-order statement, its table is not a plain one, or the choice
/// cannot be read.
pub(crate) async fn choose(
    conn: &mut PgConnection,
    probe: Option<Probe<'_>>,
    setting: BatchOrder,
) -> Order {
    let Some(probe) = probe else {
        return Order::Anchor;
    };
    if setting == BatchOrder::Anchor {
        return Order::Anchor;
    }
    // In a transaction of its own (a pooler in transaction mode keeps its
    // statements on one server session, contract CO1), with `pg_catalog`
    // first on the path as in a batch, so the estimate plans the
    // predicate's operators as the batches will.
    let decided = crate::sql::txn::alone(conn, async |conn: &mut PgConnection| {
        crate::sql::query(
            "SELECT pg_catalog.set_config('search_path', 'pg_catalog, ' OPERATOR(pg_catalog.||) \
                    pg_catalog.current_setting('search_path'), true)",
        )
        .persistent(false)
        .execute(&mut *conn)
        .await?;
        decide(conn, probe, setting).await
    })
    .await;
    match decided {
        Ok(order) => order,
        Err(e) => {
            tracing::debug!(error = %e, "could not read the table's shape; batches take anchor order");
            Order::Anchor
        }
    }
}

async fn decide(
    conn: &mut PgConnection,
    probe: Probe<'_>,
    setting: BatchOrder,
) -> Result<Order, sqlx::Error> {
    let Some(shape) = shape(conn, &probe.table).await? else {
        return Ok(Order::Anchor);
    };
    if !shape.plain || shape.blocks < 1 {
        return Ok(Order::Anchor);
    }
    let blocks = u32::try_from(shape.blocks).unwrap_or(u32::MAX);
    let estimate = eligible_estimate(conn, probe.estimate).await?;
    let physical = match setting {
        BatchOrder::Physical => true,
        _ => {
            let sample = if shape.blocks >= AUTO_MIN_PAGES {
                Some(sample(conn, probe.sample).await?)
            } else {
                None
            };
            auto(&shape, estimate, sample)
        }
    };
    if !physical {
        return Ok(Order::Anchor);
    }
    let window = window_pages(
        estimate.unwrap_or(shape.tuples),
        shape.blocks,
        probe.batch_size,
    );
    tracing::debug!(
        entity = %probe.entity,
        blocks,
        window,
        "batches take physical order"
    );
    Ok(Order::Pages(Pages::start(window, blocks)))
}

/// How many pages a batch looks for its rows in: 1.25 batches' worth at
/// the estimated eligible rows per page, and never more than the batch size
/// of pages nor the table. The cap keeps a batch's cost bounded by the batch
/// (contract X22) when the estimate is far too low (a forced physical order
/// on a table whose statistics say it is nearly empty): the batch then reads
/// at most `batch_size` pages and takes what eligible rows they hold.
fn window_pages(estimate: f64, blocks: i64, batch_size: u32) -> u32 {
    // Eligible rows per page (at least one row on the whole table).
    let per_page = estimate.max(1.0) / blocks.max(1) as f64;
    let window = (WINDOW_MARGIN * f64::from(batch_size) / per_page).ceil();
    let cap = f64::from(batch_size.max(1)).min(blocks.max(1) as f64);
    if window.is_finite() && window >= 1.0 {
        window.min(cap) as u32
    } else {
        1
    }
}

/// [`BatchOrder::Auto`]'s rule (see its docs): a large table, a large
/// eligible share, and anchor-ordered batches scattered over many more pages
/// than physical-order batches of as many rows would read (at the eligible
/// rows' density per page).
fn auto(shape: &Shape, estimate: Option<f64>, sample: Option<Sample>) -> bool {
    let (Some(estimate), Some(sample)) = (estimate, sample) else {
        return false;
    };
    if shape.blocks < AUTO_MIN_PAGES
        || shape.tuples <= 0.0
        || estimate < AUTO_MIN_SHARE * shape.tuples
        || sample.rows < 1.0
    {
        return false;
    }
    let density = estimate / shape.blocks as f64;
    let physical_pages = (sample.rows / density).max(1.0);
    sample.pages > AUTO_MIN_SCATTER * physical_pages
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_window_ends_past_the_page_of_its_lower_bound_and_moves_on_from_its_last_tid() {
        let p = Pages::start(10, 25);
        assert_eq!(p.end_tid(), "(11,0)");
        assert_eq!(p.last_tid(), "(10,65535)");
        let (p, more) = p.next(None);
        assert!(more);
        assert_eq!(p.lo, "(10,65535)");
        assert_eq!(p.end(), 21);
        let (q, more) = p.next(Some("(17,4)".to_owned()));
        assert!(more);
        assert_eq!(q.end(), 28);
        // The window reaches the table's end: the pass is done.
        let (_, more) = q.next(None);
        assert!(!more);
    }

    #[test]
    fn a_window_holds_a_batch_and_a_quarter_at_the_estimate_and_never_more_than_a_batch_of_pages() {
        // 50 eligible rows a page: 25 pages hold 1,250 rows.
        assert_eq!(window_pages(100_000.0, 2_000, 1_000), 25);
        // An estimate of nearly nothing: the batch size of pages, not the table.
        assert_eq!(window_pages(1.0, 1_000_000, 1_000), 1_000);
        // A small table: all of it.
        assert_eq!(window_pages(1.0, 10, 1_000), 10);
        // No estimate at all counts as one row.
        assert_eq!(window_pages(f64::NAN, 10, 1_000), 10);
    }

    #[test]
    fn explain_rows_are_read_from_the_first_line() {
        assert_eq!(
            plan_rows("Seq Scan on notes t  (cost=0.00..23.00 rows=1234 width=4)"),
            Some(1234.0)
        );
        assert_eq!(
            plan_rows("Result  (cost=0.00..0.01 rows=1 width=4)"),
            Some(1.0)
        );
        assert_eq!(plan_rows("no estimate"), None);
    }

    #[test]
    fn auto_takes_physical_order_only_for_a_large_scattered_mostly_eligible_table() {
        // 50 rows a page; 45 of them eligible.
        let shape = |blocks| Shape {
            plain: true,
            blocks,
            tuples: 50.0 * blocks as f64,
        };
        let scattered = Some(Sample {
            rows: 1_000.0,
            pages: 990.0,
        });
        let clustered = Some(Sample {
            rows: 1_000.0,
            pages: 21.0,
        });
        assert!(auto(&shape(2_000), Some(90_000.0), scattered));
        // In anchor order already: a batch reads as many pages either way.
        assert!(!auto(&shape(2_000), Some(90_000.0), clustered));
        // Few rows eligible.
        assert!(!auto(&shape(2_000), Some(1_000.0), scattered));
        // Small.
        assert!(!auto(&shape(100), Some(4_500.0), scattered));
        // No estimate, no sample.
        assert!(!auto(&shape(2_000), None, scattered));
        assert!(!auto(&shape(2_000), Some(90_000.0), None));
    }
}
