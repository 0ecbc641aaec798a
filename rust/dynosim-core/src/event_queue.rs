//! The virtual clock's agenda: a min-heap of timed events, ties broken by insertion order.

use std::cmp::Ordering;
use std::collections::BinaryHeap;

#[derive(Debug)]
struct Entry<E> {
    time_ms: f64,
    seq: u64,
    event: E,
}

impl<E> PartialEq for Entry<E> {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl<E> Eq for Entry<E> {}

impl<E> PartialOrd for Entry<E> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl<E> Ord for Entry<E> {
    // Reversed: BinaryHeap is a max-heap and we want the earliest (then first inserted) on top.
    fn cmp(&self, other: &Self) -> Ordering {
        other
            .time_ms
            .total_cmp(&self.time_ms)
            .then_with(|| other.seq.cmp(&self.seq))
    }
}

/// Events ordered by (time, insertion sequence).
#[derive(Debug)]
pub struct EventQueue<E> {
    heap: BinaryHeap<Entry<E>>,
    next_seq: u64,
}

impl<E> Default for EventQueue<E> {
    fn default() -> Self {
        EventQueue {
            heap: BinaryHeap::new(),
            next_seq: 0,
        }
    }
}

impl<E> EventQueue<E> {
    pub fn push(&mut self, time_ms: f64, event: E) {
        self.heap.push(Entry {
            time_ms,
            seq: self.next_seq,
            event,
        });
        self.next_seq += 1;
    }

    /// Time of the earliest event.
    pub fn peek_time(&self) -> Option<f64> {
        self.heap.peek().map(|e| e.time_ms)
    }

    /// Remove the earliest event if it is due at `now_ms` or before.
    pub fn pop_due(&mut self, now_ms: f64) -> Option<E> {
        if self.heap.peek()?.time_ms <= now_ms {
            self.heap.pop().map(|e| e.event)
        } else {
            None
        }
    }

    pub fn len(&self) -> usize {
        self.heap.len()
    }

    pub fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn earliest_first_then_insertion_order() {
        let mut q = EventQueue::default();
        q.push(5.0, 'a');
        q.push(1.0, 'b');
        q.push(5.0, 'c');
        q.push(1.0, 'd');
        assert_eq!(q.peek_time(), Some(1.0));
        let mut order = Vec::new();
        while let Some(e) = q.pop_due(f64::INFINITY) {
            order.push(e);
        }
        assert_eq!(order, ['b', 'd', 'a', 'c']);
    }

    #[test]
    fn pop_due_waits_for_time() {
        let mut q = EventQueue::default();
        q.push(2.0, 1);
        assert_eq!(q.pop_due(1.9), None);
        assert_eq!(q.pop_due(2.0), Some(1));
        assert!(q.is_empty());
    }
}
