//! One rank's SGLang-like engine (its `Scheduler` with a `RadixCache`), as SGLang's sources
//! describe it (python/sglang/srt/managers/scheduler.py, schedule_policy.py,
//! schedule_batch.py):
//!
//! - KV memory is counted in tokens (`num_gpu_blocks x block_size`): prompt prefixes live in a
//!   radix tree (shared, evictable when no request locks them); a request's other tokens
//!   (prompt tokens not cached yet, generated tokens) are its own, in pages of `page_size`.
//! - Prefill first: whenever a prefill batch can form, it runs and the running decodes wait
//!   for the next pass (mixed chunks are off, SGLang's default).
//! - A prefill batch takes waiting requests in queue order (`fcfs`, or `lpm`: longest cached
//!   prefix first, but only while at most 128 wait) while `max_prefill_tokens` and
//!   `chunked_prefill_size` allow and memory holds each one's uncached tokens plus
//!   min(remaining output, `clip_max_new_tokens`) besides what the running requests are
//!   expected to still need: their remaining output (clipped) times `new_token_ratio`. A
//!   prompt larger than the chunk budget takes a page-aligned chunk and continues first in the
//!   next prefill batch.
//! - `new_token_ratio` starts at `init_new_token_ratio x schedule_conservativeness` and falls
//!   linearly to `min_new_token_ratio_factor` of that over `new_token_ratio_decay_steps` decode
//!   steps. When a decode step cannot get memory even after evicting the cache, requests are
//!   retracted (fewest generated tokens first, ties: longest prompt) until 20 free tokens per
//!   remaining request are free; their prompt prefix stays cached, unlocked, and they queue
//!   again at the back to prefill their prompt and generated tokens. The ratio is then
//!   re-estimated from the remaining requests: min(1, (tokens generated + 20 x requests) /
//!   their total output).
//!
//! Where this differs from SGLang's source: generated tokens never enter the tree (the workload
//! names prompt tokens only, so nothing could match them; SGLang caches them when a request
//! finishes); `lpm` orders by a read-only prefix match and has no in-batch prefix
//! deprioritisation; running slots are `max_num_seqs`; a prefill rank reserves one output token
//! (its own) and a decode rank only its prompt's pages; when even the last running request has
//! no room for its next token it is retracted too (SGLang asserts). Where it differs from
//! Dynamo's mocker and follows SGLang: a pass is a prefill batch or a decode step, never both
//! (the mocker decodes after every prefill batch); retracted requests queue at the back, the
//! ratio is re-estimated (the mocker resets it to its start), and retraction goes on until 20
//! tokens per remaining request are free, ties going to the longest prompt.

use std::collections::VecDeque;
use std::sync::Arc;

use super::{chain_decode_passes, reusable_ids, reusable_tokens, Engine, Load, Pricing};
#[cfg(debug_assertions)]
use super::{check_invariants, Audit};
use crate::block_ids::{BlockId, BlockIds, TraceChains};
use crate::config::{EngineConfig, Role, SchedulePolicy, SglangSettings};
use crate::kv::radix::{NodeId, RadixCache, ROOT};
use crate::kv::PrefixHit;
use crate::report::{Records, RejectReason};
use crate::stats::PendingRun;
use crate::timing::{PassShape, StepTimer};
use crate::workload::Workload;

/// Free tokens per running request that a retraction restores (SGLang's
/// `retract_decode_steps`), also the per-request headroom of the re-estimated ratio.
const RETRACT_DECODE_STEPS: u64 = 20;

/// Above this many waiting requests `lpm` stops sorting the queue (SGLang's fallback to FCFS:
/// prefix matching every waiting request costs too much).
const LPM_MAX_WAITING: usize = 128;

/// A request inside one rank.
#[derive(Debug, Clone)]
struct Seq {
    request: u32,
    prompt: u32,
    output: u32,
    /// Tokens emitted so far.
    generated: u32,
    /// Tokens whose KV is in memory (cached prefix included).
    computed: u32,
    /// The tree node the request locks (its cached prompt prefix ends there), or the root.
    node: NodeId,
    /// Leading tokens held through the tree (the depth of `node`).
    cached: u32,
    /// Tokens held outside the tree, whole pages.
    private: u32,
    /// Tokens computed in the current pass.
    pass_tokens: u32,
    prefilling: bool,
    in_pass: bool,
    finished: bool,
    /// Offload tiers: looked up in G2/G3 (once per request, or again while memory had no
    /// room for the hit).
    tier_checked: bool,
    last_token_ms: f64,
}

impl Seq {
    /// Tokens that must have KV before the next token is emitted: the prompt and every token
    /// emitted so far (a retracted request computes them all again).
    fn target(&self) -> u32 {
        self.prompt + self.generated
    }
}

/// The SGLang-like engine of one rank.
#[derive(Debug, Clone)]
pub struct SglangScheduler {
    role: Role,
    settings: SglangSettings,
    block_size: u32,
    max_running: usize,
    /// KV tokens of the rank.
    capacity: u64,
    tree: RadixCache,
    ids: Arc<BlockIds>,
    pricing: Pricing,
    seqs: Vec<Seq>,
    spare: Vec<u32>,
    waiting: VecDeque<u32>,
    /// Tokens the waiting requests must compute (before prefix hits): the router's queued load.
    waiting_tokens: u64,
    /// The request whose prompt is part-way through chunked prefill; it leads the next batch.
    chunked: Option<u32>,
    running: Vec<u32>,
    /// Admitted requests whose prompt is not done yet (they join `running` when it is).
    prefilling: usize,
    in_pass: Vec<u32>,
    /// Tokens all requests hold outside the tree.
    private: u64,
    new_token_ratio: f64,
    min_new_token_ratio: f64,
    new_token_ratio_decay: f64,
    /// Prefill role: requests whose prompt is done, holding their KV for the transfer.
    handoffs: Vec<(u32, u32)>,
    held_for_transfer: u32,
    /// Decode role: requests holding memory while their KV arrives.
    receiving: u32,
    /// Offload tiers: requests holding memory while their prefix comes up from G2/G3.
    onboarding: u32,
    /// Offload tiers: full prompt blocks whose last token the tree evicted, oldest first.
    evicted: Vec<BlockId>,
    evicted_tokens: u64,
    busy: bool,
    passes: u64,
    retractions: u64,
}

impl SglangScheduler {
    /// An engine for `role` whose requests' prompts are named by `chains` (for the radix
    /// cache) and `ids` (full blocks, for routers and reports).
    pub fn new(
        role: Role,
        config: &EngineConfig,
        timer: StepTimer,
        ids: Arc<BlockIds>,
        chains: Arc<TraceChains>,
    ) -> Self {
        let settings = config.sglang();
        let block_size = config.block_size();
        let init = (settings.init_new_token_ratio * settings.schedule_conservativeness).min(1.0);
        let min = (init * settings.min_new_token_ratio_factor).min(1.0);
        SglangScheduler {
            role,
            block_size,
            max_running: config.max_num_seqs as usize,
            capacity: u64::from(config.num_gpu_blocks) * u64::from(block_size),
            tree: RadixCache::new(chains, settings.page_size),
            ids,
            pricing: Pricing::new(timer),
            seqs: Vec::new(),
            spare: Vec::new(),
            waiting: VecDeque::new(),
            waiting_tokens: 0,
            chunked: None,
            running: Vec::new(),
            prefilling: 0,
            in_pass: Vec::new(),
            private: 0,
            new_token_ratio: init,
            min_new_token_ratio: min,
            new_token_ratio_decay: (init - min) / f64::from(settings.new_token_ratio_decay_steps),
            settings,
            handoffs: Vec::new(),
            held_for_transfer: 0,
            receiving: 0,
            onboarding: 0,
            evicted: Vec::new(),
            evicted_tokens: 0,
            busy: false,
            passes: 0,
            retractions: 0,
        }
    }

    /// The new-token ratio admission uses now.
    pub fn new_token_ratio(&self) -> f64 {
        self.new_token_ratio
    }

    /// Requests retracted so far.
    pub fn retractions(&self) -> u64 {
        self.retractions
    }

    /// The rank's radix cache.
    pub fn tree(&self) -> &RadixCache {
        &self.tree
    }

    fn page_ceil(&self, tokens: u32) -> u32 {
        tokens.div_ceil(self.settings.page_size) * self.settings.page_size
    }

    /// Tokens no one holds.
    fn free(&self) -> u64 {
        self.capacity - self.tree.cached() - self.private
    }

    /// Evict cached prefixes until `tokens` are free, if the tree can; whether they are.
    fn make_room(&mut self, tokens: u64) -> bool {
        let free = self.free();
        if free < tokens {
            self.evicted_tokens += self.tree.evict(tokens - free);
            // Offload tiers: a block leaves G1 with its last token.
            let bs = self.block_size;
            for (source, start, end) in self.tree.drain_evicted() {
                let ids = self.ids.of(source as usize);
                let first = ((start + 1).div_ceil(bs) - 1) as usize;
                let last = ((end / bs) as usize).min(ids.len());
                self.evicted.extend_from_slice(&ids[first.min(last)..last]);
            }
        }
        self.free() >= tokens
    }

    /// Let `id` hold KV for its first `tokens` tokens (pages it lacks come from free memory,
    /// evicting cached prefixes if needed; the caller checked they fit).
    fn grow(&mut self, id: u32, tokens: u32) {
        let seq = &self.seqs[id as usize];
        let want = self.page_ceil(tokens) - seq.cached;
        if want > seq.private {
            let more = want - seq.private;
            let fits = self.make_room(u64::from(more));
            debug_assert!(
                fits,
                "admission and decode checks keep memory for every token"
            );
            self.private += u64::from(more);
            self.seqs[id as usize].private = want;
        }
    }

    /// Put the computed part of `id`'s prompt in the tree (SGLang's `cache_unfinished_req`):
    /// its copies of tokens another request cached meanwhile are freed, and its lock moves to
    /// the new end of its prefix.
    fn cache_prompt(&mut self, id: u32) {
        let seq = &self.seqs[id as usize];
        let tokens = seq.computed.min(seq.prompt);
        if tokens / self.settings.page_size * self.settings.page_size <= seq.cached {
            return;
        }
        let (request, old) = (seq.request, seq.node);
        let (_, node) = self.tree.insert(request, tokens);
        self.tree.lock(node);
        self.tree.unlock(old);
        let depth = self.tree.depth(node);
        let seq = &mut self.seqs[id as usize];
        let moved = depth - seq.cached;
        seq.private -= moved;
        self.private -= u64::from(moved);
        seq.cached = depth;
        seq.node = node;
    }

    /// Let go of everything `id` holds; its cached prefix stays in the tree, unlocked.
    fn release(&mut self, id: u32) {
        let seq = &mut self.seqs[id as usize];
        let node = std::mem::replace(&mut seq.node, ROOT);
        self.private -= u64::from(seq.private);
        seq.private = 0;
        seq.cached = 0;
        self.tree.unlock(node);
    }

    /// A sequence for request `i`.
    fn new_seq(&mut self, workload: &Workload, i: usize) -> u32 {
        let seq = Seq {
            request: i as u32,
            prompt: workload.input_length[i],
            output: workload.output_length[i],
            generated: 0,
            computed: 0,
            node: ROOT,
            cached: 0,
            private: 0,
            pass_tokens: 0,
            prefilling: true,
            in_pass: false,
            finished: false,
            tier_checked: false,
            last_token_ms: f64::NAN,
        };
        match self.spare.pop() {
            Some(id) => {
                self.seqs[id as usize] = seq;
                id
            }
            None => {
                self.seqs.push(seq);
                (self.seqs.len() - 1) as u32
            }
        }
    }

    /// Queue `id` at the back, or at the front (an onboarded request goes first).
    fn push_waiting(&mut self, id: u32, front: bool) {
        self.waiting_tokens += u64::from(self.seqs[id as usize].target());
        if front {
            self.waiting.push_front(id);
        } else {
            self.waiting.push_back(id);
        }
    }

    /// Running-request slots taken: running requests, admitted ones still prefilling (in the
    /// pass in flight or part-way through chunked prefill), and those holding memory while their KV arrives or comes up from the tiers
    /// (each joins the running batch next).
    fn seats(&self) -> usize {
        self.running.len() + self.prefilling + self.receiving as usize + self.onboarding as usize
    }

    /// Tokens of output the admission keeps for `seq` besides its uncached tokens: its
    /// remaining output, clipped.
    fn clipped_remaining(&self, seq: &Seq) -> u32 {
        // A prefill rank only computes the prompt and the first token.
        let remaining = if self.role == Role::Prefill {
            1
        } else {
            seq.output - seq.generated
        };
        remaining.min(self.settings.clip_max_new_tokens)
    }

    /// Order the queue for `lpm`: longest cached prefix first, arrival order among equals.
    fn sort_by_prefix(&mut self) {
        let tree = &self.tree;
        let seqs = &self.seqs;
        let mut keyed: Vec<(u32, u32)> = self
            .waiting
            .iter()
            .map(|&id| {
                let seq = &seqs[id as usize];
                (tree.peek(seq.request, reusable_tokens(seq.target())), id)
            })
            .collect();
        keyed.sort_by_key(|&(prefix, _)| std::cmp::Reverse(prefix));
        self.waiting.clear();
        self.waiting.extend(keyed.into_iter().map(|(_, id)| id));
    }

    /// Form a prefill batch (SGLang's `get_new_batch_prefill` with its `PrefillAdder`):
    /// whether one formed.
    fn prefill_batch(&mut self, now: f64, records: &mut Records) -> bool {
        if self.chunked.is_none() && (self.waiting.is_empty() || self.seats() >= self.max_running) {
            return false;
        }
        if self.settings.schedule_policy == SchedulePolicy::Lpm
            && self.waiting.len() <= LPM_MAX_WAITING
        {
            self.sort_by_prefix();
        }
        let page = self.settings.page_size;
        let clip = |n: u32| n.min(self.settings.clip_max_new_tokens);
        // What running requests are expected to still need.
        let mut offset: f64 = self
            .running
            .iter()
            .map(|&id| {
                let seq = &self.seqs[id as usize];
                f64::from(clip(seq.output - seq.generated)) * self.new_token_ratio
            })
            .sum();
        let mut current = 0u64; // uncached tokens taken by this batch
        let mut rem_input = i64::from(self.settings.max_prefill_tokens);
        let mut rem_chunk = i64::from(self.settings.chunked_prefill_size);
        // Memory admission can count on: free plus evictable (it changes as prefixes are locked).
        let room = |s: &Self| (s.free() + s.tree.evictable()) as f64;
        let mut batch: Vec<(u32, u32)> = Vec::new();
        if let Some(id) = self.chunked {
            let seq = &self.seqs[id as usize];
            let rem = (rem_chunk as f64).min(room(self) - offset).max(0.0) as u32 / page * page;
            let remaining = seq.target() - seq.computed;
            if rem > 0 {
                let extend = remaining.min(rem);
                let input = self.page_ceil(extend);
                let truncated = remaining > rem;
                let reserve = if truncated {
                    0
                } else {
                    self.clipped_remaining(seq)
                };
                offset += f64::from(input + reserve);
                current += u64::from(input);
                rem_input -= i64::from(input);
                rem_chunk -= i64::from(input);
                batch.push((id, extend));
                if !truncated {
                    self.chunked = None;
                }
            }
        }
        while let Some(&id) = self.waiting.front() {
            if self.seats() >= self.max_running {
                break;
            }
            let seq = &self.seqs[id as usize];
            let (request, target) = (seq.request, seq.target());
            let (cached, node) = self.tree.match_prefix(request, reusable_tokens(target));
            let extend = target - cached;
            // Memory comes in whole pages: the prompt's new tokens take `input`.
            let input = self.page_ceil(extend);
            let total = f64::from(input + self.clipped_remaining(&self.seqs[id as usize]));
            if total >= room(self) - offset {
                break;
            }
            if i64::from(input) >= rem_input && !batch.is_empty() {
                break;
            }
            // Locking the prefix takes it out of what eviction could free.
            self.tree.lock(node);
            if total > room(self) - offset {
                self.tree.unlock(node);
                break;
            }
            let chunk = if i64::from(input) <= rem_chunk {
                offset += total;
                extend
            } else {
                let trunc = (rem_chunk.max(0) as u32) / page * page;
                // One request at a time is part-way through its prompt (SGLang asserts it).
                if trunc == 0 || self.chunked.is_some() {
                    self.tree.unlock(node);
                    break;
                }
                offset += f64::from(trunc);
                self.chunked = Some(id);
                trunc
            };
            let taken = i64::from(self.page_ceil(chunk));
            current += taken as u64;
            rem_input -= taken;
            rem_chunk -= taken;
            self.waiting.pop_front();
            self.waiting_tokens -= u64::from(target);
            self.prefilling += 1;
            let seq = &mut self.seqs[id as usize];
            seq.node = node;
            seq.cached = cached;
            seq.computed = cached;
            records.admit(seq.request as usize, now, cached);
            batch.push((id, chunk));
            if self.chunked == Some(id)
                || room(self) - offset <= 0.0
                || room(self) <= current as f64
                || rem_input <= 0
                || rem_chunk <= 0
            {
                break;
            }
        }
        for &(id, tokens) in &batch {
            let computed = self.seqs[id as usize].computed + tokens;
            self.grow(id, computed);
            let seq = &mut self.seqs[id as usize];
            seq.computed = computed;
            seq.pass_tokens = tokens;
            seq.prefilling = true;
            seq.in_pass = true;
            self.in_pass.push(id);
        }
        !batch.is_empty()
    }

    /// Tokens the running requests' next decode step needs: a page for each whose next token
    /// starts one.
    fn decode_need(&self, ids: &[u32]) -> u64 {
        ids.iter()
            .map(|&id| {
                let seq = &self.seqs[id as usize];
                u64::from(self.page_ceil(seq.target()) - self.page_ceil(seq.computed))
            })
            .sum()
    }

    /// Form a decode batch of every running request (SGLang's `update_running_batch`),
    /// retracting requests when memory runs out: whether one formed.
    fn decode_batch(&mut self, records: &mut Records) -> bool {
        if self.running.is_empty() {
            return false;
        }
        if self.make_room(self.decode_need(&self.running)) {
            self.new_token_ratio =
                (self.new_token_ratio - self.new_token_ratio_decay).max(self.min_new_token_ratio);
        } else {
            self.retract(records);
            if self.running.is_empty() {
                return false;
            }
        }
        let running = std::mem::take(&mut self.running);
        for &id in &running {
            let target = self.seqs[id as usize].target();
            self.grow(id, target);
            let seq = &mut self.seqs[id as usize];
            seq.pass_tokens = target - seq.computed;
            seq.computed = target;
            seq.in_pass = true;
        }
        self.in_pass.extend_from_slice(&running);
        self.running = running;
        true
    }

    /// Retract running requests (SGLang's `retract_decode`): fewest generated tokens first,
    /// ties to the longest prompt, at least one, until 20 tokens per remaining request are
    /// free; then re-estimate the new-token ratio from the requests left.
    fn retract(&mut self, records: &mut Records) {
        let mut order = self.running.clone();
        let seqs = &self.seqs;
        order.sort_by_key(|&id| {
            let s = &seqs[id as usize];
            (s.generated, std::cmp::Reverse(s.prompt))
        });
        let mut kept = order.len();
        let mut victims = 0;
        while kept > 0 {
            let room = |s: &mut Self, victims: usize| s.make_room(s.decode_need(&order[victims..]));
            if kept == 1 {
                // SGLang keeps the last request (and asserts it has room); here it goes too
                // when even its next token has no room, so the rank never stalls.
                if room(self, victims) {
                    break;
                }
            } else if victims > 0
                && self.free() >= kept as u64 * RETRACT_DECODE_STEPS
                && room(self, victims)
            {
                break;
            }
            let id = order[victims];
            self.release(id);
            let seq = &mut self.seqs[id as usize];
            seq.computed = 0;
            seq.prefilling = true;
            records.preemptions[seq.request as usize] += 1;
            self.retractions += 1;
            self.push_waiting(id, false);
            victims += 1;
            kept -= 1;
            // The released prefix is evictable now: use it at once.
            let want = kept as u64 * RETRACT_DECODE_STEPS;
            if self.free() < want {
                self.make_room(want);
            }
        }
        let retracted = &order[..victims];
        self.running.retain(|id| !retracted.contains(id));
        if kept > 0 {
            let (decoded, max_new) = self.running.iter().fold((0u64, 0u64), |(d, m), &id| {
                let s = &self.seqs[id as usize];
                (d + u64::from(s.generated), m + u64::from(s.output))
            });
            let estimate = (decoded + RETRACT_DECODE_STEPS * kept as u64) as f64 / max_new as f64;
            self.new_token_ratio = estimate.min(1.0);
        }
    }

    /// The shape of the pass planned in `in_pass`.
    fn pass_shape(&self) -> PassShape {
        PassShape::of(self.in_pass.iter().map(|&id| {
            let seq = &self.seqs[id as usize];
            (seq.prefilling, seq.pass_tokens, seq.computed)
        }))
    }
}

impl Engine for SglangScheduler {
    fn never_fits(&self, prompt: u32, output: u32) -> Option<RejectReason> {
        let (prompt, output) = (u64::from(prompt), u64::from(output));
        let page = u64::from(self.settings.page_size);
        // Admission must hold the uncached prompt tokens, in whole pages, and the remaining
        // output (one token on a prefill rank) strictly inside memory.
        if prompt.div_ceil(page) * page + 1 >= self.capacity {
            Some(RejectReason::PromptExceedsCache)
        } else if self.role != Role::Prefill && prompt + output + page > self.capacity {
            // A request retracted after g tokens needs ceil_page(prompt + g) + output - g,
            // at most prompt + output + page - 1.
            Some(RejectReason::OutputExceedsCache)
        } else {
            None
        }
    }

    fn enqueue(&mut self, workload: &Workload, i: usize, _now: f64) {
        let id = self.new_seq(workload, i);
        self.push_waiting(id, false);
    }

    fn start_pass(&mut self, now: f64, records: &mut Records) -> Option<PassShape> {
        debug_assert!(!self.busy && self.in_pass.is_empty());
        let formed = self.prefill_batch(now, records)
            || self.decode_batch(records)
            // Retracting every running request frees memory a prefill can use.
            || self.prefill_batch(now, records);
        #[cfg(debug_assertions)]
        check_invariants(self);
        if !formed {
            return None;
        }
        self.busy = true;
        self.passes += 1;
        Some(self.pass_shape())
    }

    fn finish_pass(&mut self, now: f64, records: &mut Records) {
        self.busy = false;
        let in_pass = std::mem::take(&mut self.in_pass);
        let mut any_left = false;
        let pass_start = self.pricing.pass_start_ms();
        let mut gaps = PendingRun::default();
        for &id in &in_pass {
            let seq = &mut self.seqs[id as usize];
            seq.in_pass = false;
            let prompt_done = seq.computed == seq.target();
            if let (Some(start), true) = (pass_start, seq.prefilling) {
                records.prefill_pass(seq.request as usize, start, now, prompt_done);
            }
            if !prompt_done {
                // A chunk of a longer prompt: cache it so others can share it meanwhile.
                self.cache_prompt(id);
                continue;
            }
            let was_prefill = std::mem::replace(&mut seq.prefilling, false);
            if was_prefill {
                self.prefilling -= 1;
            }
            let seq = &mut self.seqs[id as usize];
            seq.generated += 1;
            let r = seq.request as usize;
            if self.role == Role::Prefill {
                // The first token counts once the KV reaches the decode worker.
                seq.finished = true;
                self.handoffs.push((seq.request, id));
                self.held_for_transfer += 1;
                self.cache_prompt(id);
                continue;
            }
            match seq.generated {
                1 => records.first_token_ms[r] = now,
                g => {
                    records.itl.push_via(&mut gaps, now - seq.last_token_ms);
                    if g == 2 {
                        records.second_token_ms[r] = now;
                    }
                }
            }
            seq.last_token_ms = now;
            if seq.generated == seq.output {
                records.complete(r, now);
                seq.finished = true;
                any_left = true;
                self.cache_prompt(id);
                self.release(id);
                self.spare.push(id);
            } else if was_prefill {
                self.cache_prompt(id);
                self.running.push(id);
            }
        }
        records.itl.flush(gaps);
        self.in_pass = in_pass;
        self.in_pass.clear();
        if any_left {
            let seqs = &self.seqs;
            self.running.retain(|&id| !seqs[id as usize].finished);
        }
        #[cfg(debug_assertions)]
        check_invariants(self);
    }

    fn run_plain_decodes(
        &mut self,
        start: f64,
        end: f64,
        horizon: f64,
        records: &mut Records,
    ) -> (f64, u64) {
        // A pass is plain when nothing waits or is part-way through its prompt, and every
        // running request decodes one token in it, after its second and before its last, with
        // free memory for its next token without evicting or starting a block: the next pass
        // is then the same decode step with one more KV token each (the ratio decays once per
        // step).
        let n = self.in_pass.len();
        if self.role == Role::Prefill
            || !self.waiting.is_empty()
            || self.chunked.is_some()
            || self.receiving > 0
            || n != self.running.len()
            || end >= horizon
        {
            return (end, 0);
        }
        let page = self.settings.page_size;
        let mut plain = u32::MAX;
        for &id in &self.in_pass {
            let seq = &self.seqs[id as usize];
            if seq.prefilling
                || seq.pass_tokens != 1
                || seq.generated < 2
                || seq.last_token_ms != start
            {
                return (end, 0);
            }
            plain = plain.min(seq.output - seq.generated - 1);
        }
        // Tokens the next `k` steps take from free memory, without eviction, and without
        // changing the blocks in use the time series read (the loop does not see these passes).
        let held = self.tree.protected() + self.private;
        let block = u64::from(self.block_size);
        let free = self.free().min(held.div_ceil(block) * block - held);
        let takes = |k: u32| -> u64 {
            self.in_pass
                .iter()
                .map(|&id| {
                    let c = self.seqs[id as usize].computed;
                    u64::from(self.page_ceil(c + k) - self.page_ceil(c))
                })
                .sum()
        };
        if page == 1 {
            plain = plain.min((free / n as u64).min(u64::from(u32::MAX)) as u32);
        } else {
            while plain > 0 && takes(plain) > free {
                plain /= 2;
            }
        }
        let shape = self.pass_shape();
        let (prev, end, passes) = chain_decode_passes(
            &self.pricing.timer,
            self.pricing.log.as_deref_mut(),
            shape,
            (start, end, horizon),
            plain,
            records,
        );
        if passes > 0 {
            let in_pass = std::mem::take(&mut self.in_pass);
            for &id in &in_pass {
                let computed = self.seqs[id as usize].computed + passes;
                self.grow(id, computed);
                let seq = &mut self.seqs[id as usize];
                seq.generated += passes;
                seq.computed = computed;
                seq.last_token_ms = prev;
            }
            self.in_pass = in_pass;
            self.new_token_ratio = (self.new_token_ratio
                - self.new_token_ratio_decay * f64::from(passes))
            .max(self.min_new_token_ratio);
            self.passes += u64::from(passes);
        }
        (end, u64::from(passes))
    }

    fn take_handoffs(&mut self) -> std::vec::Drain<'_, (u32, u32)> {
        self.handoffs.drain(..)
    }

    fn release_handoff(&mut self, handle: u32) {
        self.held_for_transfer -= 1;
        self.release(handle);
        self.spare.push(handle);
    }

    fn reserve_remote(&mut self, workload: &Workload, i: usize) -> Option<(u32, u32)> {
        if self.seats() >= self.max_running {
            return None;
        }
        let prompt = workload.input_length[i];
        let (cached, node) = self.tree.match_prefix(i as u32, prompt);
        self.tree.lock(node);
        let need = u64::from(self.page_ceil(prompt) - cached);
        if !self.make_room(need) {
            self.tree.unlock(node);
            return None;
        }
        let id = self.new_seq(workload, i);
        let seq = &mut self.seqs[id as usize];
        seq.node = node;
        seq.cached = cached;
        seq.computed = cached;
        self.grow(id, prompt);
        self.receiving += 1;
        Some((id, cached))
    }

    fn activate_remote(&mut self, handle: u32, now: f64, first_token_now: bool, r: &mut Records) {
        self.receiving -= 1;
        let seq = &mut self.seqs[handle as usize];
        seq.computed = seq.prompt;
        seq.prefilling = false;
        self.cache_prompt(handle);
        if !first_token_now {
            // A zero-token step on the next pass emits the first token (generated stays 0).
            self.running.push(handle);
            return;
        }
        let seq = &mut self.seqs[handle as usize];
        seq.generated = 1;
        seq.last_token_ms = now;
        let row = seq.request as usize;
        r.first_token_ms[row] = now;
        if seq.output == 1 {
            r.complete(row, now);
            self.release(handle);
            self.spare.push(handle);
        } else {
            self.running.push(handle);
        }
    }

    fn awaits_transfers(&self) -> bool {
        self.held_for_transfer > 0 || self.receiving > 0 || self.onboarding > 0
    }

    fn is_onboarding(&self) -> bool {
        self.onboarding > 0
    }

    fn record_evictions(&mut self) {
        self.tree.record_evictions();
    }

    fn drain_evicted_into(&mut self, out: &mut Vec<BlockId>) {
        out.append(&mut self.evicted);
    }

    fn take_unchecked_heads(&mut self, out: &mut Vec<u32>) {
        // What the next prefill batch could take: the chunk budget (the one crossing it
        // included) and the free running slots.
        out.clear();
        let budget = u64::from(self.settings.chunked_prefill_size);
        let room = self.max_running.saturating_sub(self.seats());
        let mut tokens = 0u64;
        for &id in self.waiting.iter().take(room) {
            if tokens >= budget {
                break;
            }
            let seq = &mut self.seqs[id as usize];
            tokens += u64::from(seq.target());
            if !seq.tier_checked {
                seq.tier_checked = true;
                out.push(id);
            }
        }
    }

    fn unqueue(&mut self, handle: u32) {
        let at = self.waiting.iter().position(|&id| id == handle);
        self.waiting
            .remove(at.expect("unqueue takes a waiting request"));
        self.waiting_tokens -= u64::from(self.seqs[handle as usize].target());
    }

    fn hold_for_onboard(&mut self, handle: u32, hit: PrefixHit, blocks: u32) -> bool {
        let seq = &self.seqs[handle as usize];
        let (request, prompt) = (seq.request, seq.prompt);
        let (cached, node) = self
            .tree
            .match_prefix(request, hit.blocks * self.block_size);
        self.tree.lock(node);
        let end = ((hit.blocks + blocks) * self.block_size).min(prompt);
        let need = u64::from(self.page_ceil(end) - cached);
        // A hold that cannot fit evicts nothing: it is tried again before later passes.
        if self.free() + self.tree.evictable() < need {
            self.tree.unlock(node);
            self.seqs[handle as usize].tier_checked = false;
            return false;
        }
        let seq = &mut self.seqs[handle as usize];
        seq.node = node;
        seq.cached = cached;
        seq.computed = cached;
        self.grow(handle, end);
        self.seqs[handle as usize].computed = end;
        self.onboarding += 1;
        true
    }

    fn finish_onboard(&mut self, handle: u32) {
        // The onboarded tokens join the tree, then the hold ends: they stay cached (most
        // recent) and the request, first in the queue, finds them as its prefix.
        self.onboarding -= 1;
        self.cache_prompt(handle);
        self.release(handle);
        self.seqs[handle as usize].computed = 0;
        self.push_waiting(handle, true);
    }

    fn request_of(&self, handle: u32) -> usize {
        self.seqs[handle as usize].request as usize
    }

    fn block_ids(&self) -> &BlockIds {
        &self.ids
    }

    fn reusable_ids(&self, handle: u32) -> &[BlockId] {
        let seq = &self.seqs[handle as usize];
        reusable_ids(
            self.ids.of(seq.request as usize),
            seq.target(),
            self.block_size,
        )
    }

    fn prefix_hit(&self, request: usize, ids: &[BlockId]) -> PrefixHit {
        let tokens = self
            .tree
            .peek(request as u32, ids.len() as u32 * self.block_size);
        PrefixHit {
            blocks: tokens / self.block_size,
            // Holding a cached prefix takes no memory besides what `hold_for_onboard` checks.
            inactive: 0,
        }
    }

    fn active_blocks(&self) -> u32 {
        (self.tree.protected() + self.private).div_ceil(u64::from(self.block_size)) as u32
    }

    fn waiting_blocks(&self) -> u64 {
        self.waiting_tokens.div_ceil(u64::from(self.block_size))
    }

    fn evictions(&self) -> u64 {
        self.evicted_tokens / u64::from(self.block_size)
    }

    /// Waiting requests, those holding memory while their KV arrives or comes up from the
    /// tiers, and the admitted ones: decoding, or computing their prompt (in the pass in
    /// flight or part-way through chunked prefill).
    fn load(&self) -> Load {
        Load {
            waiting: (self.waiting.len() + (self.receiving + self.onboarding) as usize) as u64,
            running: (self.running.len() + self.prefilling) as u64,
        }
    }

    /// In tokens. A prefill batch takes at most `chunked_prefill_size` tokens (whole pages of
    /// it), a decode step one token per request.
    #[cfg(debug_assertions)]
    fn audit(&self) -> Audit {
        let prefill = self
            .in_pass
            .iter()
            .any(|&id| self.seqs[id as usize].prefilling);
        let budget = if prefill {
            u64::from(self.settings.chunked_prefill_size)
        } else {
            self.in_pass.len() as u64
        };
        let (references, holders) = self.tree.lock_counts(self.seqs.iter().map(|s| s.node));
        Audit {
            seats: self.seats(),
            max_seats: self.max_running,
            pass_tokens: self
                .in_pass
                .iter()
                .map(|&id| self.seqs[id as usize].pass_tokens)
                .collect(),
            pass_budget: Some(budget),
            memory: self.tree.cached() + self.private,
            capacity: self.capacity,
            references,
            holders,
            held: self.private,
            // Released requests hold nothing, so every sequence can be summed.
            held_by_requests: self.seqs.iter().map(|s| u64::from(s.private)).sum(),
        }
    }

    fn block_size(&self) -> u32 {
        self.block_size
    }

    fn is_busy(&self) -> bool {
        self.busy
    }

    fn has_work(&self) -> bool {
        !self.waiting.is_empty() || !self.running.is_empty() || self.chunked.is_some()
    }

    fn waiting_len(&self) -> usize {
        self.waiting.len()
    }

    fn running_len(&self) -> usize {
        self.running.len()
    }

    fn passes(&self) -> u64 {
        self.passes
    }

    fn pricing(&self) -> &Pricing {
        &self.pricing
    }

    fn pricing_mut(&mut self) -> &mut Pricing {
        &mut self.pricing
    }

    fn preemptions(&self) -> u64 {
        self.retractions
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Start the next pass at `now` and price it (a rank alone): its duration (ms).
    fn step(e: &mut SglangScheduler, now: f64, r: &mut Records) -> Option<f64> {
        let shape = e.start_pass(now, r)?;
        Some(e.price_pass(&shape, None, now))
    }
    use crate::config::{Backend, FixedTiming, TimingConfig};
    use crate::workload::tests::columns as workload;

    /// Requests as (prompt, output, trace hash ids), 4 tokens per hash id, all at 0 ms.
    struct Rig {
        ids: Vec<u64>,
        offsets: Vec<u64>,
        input: Vec<u32>,
        output: Vec<u32>,
        arrival: Vec<f64>,
    }

    impl Rig {
        fn new(rows: &[(u32, u32, Vec<u64>)]) -> Self {
            let mut offsets = vec![0u64];
            for r in rows {
                offsets.push(offsets.last().unwrap() + r.2.len() as u64);
            }
            Rig {
                ids: rows.iter().flat_map(|r| r.2.iter().copied()).collect(),
                offsets,
                input: rows.iter().map(|r| r.0).collect(),
                output: rows.iter().map(|r| r.1).collect(),
                arrival: vec![0.0; rows.len()],
            }
        }

        fn workload(&self) -> Workload<'_> {
            workload(
                &self.ids,
                &self.offsets,
                &self.input,
                &self.output,
                &self.arrival,
                4,
            )
        }

        /// An engine with fixed timing: a pass with prefill work costs 10 ms, a decode-only
        /// pass 1 ms.
        fn engine(&self, config: EngineConfig) -> SglangScheduler {
            let w = self.workload();
            let ids = Arc::new(BlockIds::new(&w, config.block_size(), 0).unwrap());
            let chains = Arc::new(TraceChains::new(&w));
            let kv = u64::from(config.num_gpu_blocks) * u64::from(config.block_size());
            let timing = TimingConfig::Fixed(FixedTiming {
                prefill_ms: 10.0,
                decode_ms: 1.0,
            });
            let timer = StepTimer::new(timing, kv);
            SglangScheduler::new(Role::Aggregated, &config, timer, ids, chains)
        }

        fn records(&self) -> Records {
            Records::new(self.arrival.clone(), &self.input, &self.output)
        }

        /// An engine of `config` that ran request 0's prefill pass (0-10 ms).
        fn after_first_prefill(&self, config: EngineConfig) -> (SglangScheduler, Records) {
            let mut r = self.records();
            let mut e = self.engine(config);
            e.enqueue(&self.workload(), 0, 0.0);
            step(&mut e, 0.0, &mut r);
            e.finish_pass(10.0, &mut r);
            (e, r)
        }
    }

    /// An SGLang engine of `tokens` one-token blocks.
    fn config(tokens: u32) -> EngineConfig {
        EngineConfig {
            backend: Backend::Sglang,
            block_size: Some(1),
            num_gpu_blocks: tokens,
            ..EngineConfig::default()
        }
    }

    /// The workload rows in the pass in flight, in batch order.
    fn in_pass(e: &SglangScheduler) -> Vec<u32> {
        e.in_pass
            .iter()
            .map(|&id| e.seqs[id as usize].request)
            .collect()
    }

    #[test]
    fn prefill_first_starves_decodes_for_a_pass() {
        let rig = Rig::new(&[(8, 5, vec![1, 2]), (8, 2, vec![3, 4])]);
        let w = rig.workload();
        let mut r = rig.records();
        let mut e = rig.engine(config(1000));
        e.enqueue(&w, 0, 0.0);
        assert_eq!(step(&mut e, 0.0, &mut r), Some(10.0)); // A's prompt
        e.finish_pass(10.0, &mut r);
        assert_eq!(step(&mut e, 10.0, &mut r), Some(1.0)); // A decodes
        e.finish_pass(11.0, &mut r);
        // B arrives: its prefill runs alone (10 ms, not 10 + 1): A gets no step.
        e.enqueue(&w, 1, 0.0);
        assert_eq!(step(&mut e, 11.0, &mut r), Some(10.0));
        assert_eq!(in_pass(&e), [1]);
        e.finish_pass(21.0, &mut r);
        assert_eq!((r.first_token_ms[1], e.seqs[0].generated), (21.0, 2));
        // Then both decode: A's third token comes 11 ms after its second.
        assert_eq!(step(&mut e, 21.0, &mut r), Some(1.0));
        assert_eq!(in_pass(&e), [0, 1]);
        e.finish_pass(22.0, &mut r);
        assert_eq!(r.itl.count(), 3); // A: 10 -> 11 -> 22 ms; B: 21 -> 22 ms (done)
        assert_eq!(r.last_token_ms[1], 22.0);
    }

    /// Seed the tree with request 0's prompt, queue the others, and plan the next pass.
    fn first_batch(rows: &[(u32, u32, Vec<u64>)], policy: SchedulePolicy) -> Vec<u32> {
        let rig = Rig::new(rows);
        let w = rig.workload();
        // Request 0 ends (one output token); its prompt stays.
        let (mut e, mut r) = rig.after_first_prefill(EngineConfig {
            schedule_policy: Some(policy),
            chunked_prefill_size: Some(8),
            max_prefill_tokens: Some(16),
            ..config(10_000)
        });
        for i in 1..rows.len() {
            e.enqueue(&w, i, 0.0);
        }
        step(&mut e, 10.0, &mut r);
        in_pass(&e)
    }

    #[test]
    fn lpm_takes_longest_cached_prefix_first() {
        // The tree holds [1, 2] (8 tokens). Waiting, in arrival order: [7, 8] (no hit), [1, 5]
        // (4 cached), [1, 2] (7 cached: one token is always computed).
        let rows = [
            (8, 1, vec![1, 2]),
            (8, 2, vec![7, 8]),
            (8, 2, vec![1, 5]),
            (8, 2, vec![1, 2]),
        ];
        // LPM: [1, 2] computes 1 token, [1, 5] 4, then [7, 8] gets the chunk budget's last 3.
        assert_eq!(first_batch(&rows, SchedulePolicy::Lpm), [3, 2, 1]);
        // FCFS: [7, 8] takes the whole chunk budget of 8.
        assert_eq!(first_batch(&rows, SchedulePolicy::Fcfs), [1]);
    }

    #[test]
    fn lpm_falls_back_to_arrival_order_above_128_waiting() {
        // `misses` requests with no cached prefix, then one that hits request 0's prompt.
        let rows = |misses: u64| -> Vec<(u32, u32, Vec<u64>)> {
            let mut rows = vec![(8, 1, vec![1, 2])];
            rows.extend((0..misses).map(|j| (8, 2, vec![100 + 2 * j, 101 + 2 * j])));
            rows.push((8, 2, vec![1, 2]));
            rows
        };
        // 128 waiting: sorted, the hit goes first.
        assert_eq!(first_batch(&rows(127), SchedulePolicy::Lpm)[0], 128);
        // 129 waiting: arrival order, the first miss takes the whole budget.
        assert_eq!(first_batch(&rows(128), SchedulePolicy::Lpm), [1]);
    }

    #[test]
    fn admission_reserves_for_running_requests_output() {
        // 100 tokens. A (10-token prompt, 51 output tokens) runs after its prefill: it holds
        // its 10 prompt tokens and reserves min(50 remaining, 4096) x 0.7 = 35. B must fit
        // its prompt plus output strictly inside 90 free - 35 = 55 tokens.
        let admitted = |b_output: u32| {
            let rig = Rig::new(&[(10, 51, vec![1, 2, 3]), (20, b_output, vec![4, 5, 6, 7, 8])]);
            let (mut e, mut r) = rig.after_first_prefill(config(100));
            e.enqueue(&rig.workload(), 1, 0.0);
            step(&mut e, 10.0, &mut r);
            in_pass(&e) == [1]
        };
        assert!(!admitted(35)); // 20 + 35 = 55 is not below 55: A decodes instead
        assert!(admitted(34));
    }

    /// Put request `i` in the running batch as if it had emitted `generated` tokens: it holds
    /// prompt + generated - 1 tokens, its prompt cached in the tree when `cache_prompt`.
    fn running(e: &mut SglangScheduler, w: &Workload, i: usize, generated: u32, cached: bool) {
        let id = e.new_seq(w, i);
        let seq = &mut e.seqs[id as usize];
        seq.generated = generated;
        seq.prefilling = false;
        seq.computed = seq.prompt + generated - 1;
        seq.private = seq.computed;
        e.private += u64::from(seq.computed);
        if cached {
            e.cache_prompt(id);
        }
        e.running.push(id);
    }

    /// Requests (prompt, output): A (50, 100), B (60, 80), C (40, 50), D (30, 60).
    fn retraction_rig() -> Rig {
        Rig::new(&[
            (50, 100, vec![1; 13]),
            (60, 80, vec![2; 15]),
            (40, 50, vec![3; 10]),
            (30, 60, vec![4; 8]),
        ])
    }

    fn waiting_rows(e: &SglangScheduler) -> Vec<u32> {
        e.waiting
            .iter()
            .map(|&id| e.seqs[id as usize].request)
            .collect()
    }

    #[test]
    fn retraction_takes_fewest_outputs_then_longest_prompt() {
        // A has emitted 50 tokens, B 40, C 45, D 40. They hold 99 + 99 + 84 + 69 = 351 tokens
        // (B's prompt in the tree); 2 of 353 are free and the next step needs 4.
        let rig = retraction_rig();
        let w = rig.workload();
        let mut r = rig.records();
        let mut e = rig.engine(config(353));
        for (i, generated) in [(0, 50), (1, 40), (2, 45), (3, 40)] {
            running(&mut e, &w, i, generated, i == 1);
        }
        assert_eq!((e.free(), e.tree.protected()), (2, 60));
        assert_eq!(step(&mut e, 0.0, &mut r), Some(1.0));
        // B and D emitted fewest (40); B's prompt is longer, so B goes: 2 + 39 = 41 free is
        // below 20 x 3 remaining, so B's prompt, evictable now, is evicted at once (101 free).
        assert_eq!(waiting_rows(&e), [1]);
        assert_eq!(in_pass(&e), [0, 2, 3]);
        assert_eq!((r.preemptions[1], e.tree.cached()), (1, 0));
        // Re-estimated from A, C and D: (50 + 45 + 40 + 20 x 3) / (100 + 50 + 60).
        assert!((e.new_token_ratio() - 195.0 / 210.0).abs() < 1e-12);
    }

    #[test]
    fn a_retracted_prompt_stays_cached() {
        // As above without D: 2 of 284 tokens free, 3 needed. B goes, and 41 free tokens cover
        // 20 x 2 remaining: its 60 prompt tokens stay in the tree, unlocked, for its re-prefill.
        let rig = retraction_rig();
        let w = rig.workload();
        let mut r = rig.records();
        let mut e = rig.engine(config(284));
        for (i, generated) in [(0, 50), (1, 40), (2, 45)] {
            running(&mut e, &w, i, generated, i == 1);
        }
        assert_eq!(step(&mut e, 0.0, &mut r), Some(1.0));
        assert_eq!(waiting_rows(&e), [1]);
        assert_eq!((e.tree.peek(1, 99), e.tree.evictable()), (60, 60));
        // (50 + 45 + 20 x 2) / (100 + 50) = 0.9.
        assert!((e.new_token_ratio() - 0.9).abs() < 1e-12);
        // B would re-prefill its 40 generated tokens on top of the cached prompt, and needs 40
        // + 40 remaining output = 80 tokens, but only 39 free + 60 evictable - (49 + 4) x 0.9
        // reserved for A and C = 51.3 are there: A and C decode.
        e.finish_pass(1.0, &mut r);
        assert_eq!(e.tree.peek(1, 99), 60);
        assert_eq!(step(&mut e, 1.0, &mut r), Some(1.0));
        assert_eq!(in_pass(&e), [0, 2]);
    }

    #[test]
    fn ratio_decays_to_its_floor_and_scales_with_conservativeness() {
        // Start 0.7, floor 0.14 x 0.7 = 0.098, reached after 4 decode steps: 0.1505 each.
        let rig = Rig::new(&[(4, 8, vec![1])]);
        let w = rig.workload();
        let mut r = rig.records();
        let mut e = rig.engine(EngineConfig {
            new_token_ratio_decay_steps: Some(4),
            ..config(100)
        });
        e.enqueue(&w, 0, 0.0);
        let mut ratios = vec![];
        let mut now = 0.0;
        while let Some(ms) = step(&mut e, now, &mut r) {
            now += ms;
            e.finish_pass(now, &mut r);
            ratios.push((e.new_token_ratio() * 1e4).round() / 1e4);
        }
        // The prefill pass leaves the ratio alone; seven decode passes follow.
        assert_eq!(
            ratios,
            [0.7, 0.5495, 0.399, 0.2485, 0.098, 0.098, 0.098, 0.098]
        );
        let e = rig.engine(EngineConfig {
            schedule_conservativeness: Some(0.5),
            ..config(100)
        });
        assert!((e.new_token_ratio() - 0.35).abs() < 1e-12);
    }

    /// One request (8-token prompt, 4 output tokens) prefilled and decoding: the pass after
    /// its prefill is planned.
    fn decoding() -> (SglangScheduler, Records) {
        let (mut e, mut r) = Rig::new(&[(8, 4, vec![1, 2])]).after_first_prefill(config(100));
        assert_eq!(step(&mut e, 10.0, &mut r), Some(1.0));
        (e, r)
    }

    #[test]
    #[should_panic(expected = "requests hold it")]
    fn a_lock_no_request_holds_is_caught_when_the_pass_ends() {
        // A stray lock on the request's cached prompt, as a request that never unlocked it.
        let (mut e, mut r) = decoding();
        let node = e.seqs[0].node;
        e.tree.lock(node);
        e.finish_pass(11.0, &mut r);
    }

    #[test]
    #[should_panic(expected = "over a budget of 1")]
    fn a_pass_over_its_token_budget_is_caught() {
        // A decode step computes one token per request: two for one request is over budget.
        let (mut e, _) = decoding();
        e.seqs[0].pass_tokens = 2;
        check_invariants(&e);
    }
}
