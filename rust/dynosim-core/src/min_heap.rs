//! An indexed binary min-heap of slots keyed by (time ms, id): the links order their flow
//! groups by next finish with it, the replay its workers by pass end.

const ABSENT: u32 = u32::MAX;

/// Indexed binary min-heap of slots keyed by (ms, id), least first; ties on time go to the
/// lower id. Keys are re-set in place, so the heap never holds stale entries.
#[derive(Debug, Default)]
pub(crate) struct MinHeap {
    heap: Vec<u32>,
    /// Position of each slot in `heap`, or `ABSENT`.
    pos: Vec<u32>,
    key: Vec<(f64, u64)>,
}

impl MinHeap {
    pub(crate) fn ensure(&mut self, n_slots: usize) {
        if self.pos.len() < n_slots {
            self.pos.resize(n_slots, ABSENT);
            self.key.resize(n_slots, (0.0, 0));
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.heap.len()
    }

    fn less(&self, a: u32, b: u32) -> bool {
        let (ta, ia) = self.key[a as usize];
        let (tb, ib) = self.key[b as usize];
        // Keys are finite, so plain comparisons are total here.
        ta < tb || (ta == tb && ia < ib)
    }

    pub(crate) fn peek(&self) -> Option<(u32, f64, u64)> {
        self.heap.first().map(|&g| {
            let (t, id) = self.key[g as usize];
            (g, t, id)
        })
    }

    /// The least entry of a slot other than `g`, as `peek` gives it: the head, or when that is
    /// `g`, the lesser of its children (a heap's second least is one of them).
    pub(crate) fn peek_except(&self, g: u32) -> Option<(u32, f64, u64)> {
        let entry = |s: u32| {
            let (t, id) = self.key[s as usize];
            (s, t, id)
        };
        match self.heap[..] {
            [] => None,
            [head, ..] if head != g => Some(entry(head)),
            [_] => None,
            [_, left] => Some(entry(left)),
            [_, left, right, ..] => Some(entry(if self.less(right, left) { right } else { left })),
        }
    }

    /// Inserts or re-keys `g`.
    pub(crate) fn set(&mut self, g: u32, key: (f64, u64)) {
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
    pub(crate) fn set_unordered(&mut self, g: u32, key: (f64, u64)) {
        self.key[g as usize] = key;
        if self.pos[g as usize] == ABSENT {
            self.pos[g as usize] = self.heap.len() as u32;
            self.heap.push(g);
        }
    }

    /// Restores heap order in O(n) (Floyd), cheaper than n sifts when most
    /// keys changed.
    pub(crate) fn rebuild(&mut self) {
        for i in (0..self.heap.len() / 2).rev() {
            self.sift_down(i);
        }
    }

    pub(crate) fn remove(&mut self, g: u32) {
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

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    #[derive(Debug, Clone)]
    enum Op {
        Set(u32, f64),
        /// Keys set unordered, then one rebuild.
        Bulk(Vec<(u32, f64)>),
        Remove(u32),
    }

    fn op() -> impl Strategy<Value = Op> {
        // Few distinct times, so equal times (ordered by id) are common.
        let key = (0u32..12, (0u32..6).prop_map(f64::from));
        prop_oneof![
            3 => key.clone().prop_map(|(g, t)| Op::Set(g, t)),
            1 => prop::collection::vec(key, 0..8).prop_map(Op::Bulk),
            2 => (0u32..12).prop_map(Op::Remove),
        ]
    }

    proptest! {
        /// The heap's head is the least (time, id) of a plain map of the same keys, and the
        /// least but one slot's the least of the map without it.
        #[test]
        fn head_matches_a_sorted_reference(ops in prop::collection::vec(op(), 1..60)) {
            let mut heap = MinHeap::default();
            heap.ensure(12);
            // A group's head flow id is unique among live groups: here, the group itself.
            let mut reference: BTreeMap<u32, (f64, u64)> = BTreeMap::new();
            for op in ops {
                match op {
                    Op::Set(g, t) => {
                        heap.set(g, (t, u64::from(g)));
                        reference.insert(g, (t, u64::from(g)));
                    }
                    Op::Bulk(keys) => {
                        for (g, t) in keys {
                            heap.set_unordered(g, (t, u64::from(g)));
                            reference.insert(g, (t, u64::from(g)));
                        }
                        heap.rebuild();
                    }
                    Op::Remove(g) => {
                        heap.remove(g);
                        reference.remove(&g);
                    }
                }
                let want = reference
                    .iter()
                    .map(|(&g, &(t, id))| (t, id, g))
                    .min_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)))
                    .map(|(t, id, g)| (g, t, id));
                prop_assert_eq!(heap.peek(), want);
                for except in 0..12 {
                    let want = reference
                        .iter()
                        .filter(|(&g, _)| g != except)
                        .map(|(&g, &(t, id))| (t, id, g))
                        .min_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)))
                        .map(|(t, id, g)| (g, t, id));
                    prop_assert_eq!(heap.peek_except(except), want);
                }
                prop_assert_eq!(heap.len(), reference.len());
            }
        }
    }
}
