//! Max-min fair bandwidth sharing for KV-cache transfers between GPU ranks.
//!
//! A *flow* (one transfer) crosses a set of *links*; in the simulator that is
//! the prefill rank's sending link and the decode rank's receiving link. Rates
//! are the max-min fair allocation computed by progressive filling (Bertsekas &
//! Gallager, *Data Networks*, 6.5).
//!
//! Units everywhere: bytes, milliseconds of simulated time, and bytes per ms
//! for capacities, caps and rates (1 GB/s = 1e6 bytes/ms).
//!
//! Two layers:
//! * [`max_min_rates`]: a pure solver over an explicit list of flows.
//! * [`LinkNetwork`]: the stateful version driven by the event loop. It keeps
//!   flows with identical (link set, cap) in one *group*, since max-min
//!   fairness gives them identical rates, re-solves only the connected
//!   component touched by a change, and keys each group's next finish in an
//!   indexed heap that is re-keyed in place.
//!
//! Nothing here iterates a hash map, so identical call sequences give
//! bit-identical results.

use std::cmp::{Ordering, Reverse};
use std::collections::BinaryHeap;
use std::mem;

use rustc_hash::FxHashMap;
use thiserror::Error;

/// A link counts as saturated once its unallocated capacity is at most this
/// fraction of its capacity. Relative, so it works for any unit scale.
const LINK_EPS: f64 = 1e-9;

/// Finish events within this fraction of the current time (floored at 1 ms)
/// are merged, so rounding cannot leave a flow a few bytes short of done.
const TIME_EPS: f64 = 1e-9;

/// Absolute time tolerance, in ms, at simulated time `t_ms`.
fn time_tol(t_ms: f64) -> f64 {
    TIME_EPS * t_ms.abs().max(1.0)
}

/// Invalid input, or a network state that cannot make progress.
///
/// `flow` fields hold the index into the `flows` slice for [`max_min_rates`],
/// or the id the flow has (or would have received) for [`LinkNetwork`].
/// Capacities, caps and rates are in bytes/ms, sizes in bytes, times in ms.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum LinkError {
    /// A flow names a link that does not exist.
    #[error("flow {flow}: link id {link} is out of range (there are {n_links} links)")]
    LinkOutOfRange {
        flow: u64,
        link: usize,
        n_links: usize,
    },
    /// A link capacity is NaN, infinite, zero or negative.
    #[error("link {link}: capacity {value} bytes/ms must be finite and > 0")]
    BadCapacity { link: usize, value: f64 },
    /// A rate cap is NaN, zero or negative (+infinity means no cap).
    #[error("flow {flow}: rate cap {value} bytes/ms must be > 0 (not NaN)")]
    BadCap { flow: u64, value: f64 },
    /// A flow crosses no links.
    #[error("flow {flow}: crosses no links")]
    EmptyFlow { flow: u64 },
    /// `caps` and `flows` differ in length.
    #[error("{caps} rate caps given for {flows} flows")]
    CapsLength { flows: usize, caps: usize },
    /// A flow size is NaN, infinite or negative.
    #[error("flow {flow}: size {value} bytes must be finite and >= 0")]
    BadBytes { flow: u64, value: f64 },
    /// A time is NaN or infinite.
    #[error("time {now_ms} ms must be finite")]
    BadTime { now_ms: f64 },
    /// A call is earlier than the previous one (beyond the tolerance).
    #[error("time {now_ms} ms is before the network clock {clock_ms} ms")]
    TimeWentBack { now_ms: f64, clock_ms: f64 },
    /// `start_flow` came after a finish that was never popped.
    #[error(
        "flow {flow} finished at {finish_ms} ms, before now ({now_ms} ms): pop finished flows first"
    )]
    MissedFinish {
        flow: u64,
        finish_ms: f64,
        now_ms: f64,
    },
    /// An active flow has no finite finish time (its rate underflowed).
    #[error(
        "flow {flow}: rate {rate} bytes/ms leaves {bytes_left} bytes with no finite finish time"
    )]
    Stalled {
        flow: u64,
        rate: f64,
        bytes_left: f64,
    },
}

/// Checks that every capacity is finite and > 0.
fn check_capacities(capacities: &[f64]) -> Result<(), LinkError> {
    match capacities
        .iter()
        .enumerate()
        .find(|(_, c)| !(c.is_finite() && **c > 0.0))
    {
        Some((link, &value)) => Err(LinkError::BadCapacity { link, value }),
        None => Ok(()),
    }
}

/// Checks a flow's link list against the number of links.
fn check_links(flow: u64, links: &[usize], n_links: usize) -> Result<(), LinkError> {
    if links.is_empty() {
        return Err(LinkError::EmptyFlow { flow });
    }
    match links.iter().find(|&&l| l >= n_links) {
        Some(&link) => Err(LinkError::LinkOutOfRange {
            flow,
            link,
            n_links,
        }),
        None => Ok(()),
    }
}

/// Checks a rate cap; +infinity means "no cap".
fn check_cap(flow: u64, cap: f64) -> Result<f64, LinkError> {
    if cap.is_nan() || cap <= 0.0 {
        return Err(LinkError::BadCap { flow, value: cap });
    }
    Ok(cap)
}

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
struct Filler {
    link_cap: Vec<f64>,
    /// Link `l` is crossed by `link_groups[link_start[l]..link_start[l + 1]]`.
    link_start: Vec<u32>,
    link_groups: Vec<u32>,
    /// Group `g` crosses `group_links[group_start[g]..group_start[g + 1]]`.
    group_start: Vec<u32>,
    group_links: Vec<u32>,
    /// Number of flows in each group.
    mult: Vec<f64>,
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
    rate: Vec<f64>,
}

impl Filler {
    fn reset(&mut self) {
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

    fn push_link(&mut self, capacity: f64) {
        self.link_cap.push(capacity);
    }

    /// Adds `mult` flows over `links` (distinct local ids), each capped at `cap`.
    fn push_group(&mut self, links: impl IntoIterator<Item = u32>, mult: f64, cap: f64) {
        self.group_links.extend(links);
        self.group_start.push(self.group_links.len() as u32);
        self.mult.push(mult);
        self.gcap.push(cap);
    }

    /// Appends group `g` to the adjacency list of the link being listed.
    fn push_link_group(&mut self, g: u32) {
        self.link_groups.push(g);
    }

    /// Closes the adjacency list of the next link in order.
    fn end_link(&mut self) {
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
    fn solve(&mut self) {
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

/// Identifies a flow of a [`LinkNetwork`]; ids increase in start order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct FlowId(pub u64);

/// One flow inside a group: it finishes when the group's per-flow served
/// bytes reach `target`.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Member {
    target: f64,
    bytes: f64,
    id: u64,
}

impl Eq for Member {}

impl Ord for Member {
    fn cmp(&self, other: &Self) -> Ordering {
        self.target
            .total_cmp(&other.target)
            .then(self.id.cmp(&other.id))
    }
}

impl PartialOrd for Member {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// A sorted, distinct link set. Up to four links sit inline, so the usual
/// two-link group needs no allocation and no pointer chase.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
struct LinkSet {
    inline: [u32; 4],
    len: u32,
    spill: Vec<u32>,
}

impl LinkSet {
    fn from_sorted(links: &[u32]) -> Self {
        let mut set = Self {
            len: links.len() as u32,
            ..Self::default()
        };
        if links.len() <= set.inline.len() {
            set.inline[..links.len()].copy_from_slice(links);
        } else {
            set.spill = links.to_vec();
        }
        set
    }

    fn as_slice(&self) -> &[u32] {
        if self.spill.is_empty() {
            &self.inline[..self.len as usize]
        } else {
            &self.spill
        }
    }
}

/// Active flows sharing one link set and cap, hence one rate. Progress is
/// tracked once per group: `served` is the bytes each member has received
/// since the group was created, so a member's bytes left are
/// `target - served`, and a rate change touches one group, not every flow.
#[derive(Debug)]
struct Group {
    links: LinkSet,
    /// Per-flow rate cap, bytes/ms (infinite if none).
    cap: f64,
    /// Per-flow rate from the last solve, bytes/ms.
    rate: f64,
    /// Bytes served to each member up to `last_ms`.
    served: f64,
    /// Time `served` was last brought up to date, ms.
    last_ms: f64,
    /// Copy of the next member to finish (valid while there are members),
    /// kept here to spare a pointer chase per group per solve.
    head: Member,
    /// Sum over members of `target - bytes` (the group's `served` when each
    /// joined), so members have received `len * served - base` bytes.
    base: f64,
    /// Membership changed since the head's finish time was last keyed.
    rekey: bool,
    /// Membership changed since the last solve (listed in `dirty_groups`).
    dirty: bool,
    /// Visit mark of the component search (an epoch number).
    mark: u32,
    /// Index in the component being solved, valid while `mark` is current.
    local: u32,
    /// Members by (target, id).
    members: BinaryHeap<Reverse<Member>>,
}

impl Group {
    /// Brings `served` up to `now_ms` at the current rate; done before any
    /// rate change.
    fn advance(&mut self, now_ms: f64) {
        let dt = now_ms - self.last_ms;
        if dt > 0.0 {
            self.served += self.rate * dt;
        }
        self.last_ms = now_ms;
    }

    fn refresh_head(&mut self) {
        if let Some(&Reverse(m)) = self.members.peek() {
            self.head = m;
        }
    }

    /// Finish time (ms), id and bytes left of the next member to finish, at
    /// the current rate. Remainders are clamped at zero so a finish never
    /// lies before the last update.
    fn head_finish(&self) -> (f64, u64, f64) {
        let left = (self.head.target - self.served).max(0.0);
        (self.last_ms + left / self.rate, self.head.id, left)
    }
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct GroupKey {
    links: LinkSet,
    cap_bits: u64,
}

const ABSENT: u32 = u32::MAX;

/// Indexed binary min-heap of groups keyed by (head finish ms, head flow id).
/// Keys are re-set in place, so the heap never holds stale entries.
#[derive(Debug, Default)]
struct FinishHeap {
    heap: Vec<u32>,
    /// Position of each group slot in `heap`, or `ABSENT`.
    pos: Vec<u32>,
    key: Vec<(f64, u64)>,
}

impl FinishHeap {
    fn ensure(&mut self, n_slots: usize) {
        if self.pos.len() < n_slots {
            self.pos.resize(n_slots, ABSENT);
            self.key.resize(n_slots, (0.0, 0));
        }
    }

    fn len(&self) -> usize {
        self.heap.len()
    }

    fn less(&self, a: u32, b: u32) -> bool {
        let (ta, ia) = self.key[a as usize];
        let (tb, ib) = self.key[b as usize];
        // Keys are finite, so plain comparisons are total here.
        ta < tb || (ta == tb && ia < ib)
    }

    fn peek(&self) -> Option<(u32, f64, u64)> {
        self.heap.first().map(|&g| {
            let (t, id) = self.key[g as usize];
            (g, t, id)
        })
    }

    /// Inserts or re-keys `g`.
    fn set(&mut self, g: u32, key: (f64, u64)) {
        self.key[g as usize] = key;
        let i = self.pos[g as usize];
        if i == ABSENT {
            self.heap.push(g);
            let i = self.heap.len() - 1;
            self.pos[g as usize] = i as u32;
            self.sift_up(i);
        } else {
            self.sift_up(i as usize);
            self.sift_down(self.pos[g as usize] as usize);
        }
    }

    /// Sets `g`'s key without restoring heap order; call `rebuild` after.
    fn set_unordered(&mut self, g: u32, key: (f64, u64)) {
        self.key[g as usize] = key;
        if self.pos[g as usize] == ABSENT {
            self.pos[g as usize] = self.heap.len() as u32;
            self.heap.push(g);
        }
    }

    /// Restores heap order in O(n) (Floyd), cheaper than n sifts when most
    /// keys changed.
    fn rebuild(&mut self) {
        for i in (0..self.heap.len() / 2).rev() {
            self.sift_down(i);
        }
    }

    fn remove(&mut self, g: u32) {
        let i = self.pos[g as usize];
        if i == ABSENT {
            return;
        }
        self.pos[g as usize] = ABSENT;
        let last = self.heap.pop().expect("g is in the heap");
        let i = i as usize;
        if i < self.heap.len() {
            self.heap[i] = last;
            self.pos[last as usize] = i as u32;
            self.sift_up(i);
            self.sift_down(self.pos[last as usize] as usize);
        }
    }

    fn sift_up(&mut self, mut i: usize) {
        while i > 0 {
            let parent = (i - 1) / 2;
            if !self.less(self.heap[i], self.heap[parent]) {
                break;
            }
            self.swap(i, parent);
            i = parent;
        }
    }

    fn sift_down(&mut self, mut i: usize) {
        let n = self.heap.len();
        loop {
            let left = 2 * i + 1;
            if left >= n {
                break;
            }
            let right = left + 1;
            let child = if right < n && self.less(self.heap[right], self.heap[left]) {
                right
            } else {
                left
            };
            if !self.less(self.heap[child], self.heap[i]) {
                break;
            }
            self.swap(i, child);
            i = child;
        }
    }

    fn swap(&mut self, i: usize, j: usize) {
        self.heap.swap(i, j);
        self.pos[self.heap[i] as usize] = i as u32;
        self.pos[self.heap[j] as usize] = j as u32;
    }
}

/// Links shared by flows on a virtual clock (ms), for the event loop.
///
/// The loop: start flows; `t = next_finish_ms()?`; when `t` is the next
/// event, `pop_finished(t)?` and start whatever follows; repeat.
///
/// Batching: [`start_flow`](Self::start_flow) and
/// [`pop_finished`](Self::pop_finished) only change membership and mark the
/// links involved; rates are solved once for all changes made at one instant,
/// at the next [`commit`](Self::commit) or
/// [`next_finish_ms`](Self::next_finish_ms), or when a call arrives at a
/// later instant (pending changes are then solved at their own instant
/// first). So finishes and their replacement starts at one instant cost one
/// solve. While a solve is pending, [`rate`](Self::rate) reports `None`;
/// `next_finish_ms` therefore takes `&mut self`, and it and `pop_finished`
/// return `Result` so that a stalled flow is an error rather than a hang.
///
/// A solve covers only the connected component of links and flows reached by
/// the changed links; if that is the component solved last and no group was
/// created or removed since, the previous search is reused.
///
/// Times within `1e-9` of the current time (relative, with a 1 ms floor) are
/// treated as equal: finishes that close together come out together, and a
/// call that close before the clock is taken as at the clock.
#[derive(Debug)]
pub struct LinkNetwork {
    /// Bytes/ms per link.
    capacity: Vec<f64>,
    /// Bytes of finished flows per link.
    done_bytes: Vec<f64>,
    /// Live groups crossing each link, in creation order.
    link_groups: Vec<Vec<u32>>,
    /// Group slots; a slot on `free_groups` is dead.
    groups: Vec<Group>,
    free_groups: Vec<u32>,
    group_index: FxHashMap<GroupKey, u32>,
    /// Group of every active flow with bytes to send.
    flow_group: FxHashMap<u64, u32>,
    finish: FinishHeap,
    /// Zero-byte flows awaiting `pop_finished`, as (start ms, id).
    zero_byte: Vec<(f64, FlowId)>,
    next_id: u64,
    /// Time of the latest call, ms.
    clock_ms: f64,
    /// Links whose flows changed since the last solve.
    touched: Vec<u32>,
    touched_flag: Vec<bool>,
    recomputations: u64,
    /// Groups passed to the solver over all solves (for tests and tuning).
    solved_groups: u64,
    // Scratch reused across calls.
    epoch: u32,
    link_mark: Vec<u32>,
    link_local: Vec<u32>,
    comp_links: Vec<u32>,
    comp_groups: Vec<u32>,
    /// Component indices of groups whose finish key must change.
    changed: Vec<u32>,
    /// Groups whose membership changed since the last solve.
    dirty_groups: Vec<u32>,
    /// The filler still holds the component last solved (marked with the
    /// current epoch), and no group was created or removed since, so a
    /// change inside it needs no new search, only new multiplicities.
    cache_valid: bool,
    filler: Filler,
    key_scratch: Vec<u32>,
    done_scratch: Vec<(f64, FlowId)>,
}

impl LinkNetwork {
    /// A network with the given link capacities (bytes/ms), at time 0.
    ///
    /// # Panics
    /// If there are more than `u32::MAX` links.
    pub fn new(capacities: Vec<f64>) -> Result<Self, LinkError> {
        check_capacities(&capacities)?;
        let n = capacities.len();
        assert!(u32::try_from(n).is_ok(), "link ids must fit in u32");
        Ok(Self {
            capacity: capacities,
            done_bytes: vec![0.0; n],
            link_groups: vec![Vec::new(); n],
            groups: Vec::new(),
            free_groups: Vec::new(),
            group_index: FxHashMap::default(),
            flow_group: FxHashMap::default(),
            finish: FinishHeap::default(),
            zero_byte: Vec::new(),
            next_id: 0,
            clock_ms: 0.0,
            touched: Vec::new(),
            touched_flag: vec![false; n],
            recomputations: 0,
            solved_groups: 0,
            epoch: 0,
            link_mark: vec![0; n],
            link_local: vec![0; n],
            comp_links: Vec::new(),
            comp_groups: Vec::new(),
            changed: Vec::new(),
            dirty_groups: Vec::new(),
            cache_valid: false,
            filler: Filler::default(),
            key_scratch: Vec::new(),
            done_scratch: Vec::new(),
        })
    }

    /// Number of links.
    pub fn num_links(&self) -> usize {
        self.capacity.len()
    }

    /// Time of the latest call, ms.
    pub fn now_ms(&self) -> f64 {
        self.clock_ms
    }

    /// Starts a transfer of `bytes` over `links` at `now_ms`, optionally
    /// capped at `cap` bytes/ms. A zero-byte flow finishes at once: the next
    /// `pop_finished` reports it. Fails if a flow due before `now_ms` has not
    /// been popped, since it would otherwise be silently overrun.
    pub fn start_flow(
        &mut self,
        now_ms: f64,
        links: &[usize],
        bytes: f64,
        cap: Option<f64>,
    ) -> Result<FlowId, LinkError> {
        let id = self.next_id;
        check_links(id, links, self.capacity.len())?;
        if !(bytes.is_finite() && bytes >= 0.0) {
            return Err(LinkError::BadBytes {
                flow: id,
                value: bytes,
            });
        }
        let cap = check_cap(id, cap.unwrap_or(f64::INFINITY))?;
        self.advance_clock(now_ms)?;
        let now = self.clock_ms;
        let overdue = self.peek_due().filter(|&(_, t)| t < now - time_tol(now));
        if let Some((flow, finish_ms)) = overdue {
            return Err(LinkError::MissedFinish {
                flow: flow.0,
                finish_ms,
                now_ms,
            });
        }
        self.next_id += 1;
        if bytes == 0.0 {
            self.zero_byte.push((now, FlowId(id)));
            return Ok(FlowId(id));
        }

        self.key_scratch.clear();
        self.key_scratch.extend(links.iter().map(|&l| l as u32));
        self.key_scratch.sort_unstable();
        self.key_scratch.dedup();
        let key = GroupKey {
            links: LinkSet::from_sorted(&self.key_scratch),
            cap_bits: cap.to_bits(),
        };
        let g = match self.group_index.get(&key) {
            Some(&g) => {
                self.groups[g as usize].advance(now);
                g
            }
            None => {
                let g = self.new_group(key.links.clone(), cap, now);
                self.group_index.insert(key, g);
                g
            }
        };
        let grp = &mut self.groups[g as usize];
        let target = grp.served + bytes;
        grp.members.push(Reverse(Member { target, bytes, id }));
        grp.base += target - bytes;
        grp.refresh_head();
        grp.rekey = true;
        self.mark_dirty(g);
        self.flow_group.insert(id, g);
        self.touch_group(g);
        Ok(FlowId(id))
    }

    /// Solves rates for all changes since the last solve (a no-op if none).
    /// Fails with [`LinkError::Stalled`] if a flow would never finish (its
    /// rate underflowed); the network should then be discarded.
    pub fn commit(&mut self) -> Result<(), LinkError> {
        if self.touched.is_empty() {
            return Ok(());
        }
        let now = self.clock_ms;
        let e = self.epoch;
        let reuse = self.cache_valid
            && self
                .touched
                .iter()
                .all(|&l| self.link_mark[l as usize] == e);
        for &g in &self.dirty_groups {
            let grp = &mut self.groups[g as usize];
            grp.dirty = false;
            if reuse {
                self.filler.mult[grp.local as usize] = grp.members.len() as f64;
            }
        }
        self.dirty_groups.clear();
        if reuse {
            for &l in &self.touched {
                self.touched_flag[l as usize] = false;
            }
            self.touched.clear();
            let comp_groups = mem::take(&mut self.comp_groups);
            let result = self.solve_component(now, &comp_groups);
            self.comp_groups = comp_groups;
            return result;
        }

        self.epoch = self.epoch.wrapping_add(1);
        if self.epoch == 0 {
            // Marks from 2^32 searches ago could collide: clear them once.
            self.link_mark.fill(0);
            self.groups.iter_mut().for_each(|g| g.mark = 0);
            self.epoch = 1;
        }
        let e = self.epoch;

        // Breadth-first search from the touched links over link -> group ->
        // link, listing the component for the solver as it goes. Adjacency
        // lists are in creation order, so the visit order is deterministic.
        let mut comp_links = mem::take(&mut self.comp_links);
        let mut comp_groups = mem::take(&mut self.comp_groups);
        comp_links.clear();
        comp_groups.clear();
        let f = &mut self.filler;
        f.reset();
        for &l in &self.touched {
            self.touched_flag[l as usize] = false;
            if self.link_mark[l as usize] != e {
                self.link_mark[l as usize] = e;
                self.link_local[l as usize] = comp_links.len() as u32;
                comp_links.push(l);
                f.push_link(self.capacity[l as usize]);
            }
        }
        self.touched.clear();
        let mut i = 0;
        while i < comp_links.len() {
            for &g in &self.link_groups[comp_links[i] as usize] {
                let grp = &mut self.groups[g as usize];
                if grp.mark != e {
                    grp.mark = e;
                    grp.local = comp_groups.len() as u32;
                    comp_groups.push(g);
                    for &l2 in grp.links.as_slice() {
                        if self.link_mark[l2 as usize] != e {
                            self.link_mark[l2 as usize] = e;
                            self.link_local[l2 as usize] = comp_links.len() as u32;
                            comp_links.push(l2);
                            f.push_link(self.capacity[l2 as usize]);
                        }
                    }
                    let local = &self.link_local;
                    f.push_group(
                        grp.links.as_slice().iter().map(|&l| local[l as usize]),
                        grp.members.len() as f64,
                        grp.cap,
                    );
                }
                f.push_link_group(grp.local);
            }
            f.end_link();
            i += 1;
        }

        self.cache_valid = !comp_groups.is_empty();
        let result = if comp_groups.is_empty() {
            Ok(())
        } else {
            self.solve_component(now, &comp_groups)
        };
        self.comp_links = comp_links;
        self.comp_groups = comp_groups;
        result
    }

    /// Solves the component listed in the filler and applies the new rates.
    fn solve_component(&mut self, now: f64, comp_groups: &[u32]) -> Result<(), LinkError> {
        self.recomputations += 1;
        self.solved_groups += comp_groups.len() as u64;
        self.filler.solve();

        // Only groups whose rate or head changed need a new finish time.
        let mut changed = mem::take(&mut self.changed);
        changed.clear();
        for (k, &g) in comp_groups.iter().enumerate() {
            let grp = &self.groups[g as usize];
            if grp.rekey || grp.rate.to_bits() != self.filler.rate[k].to_bits() {
                changed.push(k as u32);
            }
        }
        // When many keys change, set them all and heapify once.
        let bulk = changed.len() * 4 > self.finish.len();
        let mut result = Ok(());
        for &k in &changed {
            let g = comp_groups[k as usize];
            let r = self.filler.rate[k as usize];
            let grp = &mut self.groups[g as usize];
            grp.advance(now);
            grp.rate = r;
            grp.rekey = false;
            let (finish_ms, id, left) = grp.head_finish();
            if !(r > 0.0 && finish_ms.is_finite()) {
                result = Err(LinkError::Stalled {
                    flow: id,
                    rate: r,
                    bytes_left: left,
                });
                break;
            }
            if bulk {
                self.finish.set_unordered(g, (finish_ms, id));
            } else {
                self.finish.set(g, (finish_ms, id));
            }
        }
        if bulk {
            self.finish.rebuild();
        }
        self.changed = changed;
        result
    }

    /// Earliest finish time (ms) among active flows, solving pending starts
    /// first. `None` when no flow is active.
    pub fn next_finish_ms(&mut self) -> Result<Option<f64>, LinkError> {
        self.commit()?;
        Ok(self.peek_due().map(|(_, t)| t))
    }

    /// Removes and returns every flow finishing by `now_ms` (within a relative
    /// tolerance, so near-simultaneous finishes come out together), ordered by
    /// (finish time, id). The affected components are re-solved lazily, like
    /// starts, so replacement flows started at `now_ms` join the same solve.
    ///
    /// Meant to be called at `next_finish_ms()`. Called later, it processes
    /// the finishes in time order, re-solving after each, so the result is
    /// the same as stepping through them one by one.
    pub fn pop_finished(&mut self, now_ms: f64) -> Result<Vec<FlowId>, LinkError> {
        let mut out = Vec::new();
        self.pop_finished_into(now_ms, &mut out)?;
        Ok(out)
    }

    /// [`pop_finished`](Self::pop_finished) into a caller's buffer, which is
    /// cleared first.
    pub fn pop_finished_into(
        &mut self,
        now_ms: f64,
        out: &mut Vec<FlowId>,
    ) -> Result<(), LinkError> {
        out.clear();
        self.check_time(now_ms)?;
        let now = now_ms.max(self.clock_ms);
        self.commit()?;
        let mut done = mem::take(&mut self.done_scratch);
        done.clear();
        let result = self.pop_steps(now, &mut done);
        done.sort_unstable_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
        out.extend(done.iter().map(|&(_, id)| id));
        self.done_scratch = done;
        result
    }

    fn pop_steps(&mut self, now: f64, done: &mut Vec<(f64, FlowId)>) -> Result<(), LinkError> {
        loop {
            // Peeking needs fresh keys: solve what the previous step changed.
            self.commit()?;
            let Some((_, t)) = self.peek_due() else { break };
            if t > now + time_tol(now) {
                break;
            }
            let step = t.clamp(self.clock_ms, now);
            self.clock_ms = step;
            let due = step + time_tol(step);
            done.append(&mut self.zero_byte);
            while let Some((g, t, _)) = self.finish.peek() {
                if t > due {
                    break;
                }
                self.pop_head(g, t, done);
            }
            if step >= now {
                // The usual call, at `next_finish_ms()`: leave the re-solve
                // to the next commit so starts at this instant share it.
                return Ok(());
            }
        }
        self.clock_ms = now;
        Ok(())
    }

    /// Ends group `g`'s head flow, which finishes at `finish_ms`.
    fn pop_head(&mut self, g: u32, finish_ms: f64, done: &mut Vec<(f64, FlowId)>) {
        let grp = &mut self.groups[g as usize];
        let Reverse(m) = grp.members.pop().expect("heap holds live groups only");
        // The finish event ends the flow: its links get exactly its size,
        // whatever rounding left in `served`.
        grp.base -= m.target - m.bytes;
        for &l in grp.links.as_slice() {
            self.done_bytes[l as usize] += m.bytes;
        }
        self.flow_group.remove(&m.id);
        done.push((finish_ms, FlowId(m.id)));
        if !grp.dirty {
            grp.dirty = true;
            self.dirty_groups.push(g);
        }
        let empty = grp.members.is_empty();
        if !empty {
            grp.refresh_head();
            let (t, id, _) = grp.head_finish();
            self.finish.set(g, (t, id));
        }
        self.touch_group(g);
        if empty {
            self.remove_group(g);
        }
    }

    fn new_group(&mut self, links: LinkSet, cap: f64, now: f64) -> u32 {
        self.cache_valid = false;
        let g = match self.free_groups.pop() {
            Some(g) => {
                let grp = &mut self.groups[g as usize];
                grp.links = links;
                grp.cap = cap;
                grp.rate = 0.0;
                grp.served = 0.0;
                grp.base = 0.0;
                grp.last_ms = now;
                grp.rekey = true;
                g
            }
            None => {
                self.groups.push(Group {
                    links,
                    cap,
                    rate: 0.0,
                    served: 0.0,
                    last_ms: now,
                    head: Member {
                        target: 0.0,
                        bytes: 0.0,
                        id: 0,
                    },
                    base: 0.0,
                    rekey: true,
                    dirty: false,
                    mark: 0,
                    local: 0,
                    members: BinaryHeap::new(),
                });
                (self.groups.len() - 1) as u32
            }
        };
        self.finish.ensure(self.groups.len());
        for &l in self.groups[g as usize].links.as_slice() {
            self.link_groups[l as usize].push(g);
        }
        g
    }

    fn remove_group(&mut self, g: u32) {
        self.cache_valid = false;
        self.finish.remove(g);
        let grp = &mut self.groups[g as usize];
        for &l in grp.links.as_slice() {
            let v = &mut self.link_groups[l as usize];
            let i = v.iter().position(|&x| x == g).expect("group is listed");
            // Order-preserving so later searches visit groups in creation order.
            v.remove(i);
        }
        let key = GroupKey {
            links: mem::take(&mut grp.links),
            cap_bits: grp.cap.to_bits(),
        };
        self.group_index.remove(&key);
        self.free_groups.push(g);
    }

    fn mark_dirty(&mut self, g: u32) {
        let grp = &mut self.groups[g as usize];
        if !grp.dirty {
            grp.dirty = true;
            self.dirty_groups.push(g);
        }
    }

    fn touch_group(&mut self, g: u32) {
        let links = self.groups[g as usize].links.as_slice();
        for &l in links {
            if !self.touched_flag[l as usize] {
                self.touched_flag[l as usize] = true;
                self.touched.push(l);
            }
        }
    }

    fn check_time(&self, now_ms: f64) -> Result<(), LinkError> {
        if !now_ms.is_finite() {
            return Err(LinkError::BadTime { now_ms });
        }
        if now_ms < self.clock_ms - time_tol(self.clock_ms) {
            return Err(LinkError::TimeWentBack {
                now_ms,
                clock_ms: self.clock_ms,
            });
        }
        Ok(())
    }

    /// Moves the clock to `now_ms`, first solving starts made at the old time.
    fn advance_clock(&mut self, now_ms: f64) -> Result<(), LinkError> {
        self.check_time(now_ms)?;
        if now_ms > self.clock_ms {
            self.commit()?;
            self.clock_ms = now_ms;
        }
        Ok(())
    }

    /// Earliest (id, finish ms) among flows still to be popped, as last keyed.
    fn peek_due(&self) -> Option<(FlowId, f64)> {
        let z = self.zero_byte.first().map(|&(t, id)| (id, t));
        let h = self.finish.peek().map(|(_, t, id)| (FlowId(id), t));
        match (z, h) {
            (Some(a), Some(b)) => Some(if (b.1, b.0) < (a.1, a.0) { b } else { a }),
            (a, b) => a.or(b),
        }
    }

    /// Current rate of an active flow, bytes/ms. `None` if the flow has
    /// finished, never existed, sends zero bytes, or starts are pending a
    /// solve (see the type's docs on batching).
    pub fn rate(&self, f: FlowId) -> Option<f64> {
        if !self.touched.is_empty() {
            return None;
        }
        self.flow_group
            .get(&f.0)
            .map(|&g| self.groups[g as usize].rate)
    }

    /// Flows started and not yet returned by `pop_finished`.
    pub fn active_flows(&self) -> usize {
        self.flow_group.len() + self.zero_byte.len()
    }

    /// Number of rate solves run so far.
    pub fn recomputations(&self) -> u64 {
        self.recomputations
    }

    /// Bytes delivered across `link` from time 0 up to [`now_ms`](Self::now_ms),
    /// including partial progress of active flows.
    ///
    /// # Panics
    /// If `link` is out of range.
    pub fn link_bytes(&self, link: usize) -> f64 {
        let mut bytes = self.done_bytes[link];
        for &g in &self.link_groups[link] {
            let grp = &self.groups[g as usize];
            let served = grp.served + grp.rate * (self.clock_ms - grp.last_ms).max(0.0);
            bytes += grp.members.len() as f64 * served - grp.base;
        }
        bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeMap;
    use std::time::Instant;

    /// 1 GB/s in bytes/ms.
    const GBPS: f64 = 1e6;

    fn close(a: f64, b: f64, rel: f64) -> bool {
        (a - b).abs() <= rel * a.abs().max(b.abs()) + 1e-300
    }

    #[track_caller]
    fn assert_close(a: f64, b: f64, rel: f64) {
        assert!(close(a, b, rel), "{a} != {b} (rel {rel})");
    }

    fn dedup(links: &[usize]) -> Vec<usize> {
        let mut v = links.to_vec();
        v.sort_unstable();
        v.dedup();
        v
    }

    /// Independent max-min fairness check (not the solver): an allocation is
    /// max-min fair iff it is feasible and every flow is at its cap or crosses
    /// a saturated link on which no flow has a higher rate.
    fn max_min_violation(
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
    fn cap_above_fair_share_changes_nothing() {
        let flows = vec![vec![0], vec![0]];
        let rates = max_min_rates(&flows, &[GBPS], Some(&[0.9 * GBPS, f64::INFINITY])).unwrap();
        assert_close(rates[0], 0.5 * GBPS, 1e-12);
        assert_close(rates[1], 0.5 * GBPS, 1e-12);
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
    fn errors_name_index_and_value() {
        let e = max_min_rates(&[vec![0, 5]], &[1.0, 1.0], None).unwrap_err();
        assert_eq!(
            e,
            LinkError::LinkOutOfRange {
                flow: 0,
                link: 5,
                n_links: 2
            }
        );
        assert!(e.to_string().contains("flow 0") && e.to_string().contains("link id 5"));

        for bad in [0.0, -1.0, f64::NAN, f64::INFINITY] {
            let e = max_min_rates(&[vec![0]], &[1.0, bad], None).unwrap_err();
            assert!(matches!(e, LinkError::BadCapacity { link: 1, .. }), "{e}");
            assert!(e.to_string().contains("link 1") && e.to_string().contains(&bad.to_string()));
            assert!(LinkNetwork::new(vec![bad]).is_err());
        }

        for bad in [0.0, -2.5, f64::NAN, f64::NEG_INFINITY] {
            let e = max_min_rates(&[vec![0], vec![0]], &[1.0], Some(&[1.0, bad])).unwrap_err();
            assert!(matches!(e, LinkError::BadCap { flow: 1, .. }), "{e}");
            assert!(e.to_string().contains("flow 1") && e.to_string().contains(&bad.to_string()));
        }

        let e = max_min_rates(&[vec![0], vec![]], &[1.0], None).unwrap_err();
        assert_eq!(e, LinkError::EmptyFlow { flow: 1 });
        assert!(e.to_string().contains("flow 1"));

        let e = max_min_rates(&[vec![0]], &[1.0], Some(&[])).unwrap_err();
        assert_eq!(e, LinkError::CapsLength { flows: 1, caps: 0 });
    }

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
        assert_eq!(net.solved_groups, 2);
        let far = net.start_flow(0.0, &[2, 3], 10.0, None).unwrap();
        net.commit().unwrap();
        assert_eq!(net.solved_groups, 3, "only the new group was solved");
        assert_eq!(net.rate(far), Some(1.0));
        // Its finish re-solves only its own component, which is now empty.
        assert_eq!(net.pop_finished(10.0).unwrap(), vec![far]);
        assert_eq!(net.solved_groups, 3);
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
        assert_eq!(net.group_index.len(), 1);
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
        assert_eq!(net.groups.len(), 1);
        assert!(net.group_index.is_empty());
        assert!(net.link_groups.iter().all(Vec::is_empty));
        assert_close(net.link_bytes(0) + net.link_bytes(1), 5.0, 1e-12);
    }

    // ---- Scale ----

    /// Small deterministic generator so scale tests need no seed plumbing.
    struct Lcg(u64);
    impl Lcg {
        fn next(&mut self) -> u64 {
            self.0 = self
                .0
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            self.0 >> 33
        }
        fn below(&mut self, n: usize) -> usize {
            (self.next() % n as u64) as usize
        }
        fn unit(&mut self) -> f64 {
            self.next() as f64 / (1u64 << 31) as f64
        }
    }

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
            net.solved_groups as f64 / net.recomputations() as f64
        );
        assert_eq!(net.active_flows(), CONCURRENT);
    }

    // ---- Property tests ----

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
    fn flow_set() -> impl Strategy<Value = (Vec<f64>, Vec<Vec<usize>>, Vec<f64>)> {
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
                .prop_map(|(gap_ms, links, bytes, cap)| StartSpec { gap_ms, links, bytes, cap });
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

        let advance = |active: &mut BTreeMap<u64, RefFlow>, t_ref: &mut f64, t: f64| {
            for f in active.values_mut() {
                f.left -= f.rate * (t - *t_ref);
            }
            *t_ref = t;
        };

        loop {
            let nf = net.next_finish_ms().unwrap();
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
}
