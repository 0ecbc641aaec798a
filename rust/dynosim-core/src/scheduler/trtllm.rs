//! The TensorRT-LLM-like flavour's pass planning, over the same rank bookkeeping as the
//! vLLM-like flavour (queue, 32-token blocks with reuse by default, transfers, tiers).
//!
//! - Capacity, `guaranteed_no_evict` (the default): a waiting request is admitted only if the
//!   blocks of its whole prompt and maximum output, ceil((prompt + output) / block_size), less
//!   the cached prefix blocks running requests already hold, fit in the blocks no running
//!   request has reserved for its own completion. Admission stops at the first request that
//!   does not fit (no skipping ahead), and nothing is ever preempted: every running request's
//!   last token has its blocks set aside.
//! - Capacity, `max_utilization`: a request is admitted while the blocks of its next step fit;
//!   when a running request's next step does not fit, the latest-started request not yet in the
//!   pass is paused (its blocks released, its prefix kept cached, recomputed later), else the
//!   request itself.
//! - The token budget (`max_num_tokens`) counts generation tokens first: decoding requests get
//!   their token before any context (prompt) work, then contexts in progress, then new ones.
//! - Chunked context is off by default: a context must fit the budget left in the pass as a
//!   whole, and the queue waits until it does; a prompt larger than the whole budget is
//!   rejected (`prompt_exceeds_pass_token_budget`), as TensorRT-LLM refuses it. On, a context
//!   takes the budget left in pieces.

use super::vllm::VllmScheduler;
use crate::config::{CapacityScheduler, Role};
use crate::report::Records;

impl VllmScheduler {
    /// Tokens whose blocks `guaranteed_no_evict` sets aside for request `id`: its prompt and
    /// maximum output (a prefill worker's request ends with its first token).
    fn completion_tokens(&self, id: u32) -> u64 {
        let seq = &self.seqs[id as usize];
        let output = if self.role == Role::Prefill {
            1
        } else {
            seq.output
        };
        u64::from(seq.prompt) + u64::from(output)
    }

    /// Blocks request `id` may still take before its last token, beyond those it holds.
    pub(super) fn blocks_to_completion(&self, id: u32) -> u64 {
        let held = u64::from(self.seqs[id as usize].held());
        self.config
            .blocks_for(self.completion_tokens(id))
            .saturating_sub(held)
    }

    /// Blocks neither in use nor set aside for the completion of a running request (or of one
    /// whose KV is arriving).
    pub(super) fn unreserved_blocks(&self) -> u64 {
        let running: u64 = self
            .running
            .iter()
            .map(|&id| self.blocks_to_completion(id))
            .sum();
        let reserved = running + self.receiving_reserved;
        let free = u64::from(self.config.num_gpu_blocks) - u64::from(self.cache.counts().active());
        free.saturating_sub(reserved)
    }

    /// The unreserved blocks a request that completes at `tokens` tokens takes when admitted
    /// with a prefix hit of `hit_blocks` cached blocks (`hit_inactive` of them inactive): its
    /// completion blocks less the hit blocks running requests hold. Inactive cached blocks are
    /// counted as unreserved, so reusing them takes from what is left like a new block.
    fn reservation(&self, tokens: u64, hit_blocks: u32, hit_inactive: u32) -> u64 {
        let shared = u64::from(hit_blocks - hit_inactive);
        self.config.blocks_for(tokens).saturating_sub(shared)
    }

    /// Plan a pass by the TensorRT-LLM-like rules (see the module documentation).
    pub(super) fn plan_trtllm(
        &mut self,
        capacity: CapacityScheduler,
        now: f64,
        records: &mut Records,
    ) {
        let mut budget = self.config.max_num_batched_tokens;
        // Generation first, then contexts in progress, each in start order.
        let mut order = std::mem::take(&mut self.order);
        order.clear();
        let seqs = &self.seqs;
        order.extend(
            self.running
                .iter()
                .filter(|&&id| !seqs[id as usize].prefilling),
        );
        order.extend(
            self.running
                .iter()
                .filter(|&&id| seqs[id as usize].prefilling),
        );
        let mut paused = false;
        for &id in &order {
            // A request paused for an earlier one in this pass is back in the queue.
            if paused && !self.running.contains(&id) {
                continue;
            }
            let seq = &self.seqs[id as usize];
            let n = (seq.target() - seq.computed).min(budget);
            if n == 0 && seq.target() != seq.computed {
                break; // the budget is spent
            }
            let need = self.config.new_blocks(seq.computed + n, seq.held());
            let mut yielded = false;
            while self.cache.counts().available() < need {
                // No-evict reserved these blocks; a shortage only arises under
                // max_utilization. Pause the latest-started request not in the pass yet.
                let victim = self
                    .running
                    .iter()
                    .rposition(|&v| v != id && !self.seqs[v as usize].in_pass);
                let vi = match victim {
                    Some(vi) => vi,
                    None => {
                        let own = self.running.iter().position(|&v| v == id);
                        yielded = true;
                        own.expect("a planned request is running")
                    }
                };
                self.preempt(vi, records);
                paused = true;
                if yielded {
                    break;
                }
            }
            if yielded {
                continue;
            }
            self.schedule(id, n, need);
            budget -= n;
        }
        self.order = order;
        // As vLLM, no admission in a pass that paused a request: it would only come back.
        if paused {
            return;
        }
        let no_evict = capacity == CapacityScheduler::GuaranteedNoEvict;
        // Summed over the running requests only when a request is up for admission.
        let mut unreserved: Option<u64> = None;
        while let Some(&id) = self.waiting.front() {
            if self.seqs_in_use() >= self.config.max_num_seqs as usize || budget == 0 {
                break;
            }
            let Some(head) = self.head_chunk(id, budget) else {
                break; // the whole context does not fit what is left of the budget
            };
            if self.cache.counts().available() < head.hit.inactive + head.need {
                break;
            }
            if no_evict {
                let tokens = self.completion_tokens(id);
                let take = self.reservation(tokens, head.hit.blocks, head.hit.inactive);
                let left = *unreserved.get_or_insert_with(|| self.unreserved_blocks());
                if take > left {
                    break; // the first misfit stops admission
                }
                unreserved = Some(left - take);
            }
            self.admit(id, head, now, records);
            budget = budget.saturating_sub(head.tokens);
        }
    }

    /// Decode role under `guaranteed_no_evict`: whether a request of `prompt` and `output`
    /// tokens whose prompt blocks hit `hit_blocks` cached ones (`hit_inactive` of them
    /// inactive) fits besides the running requests' reservations.
    pub(super) fn fits_to_completion(
        &self,
        prompt: u32,
        output: u32,
        hit_blocks: u32,
        hit_inactive: u32,
    ) -> bool {
        let tokens = u64::from(prompt) + u64::from(output);
        self.reservation(tokens, hit_blocks, hit_inactive) <= self.unreserved_blocks()
    }
}
