//! Tests of the network as a whole: golden facts, caps, errors, batching, scale, and a
//! property test that drives it against a from-scratch solve.

use std::collections::BTreeMap;
use std::time::Instant;

use proptest::prelude::*;

use super::network::time_tol;
use super::test_support::{assert_close, close, dedup, flow_set, max_min_violation, Lcg, GBPS};
use super::*;

/// Runs the network to completion; returns (id, finish ms) in pop order.
fn drain(net: &mut LinkNetwork) -> Vec<(FlowId, f64)> {
    let mut out = Vec::new();
    while let Some(t) = net.next_finish_ms().unwrap() {
        let ids = net.pop_finished(t).unwrap();
        assert!(!ids.is_empty(), "a finish event at {t} popped nothing");
        out.extend(ids.into_iter().map(|id| (id, t)));
    }
    assert_eq!(net.active_flows(), 0);
    out
}

// ---- Golden facts ----

#[test]
fn two_transfers_into_one_receive_link_take_twice_as_long() {
    // Links: P0, P1 send; D0 receive.
    let mut net = LinkNetwork::new(vec![GBPS; 3]).unwrap();
    let a = net.start_flow(0.0, &[0, 2], 128e6, None).unwrap();
    let b = net.start_flow(0.0, &[1, 2], 128e6, None).unwrap();
    net.commit().unwrap();
    assert_close(net.rate(a).unwrap(), 0.5 * GBPS, 1e-12);
    let done = drain(&mut net);
    assert_eq!(done.len(), 2);
    for (_, t) in done {
        assert_close(t, 256.0, 1e-12);
    }
    assert_eq!(net.rate(b), None);
    assert_close(net.link_bytes(2), 256e6, 1e-12);
}

#[test]
fn two_transfers_from_one_send_link_take_twice_as_long() {
    // Links: P0 send; D0, D1 receive.
    let mut net = LinkNetwork::new(vec![GBPS; 3]).unwrap();
    net.start_flow(0.0, &[0, 1], 128e6, None).unwrap();
    net.start_flow(0.0, &[0, 2], 128e6, None).unwrap();
    for (_, t) in drain(&mut net) {
        assert_close(t, 256.0, 1e-12);
    }
}

#[test]
fn transfers_on_separate_links_do_not_interfere() {
    let mut net = LinkNetwork::new(vec![GBPS; 4]).unwrap();
    net.start_flow(0.0, &[0, 2], 128e6, None).unwrap();
    net.start_flow(0.0, &[1, 3], 128e6, None).unwrap();
    let done = drain(&mut net);
    assert_eq!(done.len(), 2);
    for (_, t) in done {
        assert_close(t, 128.0, 1e-12);
    }
}

#[test]
fn worked_example() {
    // P0, P1, D0 at 1 GB/s, D1 at 0.3 GB/s; A: P0->D0, B: P0->D1, C: P1->D1.
    let caps = [GBPS, GBPS, GBPS, 0.3 * GBPS];
    let flows = vec![vec![0, 2], vec![0, 3], vec![1, 3]];
    let rates = max_min_rates(&flows, &caps, None).unwrap();
    assert_close(rates[0], 0.85 * GBPS, 1e-12);
    assert_close(rates[1], 0.15 * GBPS, 1e-12);
    assert_close(rates[2], 0.15 * GBPS, 1e-12);
    assert_eq!(
        max_min_violation(&flows, &caps, &[f64::INFINITY; 3], &rates),
        None
    );

    let mut net = LinkNetwork::new(caps.to_vec()).unwrap();
    let ids: Vec<_> = flows
        .iter()
        .map(|f| net.start_flow(0.0, f, 1e9, None).unwrap())
        .collect();
    net.commit().unwrap();
    for (id, want) in ids.iter().zip(&rates) {
        assert_close(net.rate(*id).unwrap(), *want, 1e-12);
    }
}

// ---- Caps ----

#[test]
fn capped_flow_leaves_spare_bandwidth_to_others() {
    let flows = vec![vec![0], vec![0], vec![0]];
    let caps = [0.2 * GBPS, f64::INFINITY, f64::INFINITY];
    let rates = max_min_rates(&flows, &[GBPS], Some(&caps)).unwrap();
    assert_close(rates[0], 0.2 * GBPS, 1e-12);
    assert_close(rates[1], 0.4 * GBPS, 1e-12);
    assert_close(rates[2], 0.4 * GBPS, 1e-12);
    assert_eq!(max_min_violation(&flows, &[GBPS], &caps, &rates), None);

    // Same through the network, where the capped flow forms its own group.
    let mut net = LinkNetwork::new(vec![GBPS, GBPS]).unwrap();
    let a = net.start_flow(0.0, &[0, 1], 1e9, Some(0.2 * GBPS)).unwrap();
    let b = net.start_flow(0.0, &[0, 1], 1e9, None).unwrap();
    let c = net.start_flow(0.0, &[0, 1], 1e9, None).unwrap();
    net.commit().unwrap();
    assert_close(net.rate(a).unwrap(), 0.2 * GBPS, 1e-12);
    assert_close(net.rate(b).unwrap(), 0.4 * GBPS, 1e-12);
    assert_close(net.rate(c).unwrap(), 0.4 * GBPS, 1e-12);
}

#[test]
fn capped_flow_alone_runs_at_its_cap() {
    let mut net = LinkNetwork::new(vec![GBPS]).unwrap();
    net.start_flow(0.0, &[0], 1e6, Some(0.25 * GBPS)).unwrap();
    let done = drain(&mut net);
    assert_close(done[0].1, 4.0, 1e-12);
}

// ---- Errors ----

#[test]
fn network_rejects_bad_starts_without_consuming_ids() {
    let mut net = LinkNetwork::new(vec![1.0, 1.0]).unwrap();
    assert_eq!(
        net.start_flow(0.0, &[], 1.0, None),
        Err(LinkError::EmptyFlow { flow: 0 })
    );
    assert_eq!(
        net.start_flow(0.0, &[2], 1.0, None),
        Err(LinkError::LinkOutOfRange {
            flow: 0,
            link: 2,
            n_links: 2
        })
    );
    assert!(matches!(
        net.start_flow(0.0, &[0], -1.0, None),
        Err(LinkError::BadBytes { flow: 0, .. })
    ));
    assert!(matches!(
        net.start_flow(0.0, &[0], f64::NAN, None),
        Err(LinkError::BadBytes { flow: 0, .. })
    ));
    assert!(matches!(
        net.start_flow(0.0, &[0], 1.0, Some(0.0)),
        Err(LinkError::BadCap { flow: 0, .. })
    ));
    assert!(matches!(
        net.start_flow(f64::NAN, &[0], 1.0, None),
        Err(LinkError::BadTime { .. })
    ));
    assert_eq!(net.start_flow(0.0, &[0], 1.0, None), Ok(FlowId(0)));
    assert_eq!(net.active_flows(), 1);
}

#[test]
fn time_cannot_go_back() {
    let mut net = LinkNetwork::new(vec![1.0]).unwrap();
    net.start_flow(5.0, &[0], 100.0, None).unwrap();
    assert!(matches!(
        net.start_flow(4.0, &[0], 1.0, None),
        Err(LinkError::TimeWentBack { .. })
    ));
    assert!(matches!(
        net.pop_finished(4.0),
        Err(LinkError::TimeWentBack { .. })
    ));
}

#[test]
fn starting_past_an_unpopped_finish_is_an_error() {
    let mut net = LinkNetwork::new(vec![1.0]).unwrap();
    let a = net.start_flow(0.0, &[0], 10.0, None).unwrap();
    assert_eq!(net.next_finish_ms().unwrap(), Some(10.0));
    // A start at the finish instant itself is fine.
    net.start_flow(10.0, &[0], 10.0, None).unwrap();
    let e = net.start_flow(11.0, &[0], 1.0, None).unwrap_err();
    assert_eq!(
        e,
        LinkError::MissedFinish {
            flow: a.0,
            finish_ms: 10.0,
            now_ms: 11.0
        }
    );
}

#[test]
fn stalled_flow_is_an_error_not_a_hang() {
    // The rate is representable but bytes / rate overflows to infinity.
    let mut net = LinkNetwork::new(vec![1e-300]).unwrap();
    net.start_flow(0.0, &[0], 1e300, None).unwrap();
    assert!(matches!(
        net.next_finish_ms(),
        Err(LinkError::Stalled { flow: 0, .. })
    ));
}

// ---- Network behaviour ----

#[test]
fn zero_byte_flows_finish_at_once_without_a_solve() {
    let mut net = LinkNetwork::new(vec![1.0, 1.0]).unwrap();
    let a = net.start_flow(3.0, &[0, 1], 0.0, None).unwrap();
    let b = net.start_flow(3.0, &[0], 0.0, Some(0.5)).unwrap();
    assert_eq!(net.active_flows(), 2);
    assert_eq!(net.next_finish_ms().unwrap(), Some(3.0));
    assert_eq!(net.rate(a), None);
    assert_eq!(net.pop_finished(3.0).unwrap(), vec![a, b]);
    assert_eq!(net.recomputations(), 0);
    assert_eq!(net.active_flows(), 0);
    assert_eq!(net.next_finish_ms().unwrap(), None);
    assert_eq!(net.link_bytes(0), 0.0);
}

#[test]
fn zero_byte_flow_is_ordered_with_others_by_time_then_id() {
    let mut net = LinkNetwork::new(vec![1.0]).unwrap();
    let a = net.start_flow(0.0, &[0], 2.0, None).unwrap();
    assert_eq!(net.next_finish_ms().unwrap(), Some(2.0));
    let z = net.start_flow(2.0, &[0], 0.0, None).unwrap();
    // Both finish at 2 ms; `a` has the smaller id.
    assert_eq!(net.pop_finished(2.0).unwrap(), vec![a, z]);
}

#[test]
fn simultaneous_finishes_come_out_by_id() {
    // Different groups and links with identical finish times (bytes /
    // capacity = 1 ms), started from the last link backwards so that
    // neither link nor group order matches id order.
    let caps: Vec<f64> = (1..=8).map(|i| i as f64 * GBPS).collect();
    let mut net = LinkNetwork::new(caps.clone()).unwrap();
    let mut ids = Vec::new();
    for l in (0..8).rev() {
        ids.push(net.start_flow(0.0, &[l], caps[l], None).unwrap());
    }
    assert_eq!(net.next_finish_ms().unwrap(), Some(1.0));
    assert_eq!(net.pop_finished(1.0).unwrap(), ids);

    // Many members of one group finishing together.
    let mut net = LinkNetwork::new(vec![GBPS, GBPS]).unwrap();
    let same: Vec<_> = (0..50)
        .map(|_| net.start_flow(0.0, &[0, 1], 1e6, None).unwrap())
        .collect();
    assert_eq!(net.next_finish_ms().unwrap(), Some(50.0));
    assert_eq!(net.pop_finished(50.0).unwrap(), same);
    assert_eq!(net.active_flows(), 0);
}

#[test]
fn finishes_within_tolerance_come_out_together_in_time_order() {
    let mut net = LinkNetwork::new(vec![1.0, 1.0]).unwrap();
    // b finishes a hair (relative 1e-12) before a.
    let a = net.start_flow(0.0, &[0], 1000.0, None).unwrap();
    let b = net
        .start_flow(0.0, &[1], 1000.0 * (1.0 - 1e-12), None)
        .unwrap();
    let t = net.next_finish_ms().unwrap().unwrap();
    assert!(t < 1000.0);
    assert_eq!(net.pop_finished(t).unwrap(), vec![b, a]);
    assert_eq!(net.active_flows(), 0);
    assert_eq!(net.recomputations(), 1);
}

#[test]
fn awkward_capacities_leave_no_stray_bytes() {
    // Capacity 1/3 and sizes that are not multiples of anything: each
    // finish must pop at least one flow and no sub-byte tail may remain
    // as an extra event.
    let cap = 1.0 / 3.0;
    let mut net = LinkNetwork::new(vec![cap, 0.7]).unwrap();
    let sizes = [1.0, 2.0 / 3.0, 10.0 / 7.0, 0.1, 5.0];
    let mut total = 0.0;
    for (i, &b) in sizes.iter().enumerate() {
        let links: &[usize] = if i % 2 == 0 { &[0] } else { &[0, 1] };
        net.start_flow(0.0, links, b, None).unwrap();
        total += b;
    }
    let done = drain(&mut net);
    assert_eq!(done.len(), sizes.len());
    // Distinct sizes over one bottleneck: one event per flow, no extras.
    let mut times: Vec<f64> = done.iter().map(|d| d.1).collect();
    times.dedup();
    assert_eq!(times.len(), sizes.len());
    // Link 0 is always saturated: it finishes at total / capacity.
    assert_close(*times.last().unwrap(), total / cap, 1e-12);
    assert_close(net.link_bytes(0), total, 1e-12);
}

#[test]
fn batched_starts_solve_once() {
    let mut net = LinkNetwork::new(vec![1.0; 4]).unwrap();
    let ids: Vec<_> = (0..10)
        .map(|i| net.start_flow(0.0, &[i % 2, 2 + i % 2], 5.0, None).unwrap())
        .collect();
    assert_eq!(net.rate(ids[0]), None, "rates are pending until a solve");
    assert_eq!(net.recomputations(), 0);
    net.commit().unwrap();
    net.commit().unwrap();
    assert_eq!(net.recomputations(), 1);
    assert_close(net.rate(ids[0]).unwrap(), 0.2, 1e-12);
    // A start at a later instant first solves the earlier ones at their
    // own time.
    let mut net2 = LinkNetwork::new(vec![1.0]).unwrap();
    net2.start_flow(0.0, &[0], 4.0, None).unwrap();
    net2.start_flow(2.0, &[0], 1.0, None).unwrap();
    assert_eq!(net2.recomputations(), 1);
    // The first flow ran alone for 2 ms (2 bytes left), then both ran at
    // 0.5: the second ends at 4 ms, the first then alone at 5 ms.
    let done = drain(&mut net2);
    assert_eq!(done[0].0, FlowId(1));
    assert_close(done[0].1, 4.0, 1e-12);
    assert_eq!(done[1].0, FlowId(0));
    assert_close(done[1].1, 5.0, 1e-12);
}

#[test]
fn pops_and_replacement_starts_share_one_solve() {
    let mut net = LinkNetwork::new(vec![1.0]).unwrap();
    let a = net.start_flow(0.0, &[0], 1.0, None).unwrap();
    let b = net.start_flow(0.0, &[0], 10.0, None).unwrap();
    assert_eq!(net.next_finish_ms().unwrap(), Some(2.0));
    assert_eq!(net.recomputations(), 1);
    assert_eq!(net.pop_finished(2.0).unwrap(), vec![a]);
    let c = net.start_flow(2.0, &[0], 10.0, None).unwrap();
    // b has 9 bytes left and shares with c: done at 2 + 9 / 0.5 = 20.
    assert_eq!(net.next_finish_ms().unwrap(), Some(20.0));
    assert_eq!(net.recomputations(), 2);
    assert_eq!(net.rate(b), Some(0.5));
    assert_eq!(net.rate(c), Some(0.5));
}

#[test]
fn short_flow_joining_a_capped_group_finishes_on_time() {
    // The cap holds the group's rate at 0.1 with or without the newcomer,
    // so only the change of head can bring its finish forward.
    let mut net = LinkNetwork::new(vec![1.0]).unwrap();
    let a = net.start_flow(0.0, &[0], 100.0, Some(0.1)).unwrap();
    assert_eq!(net.next_finish_ms().unwrap(), Some(1000.0));
    let b = net.start_flow(1.0, &[0], 1.0, Some(0.1)).unwrap();
    let t = net.next_finish_ms().unwrap().unwrap();
    assert_close(t, 11.0, 1e-12);
    assert_eq!(net.pop_finished(t).unwrap(), vec![b]);
    let t = net.next_finish_ms().unwrap().unwrap();
    assert_close(t, 1000.0, 1e-12);
    assert_eq!(net.pop_finished(t).unwrap(), vec![a]);
}

#[test]
fn next_finish_never_precedes_the_clock() {
    // A start a hair (within tolerance) after a finish that was not yet
    // popped: the overdue flow is due now, not in the past.
    let mut net = LinkNetwork::new(vec![1.0]).unwrap();
    let a = net.start_flow(0.0, &[0], 1000.0, None).unwrap();
    assert_eq!(net.next_finish_ms().unwrap(), Some(1000.0));
    let now = 1000.0 + 0.5 * time_tol(1000.0);
    net.start_flow(now, &[0], 1000.0, None).unwrap();
    let t = net.next_finish_ms().unwrap().unwrap();
    assert!(t >= net.now_ms(), "{t} < {}", net.now_ms());
    assert_eq!(net.pop_finished(t).unwrap(), vec![a]);
}

#[test]
fn only_the_touched_component_is_resolved() {
    // Links 0-1 and 2-3 form separate components.
    let mut net = LinkNetwork::new(vec![1.0; 4]).unwrap();
    for _ in 0..3 {
        net.start_flow(0.0, &[0, 1], 100.0, None).unwrap();
    }
    net.start_flow(0.0, &[0], 100.0, Some(0.1)).unwrap();
    net.commit().unwrap();
    assert_eq!(net.solved_groups(), 2);
    let far = net.start_flow(0.0, &[2, 3], 10.0, None).unwrap();
    net.commit().unwrap();
    assert_eq!(net.solved_groups(), 3, "only the new group was solved");
    assert_eq!(net.rate(far), Some(1.0));
    // Its finish re-solves only its own component, which is now empty.
    assert_eq!(net.pop_finished(10.0).unwrap(), vec![far]);
    assert_eq!(net.solved_groups(), 3);
}

#[test]
fn rates_can_fall_when_a_flow_leaves() {
    // X on L0; Y on L0+L1; Z, W on L1. With W: L1 gives 1/3 each, X gets
    // 2/3. Without W: everyone 1/2, so X slows down.
    let mut net = LinkNetwork::new(vec![1.0, 1.0]).unwrap();
    let x = net.start_flow(0.0, &[0], 100.0, None).unwrap();
    net.start_flow(0.0, &[0, 1], 100.0, None).unwrap();
    net.start_flow(0.0, &[1], 100.0, Some(0.9)).unwrap();
    let w = net.start_flow(0.0, &[1], 1.0, None).unwrap();
    net.commit().unwrap();
    assert_close(net.rate(x).unwrap(), 2.0 / 3.0, 1e-12);
    assert_eq!(net.pop_finished(3.0).unwrap(), vec![w]);
    assert_eq!(net.rate(x), None, "re-solve pending");
    net.commit().unwrap();
    assert_close(net.rate(x).unwrap(), 0.5, 1e-12);
}

#[test]
fn late_pop_steps_through_finishes_in_order() {
    let run = |late: bool| {
        let mut net = LinkNetwork::new(vec![1.0]).unwrap();
        net.start_flow(0.0, &[0], 1.0, None).unwrap();
        net.start_flow(0.0, &[0], 3.0, None).unwrap();
        if late {
            let ids = net.pop_finished(100.0).unwrap();
            (ids, net.link_bytes(0), net.recomputations())
        } else {
            let ids = drain(&mut net).into_iter().map(|d| d.0).collect();
            (ids, net.link_bytes(0), net.recomputations())
        }
    };
    let (late_ids, late_bytes, late_solves) = run(true);
    let (ids, bytes, solves) = run(false);
    assert_eq!(late_ids, vec![FlowId(0), FlowId(1)]);
    assert_eq!(late_ids, ids);
    assert_eq!(late_bytes, bytes);
    assert_eq!(late_solves, solves);
}

#[test]
fn link_bytes_count_partial_progress() {
    let mut net = LinkNetwork::new(vec![2.0, 1.0]).unwrap();
    net.start_flow(0.0, &[0, 1], 10.0, None).unwrap();
    net.start_flow(0.0, &[0], 10.0, None).unwrap();
    assert_eq!(net.next_finish_ms().unwrap(), Some(10.0));
    // Nothing finishes by 4 ms, but the clock moves and so do the totals.
    assert!(net.pop_finished(4.0).unwrap().is_empty());
    assert_close(net.link_bytes(0), 8.0, 1e-12);
    assert_close(net.link_bytes(1), 4.0, 1e-12);
    drain(&mut net);
    assert_close(net.link_bytes(0), 20.0, 1e-12);
    assert_close(net.link_bytes(1), 10.0, 1e-12);
}

#[test]
fn repeated_links_count_once_and_identical_flows_share_a_group() {
    let rates = max_min_rates(&[vec![0, 0, 1], vec![1]], &[1.0, 1.0], None).unwrap();
    assert_close(rates[0], 0.5, 1e-12);
    let mut net = LinkNetwork::new(vec![1.0, 1.0]).unwrap();
    let a = net.start_flow(0.0, &[1, 0, 0], 10.0, None).unwrap();
    let b = net.start_flow(0.0, &[0, 1], 20.0, None).unwrap();
    net.commit().unwrap();
    assert_eq!(net.live_groups(), 1);
    assert_eq!(net.rate(a), net.rate(b));
    assert_close(net.rate(a).unwrap(), 0.5, 1e-12);
}

#[test]
fn group_slots_are_reused_after_emptying() {
    let mut net = LinkNetwork::new(vec![1.0, 1.0]).unwrap();
    for round in 0..5 {
        let t = round as f64 * 10.0;
        net.start_flow(t, &[round % 2], 1.0, None).unwrap();
        drain(&mut net);
    }
    assert_eq!(net.group_slots(), 1);
    assert_eq!(net.live_groups(), 0);
    assert!(net.no_link_lists_a_group());
    assert_close(net.link_bytes(0) + net.link_bytes(1), 5.0, 1e-12);
}

// ---- Scale ----

#[test]
fn ten_thousand_flows_over_64_ranks_complete_quickly() {
    const RANKS: usize = 32;
    let mut net = LinkNetwork::new(vec![GBPS; 2 * RANKS]).unwrap();
    let mut rng = Lcg(7);
    let mut per_link = vec![0.0; 2 * RANKS];
    let mut sent = BTreeMap::new();
    let t0 = Instant::now();
    for _ in 0..10_000 {
        let (s, r) = (rng.below(RANKS), RANKS + rng.below(RANKS));
        // 1 MB .. 100 MB KV caches.
        let bytes = 1e6 + 99e6 * rng.unit();
        let id = net.start_flow(0.0, &[s, r], bytes, None).unwrap();
        per_link[s] += bytes;
        per_link[r] += bytes;
        sent.insert(id, bytes);
    }
    let mut events = 0;
    let mut finished = 0;
    while let Some(t) = net.next_finish_ms().unwrap() {
        for id in net.pop_finished(t).unwrap() {
            let bytes = sent.remove(&id).unwrap();
            // No flow can beat its size at full link speed.
            assert!(t * (1.0 + 1e-9) >= bytes / GBPS, "{id:?} too early");
            finished += 1;
        }
        events += 1;
    }
    let elapsed = t0.elapsed();
    println!(
        "10,000 flows / 64 ranks: {events} finish events, {} solves, {:.3} s",
        net.recomputations(),
        elapsed.as_secs_f64()
    );
    assert_eq!(finished, 10_000);
    assert!(sent.is_empty());
    for (l, &b) in per_link.iter().enumerate() {
        assert_close(net.link_bytes(l), b, 1e-9);
    }
    // The busiest link's load bounds the makespan from below.
    let busiest = per_link.iter().cloned().fold(0.0, f64::max);
    assert!(net.now_ms() >= busiest / GBPS * (1.0 - 1e-9));
    // Generous (debug takes about 2 s here): catches a blow-up, not noise.
    assert!(elapsed.as_secs_f64() < 30.0, "took {elapsed:?}");
}

/// 8x8 ranks all-to-all with ~750 concurrent flows; every finish starts a
/// replacement. Run: cargo test --release -- --ignored --nocapture
#[test]
#[ignore = "benchmark; run in release with --ignored --nocapture"]
fn bench_all_to_all_churn() {
    const RANKS: usize = 8;
    const CONCURRENT: usize = 750;
    const FINISHES: usize = 300_000;
    let mut net = LinkNetwork::new(vec![GBPS; 2 * RANKS]).unwrap();
    let mut rng = Lcg(11);
    let start = |net: &mut LinkNetwork, now: f64, rng: &mut Lcg| {
        let (s, r) = (rng.below(RANKS), RANKS + rng.below(RANKS));
        net.start_flow(now, &[s, r], 1e6 + 99e6 * rng.unit(), None)
            .unwrap();
    };
    for _ in 0..CONCURRENT {
        start(&mut net, 0.0, &mut rng);
    }
    let t0 = Instant::now();
    let (mut finishes, mut events) = (0, 0);
    let mut buf = Vec::new();
    while finishes < FINISHES {
        let t = net.next_finish_ms().unwrap().unwrap();
        net.pop_finished_into(t, &mut buf).unwrap();
        for _ in 0..buf.len() {
            start(&mut net, t, &mut rng);
        }
        finishes += buf.len();
        events += 1;
    }
    let secs = t0.elapsed().as_secs_f64();
    println!(
        "all-to-all churn: {finishes} finishes + as many starts in {events} finish events, \
         {secs:.3} s: {:.0} finish events/s ({:.0} starts+finishes/s), \
         mean component {:.1} groups",
        events as f64 / secs,
        2.0 * finishes as f64 / secs,
        net.solved_groups() as f64 / net.recomputations() as f64
    );
    assert_eq!(net.active_flows(), CONCURRENT);
}

// ---- Property tests ----

proptest! {
    #[test]
    fn network_rates_do_not_depend_on_start_order(
        (capacities, flows, caps) in flow_set(),
        seed in any::<u64>(),
    ) {
        let rates_for = |order: &[usize]| {
            let mut net = LinkNetwork::new(capacities.clone()).unwrap();
            let mut ids = vec![FlowId(0); flows.len()];
            for &i in order {
                let cap = Some(caps[i]).filter(|c| c.is_finite());
                ids[i] = net.start_flow(0.0, &flows[i], 1.0, cap).unwrap();
            }
            net.commit().unwrap();
            ids.iter().map(|&id| net.rate(id).unwrap()).collect::<Vec<_>>()
        };
        let order: Vec<usize> = (0..flows.len()).collect();
        let mut perm = order.clone();
        let mut rng = Lcg(seed);
        for i in (1..perm.len()).rev() {
            perm.swap(i, rng.below(i + 1));
        }
        let a = rates_for(&order);
        let b = rates_for(&perm);
        for i in 0..flows.len() {
            prop_assert!(close(a[i], b[i], 1e-7), "flow {}: {} vs {}", i, a[i], b[i]);
        }
    }
}

#[derive(Debug, Clone)]
struct StartSpec {
    gap_ms: f64,
    links: Vec<usize>,
    bytes: f64,
    cap: Option<f64>,
}

#[derive(Debug, Clone)]
struct Scenario {
    capacities: Vec<f64>,
    starts: Vec<StartSpec>,
}

fn scenario() -> impl Strategy<Value = Scenario> {
    (2usize..=12).prop_flat_map(|nl| {
        let links = prop_oneof![
            // The simulator's shape: a send link and a receive link.
            3 => (0..nl / 2, nl / 2..nl).prop_map(|(s, r)| vec![s, r]),
            1 => prop::collection::vec(0..nl, 1..=3),
        ];
        let start = (
            prop_oneof![1 => Just(0.0), 3 => 0.0f64..20.0],
            links,
            prop_oneof![1 => Just(0.0), 9 => 0.5f64..100.0],
            prop_oneof![4 => Just(None), 1 => Just(Some(0.25)), 1 => (0.05f64..3.0).prop_map(Some)],
        )
            .prop_map(|(gap_ms, links, bytes, cap)| StartSpec {
                gap_ms,
                links,
                bytes,
                cap,
            });
        (
            prop::collection::vec(prop_oneof![Just(1.0 / 3.0), Just(1.0), 0.2f64..5.0], nl),
            prop::collection::vec(start, 1..=40),
        )
            .prop_map(|(capacities, starts)| Scenario { capacities, starts })
    })
}

struct RefFlow {
    links: Vec<usize>,
    cap: f64,
    bytes: f64,
    start_ms: f64,
    /// Bytes left by the reference's own integration of its rates.
    left: f64,
    rate: f64,
}

/// What must be identical across two runs of one scenario.
#[derive(Debug, PartialEq)]
struct Trace {
    finishes: Vec<(u64, u64)>,
    rates: Vec<u64>,
    link_bytes: Vec<u64>,
}

/// Drives a network through `sc`, checking it step by step against a
/// reference that solves from scratch with `max_min_rates` and integrates
/// bytes itself.
fn drive(sc: &Scenario) -> Result<Trace, TestCaseError> {
    let caps = &sc.capacities;
    let mut net = LinkNetwork::new(caps.clone()).unwrap();
    let mut active: BTreeMap<u64, RefFlow> = BTreeMap::new();
    let mut done_bytes = vec![0.0; caps.len()];
    let mut sent_bytes = vec![0.0; caps.len()];
    let mut trace = Trace {
        finishes: vec![],
        rates: vec![],
        link_bytes: vec![],
    };
    let mut t_ref = 0.0;
    let mut t_last_start = 0.0;
    let mut next = 0;
    // Each link's rate when last looked at: a link not among `take_rate_changes` keeps it.
    let link_rates = |net: &LinkNetwork| -> Vec<u64> {
        (0..caps.len())
            .map(|l| net.link_rate(l).to_bits())
            .collect()
    };
    let mut seen = link_rates(&net);
    let mut changed = Vec::new();

    let advance = |active: &mut BTreeMap<u64, RefFlow>, t_ref: &mut f64, t: f64| {
        for f in active.values_mut() {
            f.left -= f.rate * (t - *t_ref);
        }
        *t_ref = t;
    };

    loop {
        let nf = net.next_finish_ms().unwrap();
        net.take_rate_changes(&mut changed);
        let now_rates = link_rates(&net);
        for l in 0..caps.len() {
            prop_assert!(
                changed.contains(&l) || now_rates[l] == seen[l],
                "link {} changed rate without being reported",
                l
            );
        }
        seen = now_rates;
        // Incremental rates must match a from-scratch solve.
        let ids: Vec<u64> = active
            .iter()
            .filter(|f| f.1.bytes > 0.0)
            .map(|f| *f.0)
            .collect();
        if !ids.is_empty() {
            let flows: Vec<_> = ids.iter().map(|id| active[id].links.clone()).collect();
            let fcaps: Vec<_> = ids.iter().map(|id| active[id].cap).collect();
            let want = max_min_rates(&flows, caps, Some(&fcaps)).unwrap();
            let got: Vec<f64> = ids
                .iter()
                .map(|&id| net.rate(FlowId(id)).unwrap())
                .collect();
            let v = max_min_violation(&flows, caps, &fcaps, &got);
            prop_assert!(v.is_none(), "{:?}", v);
            for (k, &id) in ids.iter().enumerate() {
                prop_assert!(
                    close(got[k], want[k], 1e-7),
                    "flow {}: {} vs {}",
                    id,
                    got[k],
                    want[k]
                );
                active.get_mut(&id).unwrap().rate = got[k];
                trace.rates.push(got[k].to_bits());
            }
        }
        prop_assert_eq!(net.active_flows(), active.len());

        let next_start = sc.starts.get(next).map(|s| t_last_start + s.gap_ms);
        match (nf, next_start) {
            (Some(f), ns) if ns.is_none_or(|ns| f <= ns) => {
                let f: f64 = f;
                advance(&mut active, &mut t_ref, f);
                let popped = net.pop_finished(f).unwrap();
                prop_assert!(!popped.is_empty());
                for id in popped {
                    let fl = active.remove(&id.0).expect("popped flow was active");
                    prop_assert!(
                        fl.left.abs() <= 1e-6 * fl.bytes,
                        "{:?} popped with {} of {} left",
                        id,
                        fl.left,
                        fl.bytes
                    );
                    let fastest = fl.links.iter().map(|&l| caps[l]).fold(fl.cap, f64::min);
                    let earliest = fl.start_ms + fl.bytes / fastest;
                    prop_assert!(
                        f + 2.0 * time_tol(f) >= earliest * (1.0 - 1e-12),
                        "{:?} done at {} before {}",
                        id,
                        f,
                        earliest
                    );
                    for &l in &fl.links {
                        done_bytes[l] += fl.bytes;
                    }
                    trace.finishes.push((id.0, f.to_bits()));
                }
                for (id, fl) in &active {
                    prop_assert!(
                        fl.left >= -1e-6 * fl.bytes,
                        "flow {} overdue: {} left",
                        id,
                        fl.left
                    );
                }
                // Delivered totals include partial progress.
                for l in 0..caps.len() {
                    let partial: f64 = active
                        .values()
                        .filter(|f| f.links.contains(&l))
                        .map(|f| f.bytes - f.left)
                        .sum();
                    let want = done_bytes[l] + partial;
                    prop_assert!(
                        (net.link_bytes(l) - want).abs() <= 1e-6 * sent_bytes[l] + 1e-12,
                        "link {}: {} vs {}",
                        l,
                        net.link_bytes(l),
                        want
                    );
                }
            }
            (_, Some(ns)) => {
                advance(&mut active, &mut t_ref, ns);
                // Consecutive zero-gap starts go in one batch.
                loop {
                    let s = &sc.starts[next];
                    let id = net.start_flow(ns, &s.links, s.bytes, s.cap).unwrap();
                    let links = dedup(&s.links);
                    for &l in &links {
                        sent_bytes[l] += s.bytes;
                    }
                    active.insert(
                        id.0,
                        RefFlow {
                            links,
                            cap: s.cap.unwrap_or(f64::INFINITY),
                            bytes: s.bytes,
                            start_ms: ns,
                            left: s.bytes,
                            rate: 0.0,
                        },
                    );
                    prop_assert_eq!(net.rate(id), None);
                    next += 1;
                    if sc.starts.get(next).is_none_or(|s| s.gap_ms != 0.0) {
                        break;
                    }
                }
                t_last_start = ns;
            }
            _ => break,
        }
    }
    prop_assert!(active.is_empty());
    for (l, &sent) in sent_bytes.iter().enumerate() {
        let got = net.link_bytes(l);
        prop_assert!(close(got, sent, 1e-9), "link {}: {} vs {}", l, got, sent);
        trace.link_bytes.push(got.to_bits());
    }
    Ok(trace)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]
    #[test]
    fn network_matches_reference_and_is_deterministic(sc in scenario()) {
        let first = drive(&sc)?;
        let second = drive(&sc)?;
        prop_assert_eq!(first, second);
    }
}
