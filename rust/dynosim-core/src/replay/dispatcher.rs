//! When each request is sent: open loop, closed loop, and the later turns of sessions.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use super::Event;
use crate::config::SimConfig;
use crate::event_queue::EventQueue;
use crate::workload::Workload;

/// Decides when each request is sent: at its timestamp (open loop), when a slot frees (closed
/// loop), or, for a later turn of a session, when the previous turn ends plus its delay.
pub(super) struct Dispatcher {
    /// Row timestamps from 0, divided by the arrival speedup (ms).
    pub(super) timestamps: Vec<f64>,
    /// Think time before each later turn (ms, NaN: the timestamp gap), speedup applied.
    delay_ms: Option<Vec<f64>>,
    next_turn: Vec<u32>,
    pub(super) follows: Vec<bool>,
    /// The next row that starts a session (or stands alone) and is not sent yet.
    cursor: usize,
    concurrency: Option<u32>,
    active_sessions: u32,
    /// When the later turns already scheduled are sent, as `f64::to_bits` of times >= 0 (which
    /// order like the times), earliest on top.
    sends_ms: BinaryHeap<Reverse<u64>>,
}

impl Dispatcher {
    pub(super) fn new(workload: &Workload, config: &SimConfig) -> Self {
        let t0 = workload.arrival_ms.first().copied().unwrap_or(0.0);
        let speedup = config.cluster.arrival_speedup_ratio;
        let (next_turn, follows) = workload.session_turns();
        let mut d = Dispatcher {
            timestamps: workload
                .arrival_ms
                .iter()
                .map(|&t| (t - t0) / speedup)
                .collect(),
            delay_ms: workload
                .delay_ms
                .map(|d| d.iter().map(|&x| x / speedup).collect()),
            next_turn,
            follows,
            cursor: 0,
            concurrency: config.cluster.concurrency,
            active_sessions: 0,
            sends_ms: BinaryHeap::new(),
        };
        d.skip_follow_ups();
        d
    }

    fn skip_follow_ups(&mut self) {
        while self.cursor < self.follows.len() && self.follows[self.cursor] {
            self.cursor += 1;
        }
    }

    /// Open loop: when the next session starts (ms), if one is left.
    pub(super) fn next_start_ms(&self) -> Option<f64> {
        match self.concurrency {
            None => self.timestamps.get(self.cursor).copied(),
            Some(_) => None,
        }
    }

    /// When the next later turn already scheduled is sent (ms).
    pub(super) fn next_send_ms(&self) -> Option<f64> {
        self.sends_ms.peek().map(|t| f64::from_bits(t.0))
    }

    /// The earliest scheduled later turn is being sent.
    pub(super) fn sending(&mut self) {
        self.sends_ms.pop();
    }

    /// Rows that start a session at `now`: those due in open loop, or as many as free slots
    /// allow in closed loop.
    pub(super) fn starts(&mut self, now: f64, out: &mut Vec<u32>) {
        while self.cursor < self.timestamps.len() {
            let go = match self.concurrency {
                None => self.timestamps[self.cursor] <= now,
                Some(limit) => self.active_sessions < limit,
            };
            if !go {
                break;
            }
            self.active_sessions += 1;
            out.push(self.cursor as u32);
            self.cursor += 1;
            self.skip_follow_ups();
        }
    }

    /// Request `i` ended at `now`: schedule its session's next turn, or free its slot.
    pub(super) fn finished(&mut self, i: usize, now: f64, queue: &mut EventQueue<Event>) {
        let next = self.next_turn[i];
        if next == u32::MAX {
            self.active_sessions -= 1;
            return;
        }
        let n = next as usize;
        let delay = self.delay_ms.as_ref().map_or(f64::NAN, |d| d[n]);
        let wait = if delay.is_nan() {
            self.timestamps[n] - self.timestamps[i]
        } else {
            delay
        };
        queue.push(now + wait, Event::Send { request: next });
        self.sends_ms.push(Reverse((now + wait).to_bits()));
    }
}
