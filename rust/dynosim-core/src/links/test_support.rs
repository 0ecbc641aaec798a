//! Helpers for the solver's and the network's tests: an independent check of max-min
//! fairness (not the solver), tolerances, a small deterministic generator and random flow sets.

use proptest::prelude::*;

/// 1 GB/s in bytes/ms.
pub(super) const GBPS: f64 = 1e6;

pub(super) fn close(a: f64, b: f64, rel: f64) -> bool {
    (a - b).abs() <= rel * a.abs().max(b.abs()) + 1e-300
}

#[track_caller]
pub(super) fn assert_close(a: f64, b: f64, rel: f64) {
    assert!(close(a, b, rel), "{a} != {b} (rel {rel})");
}

pub(super) fn dedup(links: &[usize]) -> Vec<usize> {
    let mut v = links.to_vec();
    v.sort_unstable();
    v.dedup();
    v
}

/// Independent max-min fairness check (not the solver): an allocation is
/// max-min fair iff it is feasible and every flow is at its cap or crosses
/// a saturated link on which no flow has a higher rate.
pub(super) fn max_min_violation(
    flows: &[Vec<usize>],
    capacities: &[f64],
    caps: &[f64],
    rates: &[f64],
) -> Option<String> {
    const TOL: f64 = 1e-7;
    let mut load = vec![0.0; capacities.len()];
    let mut max_rate = vec![0.0_f64; capacities.len()];
    for (i, links) in flows.iter().enumerate() {
        let r = rates[i];
        if !(r.is_finite() && r > 0.0) {
            return Some(format!("flow {i}: rate {r}"));
        }
        if r > caps[i] * (1.0 + TOL) {
            return Some(format!("flow {i}: rate {r} over cap {}", caps[i]));
        }
        for l in dedup(links) {
            load[l] += r;
            max_rate[l] = max_rate[l].max(r);
        }
    }
    for (l, (&ld, &c)) in load.iter().zip(capacities).enumerate() {
        if ld > c * (1.0 + TOL) {
            return Some(format!("link {l}: load {ld} over capacity {c}"));
        }
    }
    for (i, links) in flows.iter().enumerate() {
        let r = rates[i];
        let at_cap = r >= caps[i] * (1.0 - TOL);
        let bottleneck = links
            .iter()
            .any(|&l| load[l] >= capacities[l] * (1.0 - TOL) && max_rate[l] <= r * (1.0 + TOL));
        if !(at_cap || bottleneck) {
            return Some(format!(
                "flow {i}: rate {r} has no bottleneck and is under its cap"
            ));
        }
    }
    None
}

/// Small deterministic generator so scale tests need no seed plumbing.
pub(super) struct Lcg(pub(super) u64);
impl Lcg {
    pub(super) fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        self.0 >> 33
    }
    pub(super) fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    pub(super) fn unit(&mut self) -> f64 {
        self.next() as f64 / (1u64 << 31) as f64
    }
}

fn capacity() -> impl Strategy<Value = f64> {
    prop_oneof![
        Just(1.0 / 3.0),
        Just(1.0),
        0.05f64..20.0,
        (-3.0f64..6.0).prop_map(|e| 10f64.powf(e)),
    ]
}

fn rate_cap() -> impl Strategy<Value = f64> {
    prop_oneof![3 => Just(f64::INFINITY), 1 => 0.01f64..5.0]
}

/// (capacities, flows, caps)
pub(super) fn flow_set() -> impl Strategy<Value = (Vec<f64>, Vec<Vec<usize>>, Vec<f64>)> {
    (1usize..=12).prop_flat_map(|nl| {
        (
            prop::collection::vec(capacity(), nl),
            prop::collection::vec((prop::collection::vec(0..nl, 1..=4), rate_cap()), 1..=40),
        )
            .prop_map(|(capacities, fc)| {
                let (flows, caps) = fc.into_iter().unzip();
                (capacities, flows, caps)
            })
    })
}

#[test]
fn oracle_rejects_unfair_or_infeasible_allocations() {
    let caps = [GBPS, GBPS, GBPS, 0.3 * GBPS];
    let flows = vec![vec![0, 2], vec![0, 3], vec![1, 3]];
    let none = [f64::INFINITY; 3];
    // D1 over capacity.
    let infeasible = [0.5 * GBPS, 0.5 * GBPS, 0.5 * GBPS];
    assert!(max_min_violation(&flows, &caps, &none, &infeasible).is_some());
    // Feasible, but A could grow: P0 and D0 are not saturated.
    let wasteful = [0.5 * GBPS, 0.15 * GBPS, 0.15 * GBPS];
    assert!(max_min_violation(&flows, &caps, &none, &wasteful).is_some());
    // Feasible and saturating, but B gets more than C on D1 for no reason.
    let unfair = [0.8 * GBPS, 0.2 * GBPS, 0.1 * GBPS];
    assert!(max_min_violation(&flows, &caps, &none, &unfair).is_some());
    // Over a cap.
    let capped = [0.5 * GBPS, 0.15 * GBPS, 0.15 * GBPS];
    let rates = [0.85 * GBPS, 0.15 * GBPS, 0.15 * GBPS];
    assert!(max_min_violation(&flows, &caps, &capped, &rates).is_some());
}
