//! How KV transfers from prefill to decode ranks progress in time: instantly (no bandwidth set),
//! each at full line rate (Dynamo's model), or sharing links max-min fairly. Every prefill rank
//! has a send link (`bandwidth_gbps`) and every decode rank a receive link
//! (`decode_bandwidth_gbps`, by default the same); a transfer crosses its source's send link and
//! its destination's receive link.

use crate::config::{KvTransferConfig, LinkModel};
use crate::error::Result;
use crate::event_queue::EventQueue;
use crate::links::{FlowId, LinkNetwork};
use crate::marked::Marked;

/// GB/s (1e9 bytes/s) to the simulator's bytes per ms.
pub fn gbps_to_bytes_per_ms(gbps: f64) -> f64 {
    gbps * 1e6
}

enum Kind {
    /// Every transfer finishes `bytes / rate_bytes_per_ms` after it starts (0 ms: instant).
    Timed {
        rate_bytes_per_ms: Option<f64>,
        finishes: EventQueue<u64>,
        next_id: u64,
    },
    /// Link `p` is prefill rank p's send link, link `P + d` decode rank d's receive link (P
    /// prefill ranks).
    Shared {
        net: Box<LinkNetwork>,
        done: Vec<FlowId>,
    },
}

/// All KV transfers in flight. Transfer ids are dense from 0 in start order.
pub struct Transport {
    kind: Kind,
    num_prefill_ranks: usize,
    /// Bytes per ms of a send link and of a receive link (None: no bandwidth).
    capacity: Option<(f64, f64)>,
    /// Bytes started per link, prefill send links first (line-rate and instant bookkeeping).
    started_bytes: Vec<f64>,
    /// Line rate: transfers in flight per link, and the two links of each transfer by id.
    line_flows: Vec<u32>,
    line_ends: Vec<[u32; 2]>,
    /// Line rate: links whose transfers in flight changed since `take_link_changes` last took
    /// them (the shared network keeps its own).
    line_changed: Marked,
}

impl Transport {
    pub fn new(
        config: &KvTransferConfig,
        num_prefill_ranks: usize,
        num_decode_ranks: usize,
    ) -> Result<Self> {
        let capacity = config
            .bandwidths_gbps()
            .map(|(send, recv)| (gbps_to_bytes_per_ms(send), gbps_to_bytes_per_ms(recv)));
        let kind = match (capacity, config.link_model()) {
            (Some((send, recv)), LinkModel::MaxMin) => {
                let mut caps = vec![send; num_prefill_ranks];
                caps.extend(std::iter::repeat_n(recv, num_decode_ranks));
                Kind::Shared {
                    net: Box::new(LinkNetwork::new(caps)?),
                    done: Vec::new(),
                }
            }
            (capacity, _) => Kind::Timed {
                // A lone transfer is limited by the slower of its two ends.
                rate_bytes_per_ms: capacity.map(|(send, recv)| send.min(recv)),
                finishes: EventQueue::default(),
                next_id: 0,
            },
        };
        Ok(Transport {
            kind,
            num_prefill_ranks,
            capacity,
            started_bytes: vec![0.0; num_prefill_ranks + num_decode_ranks],
            line_flows: vec![0; num_prefill_ranks + num_decode_ranks],
            line_ends: Vec::new(),
            line_changed: Marked::new(num_prefill_ranks + num_decode_ranks),
        })
    }

    /// Start moving `bytes` from prefill rank `src` to decode rank `dst` (each counted within
    /// its role) at `now` (ms).
    pub fn start(&mut self, now: f64, src: usize, dst: usize, bytes: f64) -> Result<u64> {
        self.started_bytes[src] += bytes;
        self.started_bytes[self.num_prefill_ranks + dst] += bytes;
        match &mut self.kind {
            Kind::Timed {
                rate_bytes_per_ms,
                finishes,
                next_id,
            } => {
                let id = *next_id;
                *next_id += 1;
                if rate_bytes_per_ms.is_some() {
                    let ends = [src as u32, (self.num_prefill_ranks + dst) as u32];
                    for link in ends {
                        self.line_flows[link as usize] += 1;
                        self.line_changed.mark(link);
                    }
                    self.line_ends.push(ends);
                }
                let ms = rate_bytes_per_ms.map_or(0.0, |rate| bytes / rate);
                finishes.push(now + ms, id);
                Ok(id)
            }
            Kind::Shared { net, .. } => {
                let links = [src, self.num_prefill_ranks + dst];
                Ok(net.start_flow(now, &links, bytes, None)?.0)
            }
        }
    }

    /// When the next transfer finishes (ms), if any is in flight.
    pub fn next_finish_ms(&mut self) -> Result<Option<f64>> {
        match &mut self.kind {
            Kind::Timed { finishes, .. } => Ok(finishes.peek_time()),
            Kind::Shared { net, .. } => Ok(net.next_finish_ms()?),
        }
    }

    /// Append the ids of every transfer finished by `now`, in (finish time, id) order.
    pub fn pop_finished(&mut self, now: f64, out: &mut Vec<u64>) -> Result<()> {
        match &mut self.kind {
            Kind::Timed {
                finishes,
                rate_bytes_per_ms,
                ..
            } => {
                while let Some(id) = finishes.pop_due(now) {
                    if rate_bytes_per_ms.is_some() {
                        for link in self.line_ends[id as usize] {
                            self.line_flows[link as usize] -= 1;
                            self.line_changed.mark(link);
                        }
                    }
                    out.push(id);
                }
                Ok(())
            }
            Kind::Shared { net, done } => {
                net.pop_finished_into(now, done)?;
                out.extend(done.iter().map(|f| f.0));
                Ok(())
            }
        }
    }

    /// Max-min rate solves run so far (0 for the other models).
    pub fn recomputations(&self) -> u64 {
        match &self.kind {
            Kind::Timed { .. } => 0,
            Kind::Shared { net, .. } => net.recomputations(),
        }
    }

    /// Moves into `out` (cleared first) every link whose use (`link_utilization`) may have
    /// changed since the last call: transfers started or finished on it, or its max-min rate
    /// solved again. A link not among them has the use it had.
    pub fn take_link_changes(&mut self, out: &mut Vec<usize>) {
        match &mut self.kind {
            Kind::Shared { net, .. } => net.take_rate_changes(out),
            Kind::Timed { .. } => self.line_changed.take_into(out),
        }
    }

    /// Number of links (0 without a bandwidth): prefill send links, then decode receive links.
    pub fn num_links(&self) -> usize {
        if self.capacity.is_some() {
            self.started_bytes.len()
        } else {
            0
        }
    }

    /// Fraction of each link's capacity in use now, into `out` (one per link). Line rate
    /// ignores contention, so its links can show more than 1 (oversubscribed).
    pub fn link_utilization_now(&self, out: &mut [f64]) {
        for (link, u) in out.iter_mut().enumerate() {
            *u = self.link_utilization(link);
        }
    }

    /// Fraction of `link`'s capacity in use now (0 without a bandwidth), as
    /// `link_utilization_now` gives it.
    pub fn link_utilization(&self, link: usize) -> f64 {
        let Some((send, recv)) = self.capacity else {
            return 0.0;
        };
        let rate = match &self.kind {
            Kind::Shared { net, .. } => net.link_rate(link),
            Kind::Timed {
                rate_bytes_per_ms, ..
            } => f64::from(self.line_flows[link]) * rate_bytes_per_ms.unwrap_or(0.0),
        };
        let cap = if link < self.num_prefill_ranks {
            send
        } else {
            recv
        };
        rate / cap
    }

    /// Fraction of each link's capacity used over `duration_ms`, prefill send links first.
    /// Line rate ignores contention, so its links can show more than 1 (oversubscribed).
    pub fn utilization(&self, duration_ms: f64) -> Vec<f64> {
        let Some((send, recv)) = self.capacity else {
            return Vec::new();
        };
        (0..self.started_bytes.len())
            .map(|link| {
                let bytes = match &self.kind {
                    Kind::Shared { net, .. } => net.link_bytes(link),
                    Kind::Timed { .. } => self.started_bytes[link],
                };
                let cap = if link < self.num_prefill_ranks {
                    send
                } else {
                    recv
                };
                if duration_ms > 0.0 {
                    bytes / (cap * duration_ms)
                } else {
                    0.0
                }
            })
            .collect()
    }
}
