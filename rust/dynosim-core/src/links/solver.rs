//! The max-min fair allocation itself: [`max_min_rates`] over an explicit list of flows, and
//! the progressive-filling [`Filler`] that both it and the network's solves run on.

use std::mem;

use super::error::{check_cap, check_capacities, check_links, LinkError};

/// A link counts as saturated once its unallocated capacity is at most this
/// fraction of its capacity. Relative, so it works for any unit scale.
const LINK_EPS: f64 = 1e-9;

/// Max-min fair rates (bytes/ms) for `flows`, each a list of link ids into
/// `capacities` (bytes/ms). `caps` optionally bounds each flow's rate
/// (bytes/ms, `f64::INFINITY` for none). A link listed twice in one flow
/// counts once.
///
/// # Panics
/// If there are more than `u32::MAX` links.
pub fn max_min_rates(
    flows: &[Vec<usize>],
    capacities: &[f64],
    caps: Option<&[f64]>,
) -> Result<Vec<f64>, LinkError> {
    check_capacities(capacities)?;
    assert!(
        u32::try_from(capacities.len()).is_ok(),
        "link ids must fit in u32"
    );
    if let Some(c) = caps {
        if c.len() != flows.len() {
            return Err(LinkError::CapsLength {
                flows: flows.len(),
                caps: c.len(),
            });
        }
        for (i, &cap) in c.iter().enumerate() {
            check_cap(i as u64, cap)?;
        }
    }
    for (i, f) in flows.iter().enumerate() {
        check_links(i as u64, f, capacities.len())?;
    }

    let mut filler = Filler::default();
    filler.reset();
    for &c in capacities {
        filler.push_link(c);
    }
    let mut links: Vec<u32> = Vec::new();
    for (i, f) in flows.iter().enumerate() {
        links.clear();
        links.extend(f.iter().map(|&l| l as u32));
        links.sort_unstable();
        links.dedup();
        let cap = caps.map_or(f64::INFINITY, |c| c[i]);
        filler.push_group(links.iter().copied(), 1.0, cap);
    }
    filler.build_link_groups();
    filler.solve();
    Ok(mem::take(&mut filler.rate))
}

/// A compact max-min problem: links `0..n`, groups of identical flows each
/// with a multiplicity, both adjacency directions, plus reusable scratch so
/// the network solves without allocating.
#[derive(Debug, Default)]
pub(super) struct Filler {
    link_cap: Vec<f64>,
    /// Link `l` is crossed by `link_groups[link_start[l]..link_start[l + 1]]`.
    link_start: Vec<u32>,
    link_groups: Vec<u32>,
    /// Group `g` crosses `group_links[group_start[g]..group_start[g + 1]]`.
    group_start: Vec<u32>,
    group_links: Vec<u32>,
    /// Number of flows in each group.
    pub(super) mult: Vec<f64>,
    /// Per-flow rate cap of each group, bytes/ms (infinite if none).
    gcap: Vec<f64>,
    // Scratch of `solve`:
    /// Links still carrying rising flows.
    active: Vec<u32>,
    /// Groups with a finite cap, by ascending cap.
    capped: Vec<u32>,
    /// Capacity not yet given to frozen flows, per link, bytes/ms.
    avail: Vec<f64>,
    /// Number of still-rising flows per link (a count held as f64).
    rising: Vec<f64>,
    /// Per link, the level `avail / rising` at which it saturates, and the
    /// lowest level at which it counts as saturated (within the epsilon);
    /// recomputed only for links a freeze touched (`stale`).
    level: Vec<f64>,
    sat_from: Vec<f64>,
    stale: Vec<bool>,
    /// Links that may be saturated at this round's level.
    saturated: Vec<u32>,
    frozen: Vec<bool>,
    /// Output: per-flow rate of each group, bytes/ms.
    pub(super) rate: Vec<f64>,
}

impl Filler {
    pub(super) fn reset(&mut self) {
        self.link_cap.clear();
        self.link_start.clear();
        self.link_start.push(0);
        self.link_groups.clear();
        self.group_start.clear();
        self.group_start.push(0);
        self.group_links.clear();
        self.mult.clear();
        self.gcap.clear();
    }

    pub(super) fn push_link(&mut self, capacity: f64) {
        self.link_cap.push(capacity);
    }

    /// Adds `mult` flows over `links` (distinct local ids), each capped at `cap`.
    pub(super) fn push_group(&mut self, links: impl IntoIterator<Item = u32>, mult: f64, cap: f64) {
        self.group_links.extend(links);
        self.group_start.push(self.group_links.len() as u32);
        self.mult.push(mult);
        self.gcap.push(cap);
    }

    /// Appends group `g` to the adjacency list of the link being listed.
    pub(super) fn push_link_group(&mut self, g: u32) {
        self.link_groups.push(g);
    }

    /// Closes the adjacency list of the next link in order.
    pub(super) fn end_link(&mut self) {
        self.link_start.push(self.link_groups.len() as u32);
    }

    /// Derives link -> groups from the groups' link lists (counting sort),
    /// for callers that did not list them with `push_link_group`.
    fn build_link_groups(&mut self) {
        let nl = self.link_cap.len();
        self.link_start.clear();
        self.link_start.resize(nl + 1, 0);
        for &l in &self.group_links {
            self.link_start[l as usize + 1] += 1;
        }
        for i in 0..nl {
            self.link_start[i + 1] += self.link_start[i];
        }
        // `active` doubles as the fill cursor; `solve` resets it.
        self.active.clear();
        self.active.extend_from_slice(&self.link_start[..nl]);
        self.link_groups.clear();
        self.link_groups.resize(self.group_links.len(), 0);
        for g in 0..self.mult.len() {
            let range = self.group_start[g] as usize..self.group_start[g + 1] as usize;
            for &l in &self.group_links[range] {
                let c = &mut self.active[l as usize];
                self.link_groups[*c as usize] = g as u32;
                *c += 1;
            }
        }
    }

    /// Progressive filling: all rising flows share one level; each round
    /// raises it to the next link saturation or cap, then freezes the flows
    /// that hit it. Every round freezes at least one link or capped group, so
    /// there are at most links + caps rounds, and freezing walks only the
    /// saturated links' adjacency lists. Needs both adjacency directions.
    pub(super) fn solve(&mut self) {
        let nl = self.link_cap.len();
        let ng = self.mult.len();
        debug_assert_eq!(self.link_start.len(), nl + 1);
        fn reset<T: Clone>(v: &mut Vec<T>, n: usize, x: T) {
            v.clear();
            v.resize(n, x);
        }
        reset(&mut self.level, nl, 0.0);
        reset(&mut self.sat_from, nl, 0.0);
        reset(&mut self.stale, nl, true);
        reset(&mut self.frozen, ng, false);
        reset(&mut self.rate, ng, 0.0);
        self.avail.clear();
        self.avail.extend_from_slice(&self.link_cap);

        // Plain slices from here on: through `self` the optimiser would
        // reload every vector's pointer after each store.
        let link_cap = &self.link_cap[..];
        let link_start = &self.link_start[..];
        let link_groups = &self.link_groups[..];
        let group_start = &self.group_start[..];
        let group_links = &self.group_links[..];
        let mult = &self.mult[..];
        let gcap = &self.gcap[..];

        // Summed per link in a register: accumulating per group would chain
        // stores to the same few links.
        self.rising.clear();
        self.rising.extend((0..nl).map(|l| {
            link_groups[link_start[l] as usize..link_start[l + 1] as usize]
                .iter()
                .map(|&g| mult[g as usize])
                .sum::<f64>()
        }));
        self.active.clear();
        self.active
            .extend((0..nl as u32).filter(|&l| self.rising[l as usize] > 0.0));
        self.capped.clear();
        self.capped
            .extend((0..ng as u32).filter(|&g| gcap[g as usize].is_finite()));
        self.capped.sort_unstable_by(|&a, &b| {
            gcap[a as usize]
                .total_cmp(&gcap[b as usize])
                .then(a.cmp(&b))
        });

        let capped = &self.capped[..];
        let active = &mut self.active;
        let saturated = &mut self.saturated;
        let avail = &mut self.avail[..];
        let rising = &mut self.rising[..];
        let level_of = &mut self.level[..];
        let sat_from = &mut self.sat_from[..];
        let stale = &mut self.stale[..];
        let frozen = &mut self.frozen[..];
        let rate = &mut self.rate[..];
        let mut unfrozen = ng;

        // Freezes group `g` at rate `r`, taking its share off its links
        // other than `skip`.
        macro_rules! freeze {
            ($g:expr, $r:expr, $skip:expr) => {{
                let (g, r, skip): (usize, f64, usize) = ($g, $r, $skip);
                frozen[g] = true;
                rate[g] = r;
                unfrozen -= 1;
                let m = mult[g];
                let take = m * r;
                for &l in &group_links[group_start[g] as usize..group_start[g + 1] as usize] {
                    let l = l as usize;
                    if l != skip {
                        avail[l] -= take;
                        rising[l] -= m;
                        stale[l] = true;
                    }
                }
            }};
        }
        // Freezes every still-rising group on link `l` at `level`. The link
        // itself is then drained, so its own totals need no per-group update
        // (which would also chain stores to one address).
        macro_rules! freeze_link {
            ($l:expr, $level:expr) => {{
                let l: usize = $l;
                for &g in &link_groups[link_start[l] as usize..link_start[l + 1] as usize] {
                    if !frozen[g as usize] {
                        freeze!(g as usize, $level, l);
                    }
                }
                rising[l] = 0.0;
            }};
        }

        let mut level = 0.0_f64;
        let mut next_cap = 0;
        while unfrozen > 0 {
            let before = unfrozen;
            // One pass: drop drained links, refresh levels that freezes
            // changed, find the lowest, and collect the links that may count
            // as saturated at it (filtered once the minimum is known).
            let mut best = f64::INFINITY;
            let mut best_link = usize::MAX;
            let mut kept = 0;
            saturated.clear();
            for i in 0..active.len() {
                let l = active[i] as usize;
                let r = rising[l];
                if r <= 0.0 {
                    continue;
                }
                active[kept] = l as u32;
                kept += 1;
                if stale[l] {
                    stale[l] = false;
                    let lv = avail[l] / r;
                    level_of[l] = lv;
                    // Saturated once avail - rising * level <= eps * capacity.
                    sat_from[l] = lv - LINK_EPS * link_cap[l] / r;
                }
                if level_of[l] < best {
                    best = level_of[l];
                    best_link = l;
                }
                if sat_from[l] <= best {
                    saturated.push(l as u32);
                }
            }
            active.truncate(kept);
            while next_cap < capped.len() && frozen[capped[next_cap] as usize] {
                next_cap += 1;
            }
            if let Some(&g) = capped.get(next_cap) {
                best = best.min(gcap[g as usize]);
            }
            debug_assert!(best.is_finite(), "rising flows always cross a link");
            if !best.is_finite() {
                break;
            }
            // Rounding may put a level a hair under the previous one; levels
            // only ever rise.
            level = level.max(best);

            while let Some(&g) = capped.get(next_cap) {
                let g = g as usize;
                if !frozen[g] {
                    if gcap[g] > level {
                        break;
                    }
                    freeze!(g, gcap[g], usize::MAX);
                }
                next_cap += 1;
            }
            // Freeze every link saturated at this level, not just the argmin,
            // so links tied up to rounding give their flows one rate.
            for &l in saturated.iter() {
                if sat_from[l as usize] <= level && rising[l as usize] > 0.0 {
                    freeze_link!(l as usize, level);
                }
            }
            // Guarantees progress even if rounding left the argmin link's
            // slack just above the epsilon.
            if unfrozen == before && best_link != usize::MAX {
                freeze_link!(best_link, level);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_support::{assert_close, close, flow_set, max_min_violation, Lcg, GBPS};
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn cap_above_fair_share_changes_nothing() {
        let flows = vec![vec![0], vec![0]];
        let rates = max_min_rates(&flows, &[GBPS], Some(&[0.9 * GBPS, f64::INFINITY])).unwrap();
        assert_close(rates[0], 0.5 * GBPS, 1e-12);
        assert_close(rates[1], 0.5 * GBPS, 1e-12);
    }

    proptest! {
        #[test]
        fn solver_output_is_max_min_fair((capacities, flows, caps) in flow_set()) {
            let rates = max_min_rates(&flows, &capacities, Some(&caps)).unwrap();
            prop_assert_eq!(rates.len(), flows.len());
            let v = max_min_violation(&flows, &capacities, &caps, &rates);
            prop_assert!(v.is_none(), "{:?}", v);
        }

        #[test]
        fn rates_do_not_depend_on_flow_order(
            (capacities, flows, caps) in flow_set(),
            seed in any::<u64>(),
        ) {
            let rates = max_min_rates(&flows, &capacities, Some(&caps)).unwrap();
            let mut perm: Vec<usize> = (0..flows.len()).collect();
            let mut rng = Lcg(seed);
            for i in (1..perm.len()).rev() {
                perm.swap(i, rng.below(i + 1));
            }
            let pflows: Vec<_> = perm.iter().map(|&i| flows[i].clone()).collect();
            let pcaps: Vec<_> = perm.iter().map(|&i| caps[i]).collect();
            let prates = max_min_rates(&pflows, &capacities, Some(&pcaps)).unwrap();
            for (k, &i) in perm.iter().enumerate() {
                prop_assert!(close(prates[k], rates[i], 1e-7), "flow {}: {} vs {}", i, prates[k], rates[i]);
            }
        }
    }
}
