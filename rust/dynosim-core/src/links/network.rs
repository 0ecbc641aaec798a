//! [`LinkNetwork`]: links shared by flows on a virtual clock, kept in groups of identical
//! flows and re-solved one connected component at a time.

use std::cmp::{Ordering, Reverse};
use std::collections::BinaryHeap;
use std::mem;

use rustc_hash::FxHashMap;

use super::error::{check_cap, check_capacities, check_links, LinkError};
use super::solver::Filler;
use crate::marked::Marked;
use crate::min_heap::MinHeap;

/// Finish events within this fraction of the current time (floored at 1 ms)
/// are merged, so rounding cannot leave a flow a few bytes short of done.
const TIME_EPS: f64 = 1e-9;

/// Absolute time tolerance, in ms, at simulated time `t_ms`.
pub(super) fn time_tol(t_ms: f64) -> f64 {
    TIME_EPS * t_ms.abs().max(1.0)
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
    finish: MinHeap,
    /// Zero-byte flows awaiting `pop_finished`, as (start ms, id).
    zero_byte: Vec<(f64, FlowId)>,
    next_id: u64,
    /// Time of the latest call, ms.
    clock_ms: f64,
    /// Links whose flows changed since the last solve.
    touched: Vec<u32>,
    touched_flag: Vec<bool>,
    /// Links whose rate (`link_rate`) may have changed since `take_rate_changes` last took
    /// them: those a flow joined or left, and those of a solved component.
    rate_changed: Marked,
    recomputations: u64,
    /// Flows started and finished plus rate solves: changes when any link's rate may have.
    changes: u64,
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
            finish: MinHeap::default(),
            zero_byte: Vec::new(),
            next_id: 0,
            clock_ms: 0.0,
            touched: Vec::new(),
            touched_flag: vec![false; n],
            rate_changed: Marked::new(n),
            recomputations: 0,
            changes: 0,
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
        self.changes += 1;
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
            let comp_links = mem::take(&mut self.comp_links);
            self.mark_solved(&comp_links);
            self.comp_links = comp_links;
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
            let solved = self.solve_component(now, &comp_groups);
            self.mark_solved(&comp_links);
            solved
        };
        self.comp_links = comp_links;
        self.comp_groups = comp_groups;
        result
    }

    /// Solves the component listed in the filler and applies the new rates.
    fn solve_component(&mut self, now: f64, comp_groups: &[u32]) -> Result<(), LinkError> {
        self.recomputations += 1;
        self.changes += 1;
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
        self.changes += done.len() as u64;
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
            // A flow joined or left: the link's rate counts its members at once.
            self.rate_changed.mark(l);
        }
    }

    /// The links of the component just solved, whose groups' rates may have changed.
    fn mark_solved(&mut self, links: &[u32]) {
        for &l in links {
            self.rate_changed.mark(l);
        }
    }

    /// Moves into `out` (cleared first) every link whose `link_rate` may have changed since
    /// the last call, in the order they changed; a link whose rate did not change may be among
    /// them, one that did always is.
    pub fn take_rate_changes(&mut self, out: &mut Vec<usize>) {
        self.rate_changed.take_into(out);
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

    /// A number that changes whenever the rate on some link may have: flows started or
    /// finished, rates solved. Equal numbers, equal rates.
    pub fn version(&self) -> u64 {
        self.changes
    }

    /// Number of rate solves run so far.
    pub fn recomputations(&self) -> u64 {
        self.recomputations
    }

    /// Rate of all flows on `link` from the last solve (bytes/ms).
    ///
    /// # Panics
    /// If `link` is out of range.
    pub fn link_rate(&self, link: usize) -> f64 {
        self.link_groups[link]
            .iter()
            .map(|&g| {
                let grp = &self.groups[g as usize];
                grp.rate * grp.members.len() as f64
            })
            .sum()
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

/// What the tests in `links::tests` look at inside.
#[cfg(test)]
impl LinkNetwork {
    /// Groups passed to the solver over all solves.
    pub(super) fn solved_groups(&self) -> u64 {
        self.solved_groups
    }

    /// Groups with members.
    pub(super) fn live_groups(&self) -> usize {
        self.group_index.len()
    }

    /// Group slots ever made, live or free.
    pub(super) fn group_slots(&self) -> usize {
        self.groups.len()
    }

    /// Whether every link's list of live groups is empty.
    pub(super) fn no_link_lists_a_group(&self) -> bool {
        self.link_groups.iter().all(Vec::is_empty)
    }
}
