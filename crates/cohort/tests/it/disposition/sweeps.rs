//! What a sweep does under review (contracts DR1, DR2): it freezes and
//! changes nothing; approved, it changes exactly the batch's rows that are
//! still eligible and not held; a changed rule voids the batch; extended,
//! rejected and auto-approved batches; stages; previews and dry runs;
//! erasure is not under review.

use chrono::Duration;
use cohort::disposition::{BatchStatus, DecisionKind, DispositionAction};
use cohort::{ErasureRequest, Options, Period, Review, Rule, RunStatus, Strategy, SweepOptions};

use super::*;
use crate::support::fixtures::{now_s, scope_a};

// contract: DR1
#[tokio::test]
async fn a_reviewed_rule_freezes_what_it_would_change_and_changes_nothing() {
    let db = invoices_db().await;
    let now = now_s();
    for id in 1..=5 {
        invoice(&db, id, now, 400).await;
    }
    invoice(&db, 6, now, 10).await; // young
    let rule = reviewed(Review::new());
    let cohort = build_with(&db, rules(rule.clone())).await;
    hold(&db, 5).await; // held before the freeze

    let result = cohort.sweep(&scope_a(), now).await.expect("sweep");
    assert_eq!(result.status, RunStatus::Succeeded, "{result:#?}");
    assert_eq!(result.affected(), 0, "nothing changed: {result:#?}");
    assert_eq!(ids(&db).await, vec![1, 2, 3, 4, 5, 6]);

    let batch = only_batch(&cohort, &db).await;
    assert_eq!(batch.status, BatchStatus::Pending);
    assert_eq!(batch.rows, 4, "the eligible rows, not the held one");
    assert_eq!(batch.entity_type, "Invoice");
    assert_eq!(batch.strategy, "Purge");
    assert_eq!(batch.stage, 0);
    assert_eq!(batch.run_id, result.run_id);
    assert_eq!(batch.frozen_at, now);
    let content = rule.content(0);
    assert_eq!(batch.rule_hash, hex::encode(content.hash));
    assert_eq!(batch.rule_content, content.text);
    assert_eq!(
        frozen(&cohort, &db, batch.batch_id).await,
        ["1", "2", "3", "4"]
    );
    assert_eq!(
        result
            .dispositions
            .iter()
            .map(|d| &d.action)
            .collect::<Vec<_>>(),
        [&DispositionAction::Frozen { rows: 4 }]
    );
    let d = decisions(&cohort, &db, batch.batch_id).await;
    assert_eq!(d.len(), 1);
    assert_eq!(d[0].kind, DecisionKind::Frozen);
    assert_eq!(d[0].decided_by, "cohort");
    assert_eq!(d[0].rows, Some(4));
    assert_eq!(d[0].rule_hash, batch.rule_hash);

    // Sweeps before a decision change nothing and freeze nothing again.
    let again = cohort
        .sweep(&scope_a(), now + Duration::days(1))
        .await
        .expect("sweep");
    assert_eq!(again.affected(), 0);
    assert!(again.dispositions.is_empty(), "{again:#?}");
    assert_eq!(batches(&cohort, &db).await.len(), 1);
    assert_eq!(ids(&db).await, vec![1, 2, 3, 4, 5, 6]);
    // A row that became eligible since is frozen into a batch of its own.
    let later = cohort
        .sweep(&scope_a(), now + Duration::days(400))
        .await
        .expect("sweep");
    assert_eq!(later.affected(), 0);
    let all = batches(&cohort, &db).await;
    assert_eq!(all.len(), 2);
    assert_eq!(frozen(&cohort, &db, all[1].batch_id).await, ["6"]);
    assert_eq!(ids(&db).await, vec![1, 2, 3, 4, 5, 6]);
}

// contract: DR2
#[tokio::test]
async fn approval_lets_the_next_sweep_change_exactly_the_approved_rows_still_eligible() {
    let db = invoices_db().await;
    let now = now_s();
    for id in 1..=5 {
        invoice(&db, id, now, 400).await;
    }
    let cohort = build_with(&db, rules(reviewed(Review::new()))).await;
    cohort.sweep(&scope_a(), now).await.expect("freeze");
    let batch = only_batch(&cohort, &db).await;
    assert_eq!(batch.rows, 5);

    // After the freeze: row 2 is held, row 3 became young again (its
    // anchor moved), row 4 was deleted by the host, and row 7 became
    // eligible (it is in no batch).
    hold(&db, 2).await;
    db.exec(&format!(
        "UPDATE public.invoices SET issued_at = '{}' WHERE id = 3",
        (now - Duration::days(5)).to_rfc3339()
    ))
    .await;
    db.exec("DELETE FROM public.invoices WHERE id = 4").await;
    invoice(&db, 7, now, 500).await;

    let mut conn = db.engine_pool().acquire().await.expect("connection");
    let approved = cohort
        .dispositions()
        .approve(&mut conn, batch.batch_id, "Ann Archivist")
        .await
        .expect("approve");
    assert_eq!(approved.status, BatchStatus::Approved);
    assert_eq!(approved.approvals, ["Ann Archivist"]);
    assert_eq!(
        ids(&db).await,
        vec![1, 2, 3, 5, 7],
        "approval changes no row"
    );

    let result = cohort.sweep(&scope_a(), now).await.expect("sweep");
    assert_eq!(result.status, RunStatus::Succeeded, "{result:#?}");
    assert_eq!(result.affected(), 2, "rows 1 and 5: {result:#?}");
    assert_eq!(
        ids(&db).await,
        vec![2, 3, 7],
        "held, young again, never approved"
    );
    let done = cohort
        .dispositions()
        .get(&mut conn, batch.batch_id)
        .await
        .expect("get")
        .expect("batch");
    assert_eq!(done.status, BatchStatus::CarriedOut);
    assert_eq!(done.carried_run_id, Some(result.run_id));
    assert_eq!(done.changed, Some(2));
    assert_eq!(done.held, Some(1), "row 2");
    assert_eq!(done.left, Some(0));
    assert_eq!(done.ineligible, Some(2), "row 3 young again, row 4 gone");
    let d = decisions(&cohort, &db, batch.batch_id).await;
    let kinds: Vec<DecisionKind> = d.iter().map(|d| d.kind).collect();
    assert_eq!(
        kinds,
        [
            DecisionKind::Frozen,
            DecisionKind::Approved,
            DecisionKind::CarriedOut
        ]
    );
    assert_eq!(d[1].decided_by, "Ann Archivist");
    assert!(!d[1].automatic);
    assert_eq!(d[2].changed, Some(2));
    assert_eq!(d[2].held, Some(1));
    assert_eq!(d[2].ineligible, Some(2));
    assert_eq!(d[2].run_id, Some(result.run_id));
    assert!(
        result.dispositions.iter().any(|a| a.action
            == DispositionAction::CarriedOut {
                changed: 2,
                held: 1,
                left: 0,
                ineligible: 2
            }),
        "{result:#?}"
    );
    // Row 7 went into a new batch, unchanged.
    let all = batches(&cohort, &db).await;
    assert_eq!(all.len(), 2);
    assert_eq!(all[1].status, BatchStatus::Pending);
    assert_eq!(frozen(&cohort, &db, all[1].batch_id).await, ["7"]);

    // The carried-out batch is not carried out again.
    let next = cohort.sweep(&scope_a(), now).await.expect("sweep");
    assert_eq!(next.affected(), 0);
    assert_eq!(ids(&db).await, vec![2, 3, 7]);
}

// contract: DR2
#[tokio::test]
async fn a_changed_rule_voids_its_batch_and_freezes_again() {
    let db = invoices_db().await;
    let now = now_s();
    for id in 1..=3 {
        invoice(&db, id, now, 400).await;
    }
    let first = reviewed(Review::new());
    let provider = rules(first.clone());
    let cohort = build_with(&db, provider.clone()).await;
    cohort.sweep(&scope_a(), now).await.expect("freeze");
    let old = only_batch(&cohort, &db).await;
    let mut conn = db.engine_pool().acquire().await.expect("connection");
    cohort
        .dispositions()
        .approve(&mut conn, old.batch_id, "ann")
        .await
        .expect("approve");

    // The rule's content changes (a longer period would keep row 3 too;
    // here its provenance changes): the approved batch is voided, not
    // carried out.
    let second = first
        .clone()
        .with_provenance("policy-2027", "records schedule 4.2");
    provider.set("invoices", crate::support::Answer::Rule(second.clone()));
    let result = cohort.sweep(&scope_a(), now).await.expect("sweep");
    assert_eq!(result.affected(), 0, "{result:#?}");
    assert_eq!(ids(&db).await, vec![1, 2, 3]);
    let all = batches(&cohort, &db).await;
    assert_eq!(all.len(), 2, "{all:#?}");
    assert_eq!(all[0].status, BatchStatus::Voided);
    assert_eq!(all[1].status, BatchStatus::Pending);
    assert_eq!(all[1].rule_hash, hex::encode(second.content(0).hash));
    assert_ne!(all[0].rule_hash, all[1].rule_hash);
    assert_eq!(frozen(&cohort, &db, all[1].batch_id).await, ["1", "2", "3"]);
    let kinds: Vec<DecisionKind> = decisions(&cohort, &db, old.batch_id)
        .await
        .iter()
        .map(|d| d.kind)
        .collect();
    assert_eq!(
        kinds,
        [
            DecisionKind::Frozen,
            DecisionKind::Approved,
            DecisionKind::Voided
        ]
    );
    assert!(
        result
            .dispositions
            .iter()
            .any(|a| a.batch_id == old.batch_id && a.action == DispositionAction::Voided)
    );

    // A rule that no longer asks for review voids the pending batch and
    // sweeps as usual.
    provider.set(
        "invoices",
        crate::support::Answer::Rule(Rule::new(Period::days(365), Strategy::Purge)),
    );
    let plain = cohort.sweep(&scope_a(), now).await.expect("sweep");
    assert_eq!(plain.affected(), 3);
    assert!(ids(&db).await.is_empty());
    let all = batches(&cohort, &db).await;
    assert_eq!(all[1].status, BatchStatus::Voided);
}

// contract: DR2
#[tokio::test]
async fn two_approvers_must_be_two_people() {
    let db = invoices_db().await;
    let now = now_s();
    for id in 1..=2 {
        invoice(&db, id, now, 400).await;
    }
    let cohort = build_with(&db, rules(reviewed(Review::new().approvers(2)))).await;
    cohort.sweep(&scope_a(), now).await.expect("freeze");
    let batch = only_batch(&cohort, &db).await;
    assert_eq!(batch.approvers_required, 2);
    let mut conn = db.engine_pool().acquire().await.expect("connection");
    let once = cohort
        .dispositions()
        .approve(&mut conn, batch.batch_id, "ann")
        .await
        .expect("first approval");
    assert_eq!(once.status, BatchStatus::Pending, "one of two");
    assert_eq!(once.approvals, ["ann"]);
    // One approval of two lets nothing go.
    let result = cohort.sweep(&scope_a(), now).await.expect("sweep");
    assert_eq!(result.affected(), 0);
    assert_eq!(ids(&db).await, vec![1, 2]);
    // The same person again, however spelled: refused, nothing written.
    let before = decision_count(&db).await;
    let err = cohort
        .dispositions()
        .approve(&mut conn, batch.batch_id, "  ANN ")
        .await
        .expect_err("same approver");
    assert!(
        matches!(
            &err,
            cohort::Error::Disposition(cohort::disposition::DispositionError::SameApprover { .. })
        ),
        "{err:?}"
    );
    assert_eq!(decision_count(&db).await, before);
    let twice = cohort
        .dispositions()
        .approve(&mut conn, batch.batch_id, "bob")
        .await
        .expect("second approval");
    assert_eq!(twice.status, BatchStatus::Approved);
    assert_eq!(twice.approvals, ["ann", "bob"]);
    let result = cohort.sweep(&scope_a(), now).await.expect("sweep");
    assert_eq!(result.affected(), 2);
    assert!(ids(&db).await.is_empty());
}

// contract: DR2
#[tokio::test]
async fn an_extended_batch_keeps_its_rows_until_the_date_then_offers_them_again() {
    let db = invoices_db().await;
    let now = now_s();
    for id in 1..=3 {
        invoice(&db, id, now, 400).await;
    }
    let cohort = build_with(&db, rules(reviewed(Review::new()))).await;
    cohort.sweep(&scope_a(), now).await.expect("freeze");
    let batch = only_batch(&cohort, &db).await;
    let until = now + Duration::days(30);
    let mut conn = db.engine_pool().acquire().await.expect("connection");
    let extended = cohort
        .dispositions()
        .extend(&mut conn, batch.batch_id, "ann", until)
        .await
        .expect("extend");
    assert_eq!(extended.status, BatchStatus::Extended);
    assert_eq!(extended.keep_until, Some(until));
    // Before the date: kept, and not offered again.
    let before = cohort
        .sweep(&scope_a(), until - Duration::seconds(1))
        .await
        .expect("sweep");
    assert_eq!(before.affected(), 0);
    assert!(before.dispositions.is_empty(), "{before:#?}");
    assert_eq!(ids(&db).await, vec![1, 2, 3]);
    // At the date: offered again in a new batch, still unchanged.
    let at = cohort.sweep(&scope_a(), until).await.expect("sweep");
    assert_eq!(at.affected(), 0);
    let all = batches(&cohort, &db).await;
    assert_eq!(all.len(), 2, "{all:#?}");
    assert_eq!(all[0].status, BatchStatus::Extended);
    assert_eq!(frozen(&cohort, &db, all[1].batch_id).await, ["1", "2", "3"]);
    assert_eq!(ids(&db).await, vec![1, 2, 3]);
}

// contract: DR2
#[tokio::test]
async fn a_rejected_batch_is_not_offered_again_until_its_reoffer_period_or_a_rule_change() {
    let db = invoices_db().await;
    let now = now_s();
    for id in 1..=2 {
        invoice(&db, id, now, 400).await;
    }
    let rule = reviewed(Review::new().reoffer_after(Period::days(90)));
    let provider = rules(rule.clone());
    let cohort = build_with(&db, provider.clone()).await;
    cohort.sweep(&scope_a(), now).await.expect("freeze");
    let batch = only_batch(&cohort, &db).await;
    let mut conn = db.engine_pool().acquire().await.expect("connection");
    let rejected = cohort
        .dispositions()
        .reject(&mut conn, batch.batch_id, "bob", "audit 2026-17 still open")
        .await
        .expect("reject");
    assert_eq!(rejected.status, BatchStatus::Rejected);
    let keep = rejected.keep_until.expect("kept until");
    assert!(
        keep > now + Duration::days(89) && keep < now + Duration::days(91),
        "{keep}"
    );
    let d = decisions(&cohort, &db, batch.batch_id).await;
    assert_eq!(d[1].kind, DecisionKind::Rejected);
    assert_eq!(d[1].reason.as_deref(), Some("audit 2026-17 still open"));

    let soon = cohort
        .sweep(&scope_a(), now + Duration::days(30))
        .await
        .expect("sweep");
    assert_eq!(soon.affected(), 0);
    assert!(soon.dispositions.is_empty(), "not offered again: {soon:#?}");
    // After the re-offer period: offered again.
    let later = cohort
        .sweep(&scope_a(), now + Duration::days(92))
        .await
        .expect("sweep");
    assert_eq!(later.affected(), 0);
    assert_eq!(batches(&cohort, &db).await.len(), 2);
    assert_eq!(ids(&db).await, vec![1, 2]);

    // A rule change offers rejected rows again at once.
    let db2 = invoices_db().await;
    for id in 1..=2 {
        invoice(&db2, id, now, 400).await;
    }
    let provider2 = rules(rule.clone());
    let cohort2 = build_with(&db2, provider2.clone()).await;
    cohort2.sweep(&scope_a(), now).await.expect("freeze");
    let b = only_batch(&cohort2, &db2).await;
    let mut conn2 = db2.engine_pool().acquire().await.expect("connection");
    cohort2
        .dispositions()
        .reject(&mut conn2, b.batch_id, "bob", "not yet")
        .await
        .expect("reject");
    provider2.set(
        "invoices",
        crate::support::Answer::Rule(rule.with_legal_minimum(Period::days(100))),
    );
    cohort2.sweep(&scope_a(), now).await.expect("sweep");
    let all = batches(&cohort2, &db2).await;
    assert_eq!(all.len(), 2, "{all:#?}");
    assert_eq!(all[0].status, BatchStatus::Rejected, "a decision stays");
    assert_eq!(all[1].status, BatchStatus::Pending);
    assert_eq!(all[1].rows, 2);
}

// contract: DR2, DR3
#[tokio::test]
async fn auto_approval_after_the_set_time_is_recorded_as_such() {
    let db = invoices_db().await;
    let now = now_s();
    for id in 1..=3 {
        invoice(&db, id, now, 400).await;
    }
    let cohort = build_with(
        &db,
        rules(reviewed(
            Review::new()
                .approvers(2)
                .auto_approve_after(Period::days(14)),
        )),
    )
    .await;
    cohort.sweep(&scope_a(), now).await.expect("freeze");
    let batch = only_batch(&cohort, &db).await;
    assert_eq!(batch.auto_approve_at, Some(now + Duration::days(14)));
    // Before the time (by the injected clock): nothing.
    let early = cohort
        .sweep(
            &scope_a(),
            now + Duration::days(14) - Duration::microseconds(1),
        )
        .await
        .expect("sweep");
    assert_eq!(early.affected(), 0);
    assert_eq!(ids(&db).await, vec![1, 2, 3]);
    // At it: approved by `auto` and carried out in the same sweep.
    let due = cohort
        .sweep(&scope_a(), now + Duration::days(14))
        .await
        .expect("sweep");
    assert_eq!(due.affected(), 3, "{due:#?}");
    assert!(ids(&db).await.is_empty());
    let d = decisions(&cohort, &db, batch.batch_id).await;
    let kinds: Vec<DecisionKind> = d.iter().map(|d| d.kind).collect();
    assert_eq!(
        kinds,
        [
            DecisionKind::Frozen,
            DecisionKind::Approved,
            DecisionKind::CarriedOut
        ]
    );
    assert_eq!(d[1].decided_by, "auto");
    assert!(d[1].automatic);
    assert_eq!(d[1].run_id, Some(due.run_id));
    assert_eq!(
        due.dispositions
            .iter()
            .map(|a| &a.action)
            .take(1)
            .collect::<Vec<_>>(),
        [&DispositionAction::AutoApproved]
    );
}

// contract: DR1, DR2
#[tokio::test]
async fn a_stage_under_review_waits_while_the_stage_before_it_runs() {
    let db = invoices_db().await;
    let now = now_s();
    // 1: soft-deleted 100 days ago (the purge stage's candidate); 2: live
    // and old (the soft-delete stage takes it without review).
    invoice(&db, 1, now, 400).await;
    invoice(&db, 2, now, 400).await;
    db.exec(&format!(
        "UPDATE public.invoices SET is_deleted = true, deleted_at = '{}' WHERE id = 1",
        (now - Duration::days(100)).to_rfc3339()
    ))
    .await;
    let rule = Rule::new(Period::days(365), Strategy::SoftDelete).then_reviewed(
        Period::days(60),
        Strategy::Purge,
        Review::new(),
    );
    let cohort = build_with(&db, rules(rule.clone())).await;
    let result = cohort.sweep(&scope_a(), now).await.expect("sweep");
    assert_eq!(result.status, RunStatus::Succeeded, "{result:#?}");
    assert_eq!(result.affected(), 1, "row 2 soft-deleted: {result:#?}");
    assert_eq!(ids(&db).await, vec![1, 2], "nothing purged");
    let batch = only_batch(&cohort, &db).await;
    assert_eq!(batch.stage, 1);
    assert_eq!(batch.strategy, "Purge");
    assert_eq!(batch.rule_hash, hex::encode(rule.content(1).hash));
    assert_eq!(frozen(&cohort, &db, batch.batch_id).await, ["1"]);
    let mut conn = db.engine_pool().acquire().await.expect("connection");
    cohort
        .dispositions()
        .approve(&mut conn, batch.batch_id, "ann")
        .await
        .expect("approve");
    let result = cohort.sweep(&scope_a(), now).await.expect("sweep");
    assert_eq!(
        ids(&db).await,
        vec![2],
        "row 1 purged; row 2 only just soft-deleted"
    );
    assert!(
        result
            .dispositions
            .iter()
            .any(|a| matches!(a.action, DispositionAction::CarriedOut { changed: 1, .. }))
    );
}

// contract: DR1
#[tokio::test]
async fn previews_and_dry_runs_say_what_review_holds_back_and_change_nothing() {
    let db = invoices_db().await;
    let now = now_s();
    for id in 1..=4 {
        invoice(&db, id, now, 400).await;
    }
    let cohort = build_with(&db, rules(reviewed(Review::new()))).await;
    let preview = cohort.preview(&scope_a(), now).await.expect("preview");
    let entry = &preview.entries[0];
    assert!(entry.review);
    assert_eq!(entry.eligible, 0, "nothing approved");
    assert_eq!(entry.awaiting_review, Some(4));
    let dry = cohort
        .sweep_with(&scope_a(), now, SweepOptions::default().dry_run())
        .await
        .expect("dry run");
    assert_eq!(dry.affected(), 0);
    assert!(
        batches(&cohort, &db).await.is_empty(),
        "a dry run freezes nothing"
    );

    cohort.sweep(&scope_a(), now).await.expect("freeze");
    let batch = only_batch(&cohort, &db).await;
    let mut conn = db.engine_pool().acquire().await.expect("connection");
    cohort
        .dispositions()
        .approve(&mut conn, batch.batch_id, "ann")
        .await
        .expect("approve");
    let preview = cohort.preview(&scope_a(), now).await.expect("preview");
    assert_eq!(preview.entries[0].eligible, 4);
    assert_eq!(preview.entries[0].awaiting_review, Some(0));
    let dry = cohort
        .sweep_with(&scope_a(), now, SweepOptions::default().dry_run())
        .await
        .expect("dry run");
    assert_eq!(dry.affected(), 4);
    assert_eq!(ids(&db).await, vec![1, 2, 3, 4]);
    assert_eq!(only_batch(&cohort, &db).await.status, BatchStatus::Approved);
}

// contract: DR1
#[tokio::test]
async fn erasure_is_not_under_review() {
    let db = invoices_db().await;
    let now = now_s();
    invoice(&db, 1, now, 400).await;
    invoice(&db, 2, now, 10).await;
    let cohort = build_with(&db, rules(reviewed(Review::new()))).await;
    let result = cohort
        .erase(
            &scope_a(),
            now,
            ErasureRequest::new("customer1@example.org"),
        )
        .await
        .expect("erase");
    assert_eq!(result.affected(), 1, "{result:#?}");
    assert_eq!(ids(&db).await, vec![2]);
    assert!(batches(&cohort, &db).await.is_empty());
    assert!(result.dispositions.is_empty());
}

// contract: DR1
#[tokio::test]
async fn a_large_freeze_goes_in_keyset_batches_and_is_carried_out_whole() {
    let db = invoices_db().await;
    let now = now_s();
    db.exec(&format!(
        "INSERT INTO public.invoices (id, tenant_id, issued_at, email) \
         SELECT g, '{}', '{}'::timestamptz - (g || ' seconds')::interval, 'c' || g || '@example.org' \
         FROM generate_series(1, 25000) AS g",
        crate::support::fixtures::tenant_a(),
        (now - Duration::days(400)).to_rfc3339()
    ))
    .await;
    let options = Options {
        batch_size: 1000,
        ..Options::default()
    };
    let cohort = build_opts(&db, rules(reviewed(Review::new())), options).await;
    cohort.sweep(&scope_a(), now).await.expect("freeze");
    let batch = only_batch(&cohort, &db).await;
    assert_eq!(batch.rows, 25_000);
    assert_eq!(
        count(&db, "SELECT count(*) FROM retention_disposition_records").await,
        25_000
    );
    let mut conn = db.engine_pool().acquire().await.expect("connection");
    cohort
        .dispositions()
        .approve(&mut conn, batch.batch_id, "ann")
        .await
        .expect("approve");
    let result = cohort.sweep(&scope_a(), now).await.expect("carry out");
    assert_eq!(result.affected(), 25_000);
    assert_eq!(count(&db, "SELECT count(*) FROM public.invoices").await, 0);
}

// contract: DR2
#[tokio::test]
async fn a_matter_written_after_approval_still_protects_the_approved_rows() {
    let db = invoices_db().await;
    let now = now_s();
    for id in 1..=3 {
        invoice(&db, id, now, 400).await;
    }
    let cohort = build_with(&db, rules(reviewed(Review::new()))).await;
    cohort.sweep(&scope_a(), now).await.expect("freeze");
    let batch = only_batch(&cohort, &db).await;
    let mut conn = db.engine_pool().acquire().await.expect("connection");
    cohort
        .dispositions()
        .approve(&mut conn, batch.batch_id, "ann")
        .await
        .expect("approve");
    // A matter over every invoice of the tenant, after the approval.
    cohort
        .matters()
        .create(
            &mut conn,
            cohort::holds::MatterRequest::of::<Invoice>(
                Some(crate::support::fixtures::tenant_a()),
                "Tax audit FY2025",
                "cfo@example.com",
            ),
        )
        .await
        .expect("matter");
    let result = cohort.sweep(&scope_a(), now).await.expect("sweep");
    assert_eq!(result.affected(), 0, "{result:#?}");
    assert_eq!(ids(&db).await, vec![1, 2, 3]);
    let done = only_batch(&cohort, &db).await;
    assert_eq!(done.status, BatchStatus::CarriedOut);
    assert_eq!(done.held, Some(3), "kept by the matter, counted");
    assert_eq!(done.changed, Some(0));
}
