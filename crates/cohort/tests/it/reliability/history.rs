//! The randomized concurrency suite (contract R1; `docs/reliability.md`).
//!
//! Several tasks, each on connections of its own, interleave hold creation
//! (through the API, on a connection of its own or in a caller's
//! transaction that lingers and sometimes rolls back, and with plain SQL),
//! hold removal, sweeps of every strategy (purge, soft delete, built-in
//! anonymisation; a quarter of them dry runs), erasures (a quarter dry runs),
//! host deletions through the deletion service, and inserts of new rows,
//! with random pauses from a seeded generator. A checker then proves, from
//! the mutation log, the holds' commit-order record and the ledger:
//!
//! - no row was mutated by a transaction that committed after a hold on that
//!   row committed (while the hold was unremoved);
//! - every mutation by Cohort has exactly one row detail (same transaction,
//!   same action, a real run) and every row detail matches one mutation;
//! - every summary's affected count equals the rows its run changed, and
//!   every result the API returned agrees with the ledger;
//! - every run and summary is settled.
//!
//! `COHORT_RELIABILITY_OPS` sets the number of operations (default 2,000),
//! `COHORT_RELIABILITY_WORKERS` the number of tasks (default 4) and
//! `COHORT_RELIABILITY_SEED` the seed (printed on every run). Run with
//! `--nocapture` to see the tallies.

use super::harness::*;

// contract: R1, H1, H11, DL1, A2, A4, X15, W4, RH3
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_random_history_of_holds_sweeps_erasures_and_host_deletions_checks_clean() {
    let start = std::time::Instant::now();
    let seed = seed();
    let ops = env_u64("COHORT_RELIABILITY_OPS", 2_000);
    let workers = env_u64("COHORT_RELIABILITY_WORKERS", 4);
    // Small batches, so a run is many transactions.
    let world = world_with(150, options(7), true).await;
    run_workload(&world, seed, workers, ops).await;
    // One last real sweep, so the end state is checked after a quiet run too,
    // then every queued delivery is made.
    let mut rng = Rng::new(seed);
    sweep(&world, &mut rng).await;
    drain(&world).await;
    let report = check(&world).await;
    assert_clean(
        &world,
        &report,
        &format!("R1: {ops} operations, {workers} workers, seed {seed}"),
    );
    println!("R1 finished in {:.1} s", elapsed(start));
}

/// The same history with every range batch in physical order (page ranges;
/// `docs/design.md`, "Two batch orders"): the checker's promises hold there too.
// contract: R1, H1, H11, X15, X18
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_physical_order_a_random_history_checks_clean() {
    let start = std::time::Instant::now();
    let seed = seed();
    let ops = env_u64("COHORT_RELIABILITY_OPS", 2_000);
    let workers = env_u64("COHORT_RELIABILITY_WORKERS", 4);
    let options = cohort::Options {
        batch_order: cohort::BatchOrder::Physical,
        ..options(7)
    };
    let world = world_with(150, options, true).await;
    run_workload(&world, seed, workers, ops).await;
    let mut rng = Rng::new(seed);
    sweep(&world, &mut rng).await;
    drain(&world).await;
    let report = check(&world).await;
    assert_clean(
        &world,
        &report,
        &format!("R1, physical order: {ops} operations, {workers} workers, seed {seed}"),
    );
    let paged: i64 = sqlx::query_scalar("SELECT count(*) FROM public.rel_log WHERE paged")
        .fetch_one(world.db.pool())
        .await
        .expect("log");
    assert!(paged > 0, "no row was changed by a page-range batch");
    println!("rows changed by page-range batches: {paged}");
    println!("R1 in physical order finished in {:.1} s", elapsed(start));
}

/// The checker is not vacuous: a row deleted behind Cohort's back after its
/// hold committed, a detail-less "Cohort" mutation and a tampered summary
/// are each reported.
// contract: R1
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_checker_reports_a_held_row_mutated_a_missing_detail_and_a_wrong_count() {
    let world = world(10, options(7)).await;
    let mut rng = Rng::new(1);
    sweep(&world, &mut rng).await;
    assert!(check(&world).await.problems.is_empty());
    // A hold on a note the sweep left (a fresh one), committed; then the row
    // is deleted without the fence and without a row detail, logged as if
    // Cohort did it.
    let fresh: i64 = sqlx::query_scalar("SELECT min(id) FROM public.rel_notes")
        .fetch_one(world.db.pool())
        .await
        .expect("a note left");
    let mut conn = world.db.connect_engine().await;
    world
        .cohort
        .holds()
        .create(
            &mut conn,
            cohort::holds::HoldRequest::new(
                uuid::Uuid::from_u128(NOTES),
                fresh.to_string(),
                Some(tenant()),
                "control",
                chrono::Utc::now(),
            ),
        )
        .await
        .expect("hold");
    world
        .db
        .exec(&format!("DELETE FROM public.rel_notes WHERE id = {fresh}"))
        .await;
    world
        .db
        .exec(
            "UPDATE public.sweep_run_entity_summary SET affected_count = affected_count + 1 \
             WHERE run_id = (SELECT run_id FROM public.sweep_run LIMIT 1) \
               AND retained_entity_id = 'f0000000-0000-4000-8000-000000000002'",
        )
        .await;
    let report = check(&world).await;
    let text = report.problems.join("\n");
    assert_eq!(report.problems.len(), 4, "{text}");
    assert!(text.contains("after a hold on it committed: 1"), "{text}");
    assert!(
        text.contains("without exactly one row detail in its transaction: 1"),
        "{text}"
    );
    assert!(text.contains("summary's affected count differs"), "{text}");
    assert!(
        text.contains("result disagrees with its ledger summary"),
        "{text}"
    );
}
