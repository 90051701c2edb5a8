//! The statements on the handler queue (`sweep_row_handler_status`) and the
//! payloads it points to (`sweep_run_row_detail.captured_payload`). Every
//! relation is schema-qualified and quoted; values are bound; times come
//! from the database clock (`clock_timestamp()`), and the host sends only
//! durations, so host clocks never decide a claim's expiry.
//!
//! States: `Pending` (claimable once `not_before` passed), `InFlight`
//! (claimed, with a claim token and an expiry), `Succeeded`, `DeadLettered`.
//! A claim mints a random token; settling requires it, and reclaiming an
//! expired claim clears it, so a delivery whose claim was reclaimed cannot
//! settle the row.

use crate::schema::SchemaName;

/// The SQL of one install's queue.
#[derive(Debug, Clone)]
pub(crate) struct QueueSql {
    work: String,
    details: String,
    runs: String,
}

impl QueueSql {
    pub(crate) fn new(schema: &SchemaName) -> QueueSql {
        QueueSql {
            work: schema.table("sweep_row_handler_status").to_string(),
            details: schema.table("sweep_run_row_detail").to_string(),
            runs: schema.table("sweep_run").to_string(),
        }
    }

    /// Claims up to `$2` due deliveries of the types `$1` (uuid[]), each for
    /// `$3` (interval), counting the attempt at claim. A delivery is due when
    /// it is `Pending`, its `not_before` passed, and its run has settled if
    /// it waits for that. A row's later deliveries wait with `not_before =
    /// infinity` until the one before them is done (see [`QueueSql::settle`]),
    /// so a row's deliveries run in rank order, one at a time, and the claim
    /// needs no look at siblings: it walks the due index in `not_before`
    /// order and stops at the limit. Returns the claimed rows with their
    /// payload (`payload`, NULL when none), whether the payload was scrubbed
    /// (`scrubbed`) and the row's action.
    pub(crate) fn claim(&self) -> String {
        format!(
            "WITH picked AS MATERIALIZED ( \
               SELECT h.work_id FROM {work} AS h \
               WHERE h.state = 'Pending' AND h.not_before <= pg_catalog.statement_timestamp() \
                 AND h.retained_entity_id = ANY ($1::pg_catalog.uuid[]) \
                 AND (NOT h.after_sweep_settled OR EXISTS ( \
                       SELECT 1 FROM {runs} AS r WHERE r.run_id = h.run_id AND r.status <> 'Started')) \
               ORDER BY h.not_before \
               LIMIT $2 FOR UPDATE OF h SKIP LOCKED), \
             claimed AS ( \
               UPDATE {work} AS h SET state = 'InFlight', claim_token = pg_catalog.gen_random_uuid(), \
                   attempts = h.attempts + 1, \
                   claim_expires_at = pg_catalog.clock_timestamp() + $3::pg_catalog.interval, \
                   updated_at = pg_catalog.clock_timestamp() \
               FROM picked WHERE h.work_id = picked.work_id AND h.state = 'Pending' \
               RETURNING h.work_id, h.claim_token, h.attempts, h.detail_id, h.run_id, \
                         h.retained_entity_id, h.record_id, h.tenant_id, h.handler_id) \
             SELECT c.work_id, c.claim_token, c.attempts, c.run_id, c.retained_entity_id, \
                    c.record_id, c.tenant_id, c.handler_id, \
                    (d.captured_payload -> c.handler_id) AS payload, \
                    (d.detail_id IS NOT NULL AND d.captured_payload IS NULL) AS scrubbed, \
                    d.action \
             FROM claimed AS c LEFT JOIN {details} AS d ON d.detail_id = c.detail_id \
             ORDER BY c.work_id",
            work = self.work,
            runs = self.runs,
            details = self.details,
        )
    }

    /// The CTE that releases the next delivery of each row CTE `done`
    /// (columns `detail_id`, `state`) finished: the row's first delivery,
    /// by rank, still waiting with `not_before = infinity`. (`state ||
    /// ''` keeps the planner on the row's own index even when the queue's
    /// statistics lag behind a burst of work. The subquery's alias `nx` must
    /// differ from every `done` name: `settle` passes `s`, and an inner `s`
    /// once made `s.detail_id = s.detail_id` compare the inner row with
    /// itself, so a settle released some other row's delivery, or none,
    /// after a scan of the whole queue.)
    fn release_next(&self, done: &str) -> String {
        format!(
            "UPDATE {work} AS n SET not_before = pg_catalog.clock_timestamp(), \
                 updated_at = pg_catalog.clock_timestamp() \
             FROM {done} WHERE {done}.state IN ('Succeeded', 'DeadLettered') \
               AND n.work_id = ( \
                 SELECT nx.work_id FROM {work} AS nx \
                 WHERE nx.detail_id = {done}.detail_id AND (nx.state || '') = 'Pending' \
                 ORDER BY nx.priority, nx.work_id LIMIT 1) \
               AND n.not_before = 'infinity'",
            work = self.work,
        )
    }

    /// Settles delivery `$1` claimed with token `$2` as `$3` (state), with
    /// error `$4` and, for `Pending`, a retry after `$5` (interval). Matches
    /// nothing when the claim was reclaimed meanwhile. When the row's work is
    /// then all done, its payload is cleared in the same statement. (The
    /// check for the row's other work reads `state || ''` so that it probes
    /// the row's own index only: on `state` itself the planner may AND in
    /// the due index, a scan of every waiting delivery per settle, which
    /// made draining a large queue quadratic.) Returns
    /// how many deliveries it settled (0 or 1).
    pub(crate) fn settle(&self) -> String {
        format!(
            "WITH s AS ( \
               UPDATE {work} SET state = $3, claim_token = NULL, claim_expires_at = NULL, \
                   last_error = $4, not_before = pg_catalog.clock_timestamp() + $5::pg_catalog.interval, \
                   updated_at = pg_catalog.clock_timestamp() \
               WHERE work_id = $1 AND claim_token = $2 AND state = 'InFlight' \
               RETURNING work_id, detail_id, state), \
             cleared AS ( \
               UPDATE {details} AS d SET captured_payload = NULL FROM s \
               WHERE d.detail_id = s.detail_id AND s.state IN ('Succeeded', 'DeadLettered') \
                 AND d.captured_payload IS NOT NULL \
                 AND NOT EXISTS (SELECT 1 FROM {work} AS o WHERE o.detail_id = s.detail_id \
                                 AND o.work_id <> s.work_id AND (o.state || '') IN ('Pending', 'InFlight'))), \
             released AS ({release}) \
             SELECT pg_catalog.count(*) FROM s",
            work = self.work,
            details = self.details,
            release = self.release_next("s"),
        )
    }

    /// Puts back deliveries of the types `$1` (uuid[]) whose claim expired
    /// (their dispatcher crashed or stalled): `Pending` again, or
    /// `DeadLettered` when they used `$2` (int) attempts, with error `$3`.
    /// The expiry is re-tested in the statement itself, under the row lock.
    /// Payloads of rows whose work is then all done are cleared. Returns how
    /// many it put back.
    pub(crate) fn reclaim(&self) -> String {
        format!(
            "WITH r AS ( \
               UPDATE {work} SET state = CASE WHEN attempts >= $2 THEN 'DeadLettered' ELSE 'Pending' END, \
                   claim_token = NULL, claim_expires_at = NULL, last_error = $3, \
                   not_before = pg_catalog.clock_timestamp(), updated_at = pg_catalog.clock_timestamp() \
               WHERE state = 'InFlight' AND claim_expires_at < pg_catalog.clock_timestamp() \
                 AND retained_entity_id = ANY ($1::pg_catalog.uuid[]) \
               RETURNING work_id, detail_id, state), \
             cleared AS ( \
               UPDATE {details} AS d SET captured_payload = NULL FROM r \
               WHERE d.detail_id = r.detail_id AND r.state = 'DeadLettered' \
                 AND d.captured_payload IS NOT NULL \
                 AND NOT EXISTS (SELECT 1 FROM {work} AS o WHERE o.detail_id = r.detail_id \
                                 AND o.work_id <> r.work_id AND (o.state || '') IN ('Pending', 'InFlight'))), \
             released AS ({release}) \
             SELECT pg_catalog.count(*) FROM r",
            work = self.work,
            details = self.details,
            release = self.release_next("r"),
        )
    }

    /// Counts (up to `$3`) the deliveries due for longer than `$2`
    /// (interval) whose type is not one of `$1` (uuid[]), and lists their
    /// distinct types (at most ten). Walks the due index; never claims.
    pub(crate) fn unserved(&self) -> String {
        format!(
            "WITH u AS ( \
               SELECT h.retained_entity_id AS e FROM {work} AS h \
               WHERE h.state = 'Pending' \
                 AND h.not_before < pg_catalog.statement_timestamp() - $2::pg_catalog.interval \
                 AND NOT (h.retained_entity_id = ANY ($1::pg_catalog.uuid[])) \
               LIMIT $3) \
             SELECT pg_catalog.count(*) AS n, \
                    COALESCE((SELECT pg_catalog.array_agg(t.e) FROM \
                              (SELECT DISTINCT u.e FROM u LIMIT 10) AS t), '{{}}') AS types \
             FROM u",
            work = self.work,
        )
    }

    /// Dead-letters, in a batch's transaction, the deliveries of rows whose
    /// capture failed (those rows are left unchanged): `$1` run, `$2`
    /// retained type, `$3` tenant, then per delivery `$4` record ids,
    /// `$5` handler ids, `$6` ranks, `$7` errors.
    pub(crate) fn dead_letter_captures(schema: &SchemaName) -> String {
        format!(
            "INSERT INTO {work} (detail_id, run_id, retained_entity_id, record_id, tenant_id, handler_id, \
                 priority, state, attempts, not_before, after_sweep_settled, last_error, created_at, updated_at) \
             SELECT NULL, $1, $2, u.r, $3, u.h, u.p, 'DeadLettered', 0, pg_catalog.statement_timestamp(), \
                    false, u.e, pg_catalog.statement_timestamp(), pg_catalog.statement_timestamp() \
             FROM ROWS FROM (pg_catalog.unnest($4::pg_catalog.text[]), pg_catalog.unnest($5::pg_catalog.text[]), \
                             pg_catalog.unnest($6::pg_catalog.int4[]), pg_catalog.unnest($7::pg_catalog.text[])) \
                  AS u(r, h, p, e)",
            work = schema.table("sweep_row_handler_status"),
        )
    }

    /// The body of a CTE that queues one delivery per handler for each row
    /// detail CTE `det` inserted (columns `detail_id`, `record_id`): `run`,
    /// `entity`, `tenant` are placeholders, `handlers` the SQL of a
    /// `ROWS FROM` giving `hs(id, rank, after)`. The rank-0 delivery is due
    /// at once; the others wait (`not_before = infinity`) for the one before.
    pub(crate) fn queue_cte(
        schema: &SchemaName,
        run: &str,
        entity: &str,
        tenant: &str,
        handlers: &str,
    ) -> String {
        format!(
            "INSERT INTO {work} (detail_id, run_id, retained_entity_id, record_id, tenant_id, handler_id, \
                 priority, state, attempts, not_before, after_sweep_settled, created_at, updated_at) \
             SELECT det.detail_id, {run}, {entity}, det.record_id, {tenant}, hs.id, hs.rank, 'Pending', 0, \
                    CASE WHEN hs.rank = 0 THEN pg_catalog.statement_timestamp() \
                         ELSE 'infinity'::pg_catalog.timestamptz END, \
                    hs.after, pg_catalog.statement_timestamp(), pg_catalog.statement_timestamp() \
             FROM det CROSS JOIN {handlers}",
            work = schema.table("sweep_row_handler_status"),
        )
    }

    /// The backstop: clears payloads captured more than `$1` (interval) ago.
    /// Deliveries still waiting for them dead-letter at their next claim,
    /// naming the scrub. Returns how many payloads it cleared.
    pub(crate) fn scrub(&self) -> String {
        format!(
            "UPDATE {details} SET captured_payload = NULL \
             WHERE captured_payload IS NOT NULL \
               AND created_at < pg_catalog.clock_timestamp() - $1::pg_catalog.interval",
            details = self.details,
        )
    }
}
