//! The vLLM-like flavour of a rank's engine: a waiting queue, running requests, a token budget
//! per pass, chunked prefill and recompute preemption, over one rank's block cache (`RankCache`).

use std::collections::VecDeque;
use std::sync::Arc;

use crate::block_ids::{BlockId, BlockIds};
use crate::config::{Backend, CapacityScheduler, EngineConfig, PreemptionMode, Role};
use crate::kv::{PrefixHit, RankCache};
use crate::report::{Records, RejectReason};
use crate::scheduler::{chain_decode_passes, reusable_ids, Engine, Load, Pricing};
#[cfg(debug_assertions)]
use crate::scheduler::{check_invariants, Audit};
use crate::stats::PendingRun;
use crate::timing::{PassShape, StepTimer};
use crate::workload::Workload;

/// A request inside one worker.
#[derive(Debug, Clone, Default)]
pub(super) struct Seq {
    pub(super) request: u32,
    pub(super) prompt: u32,
    pub(super) output: u32,
    /// Tokens emitted so far.
    pub(super) generated: u32,
    /// Tokens whose KV is in the cache.
    pub(super) computed: u32,
    /// Still computing its prompt (or recomputing after preemption).
    pub(super) prefilling: bool,
    /// Cached blocks held, in block order.
    pub(super) slots: Vec<u32>,
    /// Blocks held without an identity.
    pub(super) private: u32,
    /// Prompt blocks already looked up or named.
    pub(super) named: u32,
    /// Full prompt blocks (those with identities).
    pub(super) prompt_blocks: u32,
    pub(super) in_pass: bool,
    /// Tokens scheduled in the current pass.
    pub(super) pass_tokens: u32,
    pub(super) finished: bool,
    /// Offload tiers: looked up in G2/G3 (once per request, or again while G1 had no room for
    /// the hit: a preempted request recomputes from what G1 still holds).
    pub(super) tier_checked: bool,
    pub(super) last_token_ms: f64,
    /// When the request reached this rank's queue, or its running batch from a KV transfer
    /// (ms): a pass formed before then cannot hold it. Requests the rank put back itself
    /// (preempted, onboarded) are visible at once (minus infinity).
    pub(super) queued_ms: f64,
}

impl Seq {
    /// Tokens that must have KV before the next token can be emitted: the prompt plus every
    /// token emitted so far (after preemption they are all recomputed).
    pub(super) fn target(&self) -> u32 {
        self.prompt + self.generated
    }

    pub(super) fn held(&self) -> u32 {
        self.slots.len() as u32 + self.private
    }

    /// Plain decode passes that may follow this request's pass in flight, as far as it is
    /// concerned: each ends before its last token, with its next token within the blocks it
    /// holds (of `block_size` tokens).
    fn plain_passes(&self, block_size: u32) -> u32 {
        let before_last = self.output - self.generated - 1;
        let room = self.held() * block_size - self.computed;
        before_last.min(room)
    }

    /// Give the cache identities of the prompt blocks (by `ids`) that are full now, so later
    /// requests can share them; a block another request cached first stays private.
    fn name_full_blocks(&mut self, cache: &mut RankCache, ids: &BlockIds, block_size: u32) {
        // Decode steps land here once every prompt block is named: skip the identities'
        // lookup and the division.
        if self.named == self.prompt_blocks {
            return;
        }
        let ids = ids.of(self.request as usize);
        debug_assert_eq!(ids.len(), self.prompt_blocks as usize);
        let full = (self.computed / block_size).min(ids.len() as u32);
        self.name_blocks_until(cache, ids, full);
    }

    /// Name the prompt blocks (`ids`) before `end` (private blocks holding their content).
    fn name_blocks_until(&mut self, cache: &mut RankCache, ids: &[BlockId], end: u32) {
        if self.named < end {
            self.private -=
                cache.register_all(&ids[self.named as usize..end as usize], &mut self.slots);
            self.named = end;
        }
    }

    /// Take the prefix `hit` of the prompt blocks `ids` (its first `hit.blocks` blocks, cached)
    /// and `blocks` more private blocks; the caller checked that they fit.
    fn hold(&mut self, cache: &mut RankCache, ids: &[BlockId], hit: PrefixHit, blocks: u32) {
        cache.acquire_all(&ids[..hit.blocks as usize], &mut self.slots);
        self.named = hit.blocks;
        cache.allocate(blocks);
        self.private = blocks;
    }
}

/// How a rank plans its passes: by the vLLM-like rules, or by the TensorRT-LLM-like ones, which
/// share the rest of this rank's bookkeeping (queue, blocks, transfers, tiers).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Planner {
    Vllm(PreemptionMode),
    Trtllm(CapacityScheduler),
}

/// The engine settings a rank reads, defaults filled in.
#[derive(Debug, Clone)]
pub(super) struct Limits {
    pub(super) block_size: u32,
    pub(super) num_gpu_blocks: u32,
    pub(super) max_num_seqs: u32,
    /// Token budget of one pass (TensorRT-LLM's max_num_tokens).
    pub(super) max_num_batched_tokens: u32,
    /// Chunked prefill (TensorRT-LLM's chunked context).
    pub(super) enable_chunked_prefill: bool,
    pub(super) planner: Planner,
    /// vLLM's async scheduling: a pass is formed while the pass before it runs.
    pub(super) async_scheduling: bool,
    /// vLLM 0.19: admit only a request whose whole prompt's blocks are free.
    pub(super) reserve_full_isl: bool,
}

impl Limits {
    /// Blocks holding `tokens` tokens.
    pub(super) fn blocks_for(&self, tokens: u64) -> u64 {
        tokens.div_ceil(u64::from(self.block_size))
    }

    /// Blocks to add so `held` blocks hold `tokens` tokens. Decodes cross a block boundary once
    /// per `block_size` tokens, so the division is skipped on the common path.
    pub(super) fn new_blocks(&self, tokens: u32, held: u32) -> u32 {
        if u64::from(tokens) <= u64::from(held) * u64::from(self.block_size) {
            0
        } else {
            self.blocks_for(u64::from(tokens)) as u32 - held
        }
    }

    /// `new_blocks(computed + 1, held)` for `held` blocks holding the `computed` tokens: 0 or
    /// 1, found without a branch.
    #[inline(always)]
    pub(super) fn one_more_token(&self, computed: u32, held: u32) -> u32 {
        let more =
            u32::from(u64::from(computed) + 1 > u64::from(held) * u64::from(self.block_size));
        debug_assert_eq!(more, self.new_blocks(computed + 1, held));
        more
    }
}

/// A waiting request's admission as planned: its cached prefix (`hit`, `cached` tokens), the
/// tokens it computes in the pass, and the new blocks for them.
#[derive(Debug, Clone, Copy)]
pub(super) struct Head {
    pub(super) hit: PrefixHit,
    pub(super) cached: u32,
    pub(super) tokens: u32,
    pub(super) need: u32,
}

/// The vLLM-like engine of one rank (the TensorRT-LLM-like flavour plans its passes over the
/// same bookkeeping).
#[derive(Debug, Clone)]
pub struct VllmScheduler {
    pub(super) role: Role,
    pub(super) config: Limits,
    pub(super) cache: RankCache,
    /// Prompt block identities of every request at this rank's block size.
    pub(super) ids: Arc<BlockIds>,
    pub(super) pricing: Pricing,
    pub(super) seqs: Vec<Seq>,
    pub(super) spare: Vec<u32>,
    pub(super) waiting: VecDeque<u32>,
    pub(super) running: Vec<u32>,
    pub(super) in_pass: Vec<u32>,
    /// Prefill role: requests whose prompt is done, holding their KV for the transfer.
    pub(super) handoffs: Vec<(u32, u32)>,
    /// Prefill role: handed-off requests whose blocks are not released yet.
    pub(super) held_for_transfer: u32,
    /// Decode role: requests holding reserved blocks while their KV arrives.
    pub(super) receiving: u32,
    /// Decode role, TensorRT-LLM's no-evict: blocks the receiving requests set aside for their
    /// completion beyond those they hold.
    pub(super) receiving_reserved: u64,
    /// Offload tiers: requests holding blocks while their prefix comes up from G2/G3.
    pub(super) onboarding: u32,
    /// Blocks the waiting requests will need for the tokens they still have to compute: the
    /// load a cache-aware router sees besides the active blocks.
    pub(super) waiting_blocks: u64,
    /// Scratch: the order running requests are planned in (TensorRT-LLM-like flavour).
    pub(super) order: Vec<u32>,
    pub(super) busy: bool,
    pub(super) passes: u64,
    pub(super) preemptions: u64,
    /// When this rank's last pass started and ended (ms): with async scheduling the pass
    /// after it was formed when it started.
    pub(super) last_pass: (f64, f64),
    /// Until when (ms, exclusive) nothing outside this rank can reach it, as the replay last
    /// told it for the pass in flight (minus infinity: not told).
    pub(super) quiet_until: f64,
    /// The pass `continue_plain` planned as the last one ended: when it starts (ms), its
    /// shape, and how many plain passes may follow it (`run_plain_decodes`' bound).
    pub(super) continued: Option<(f64, PassShape, u32)>,
}

impl VllmScheduler {
    /// An engine whose requests' prompt blocks are named by `ids` (at `config.block_size`),
    /// its cache one of `caches` block caches in its replay.
    pub fn new(
        role: Role,
        config: &EngineConfig,
        timer: StepTimer,
        ids: Arc<BlockIds>,
        caches: u32,
    ) -> Self {
        let block_size = config.block_size();
        let (num_gpu_blocks, max_num_seqs) = (config.num_gpu_blocks, config.max_num_seqs);
        let config = match config.backend {
            Backend::Trtllm => {
                let t = config.trtllm();
                Limits {
                    block_size,
                    num_gpu_blocks,
                    max_num_seqs,
                    max_num_batched_tokens: t.max_num_tokens,
                    enable_chunked_prefill: t.enable_chunked_context,
                    planner: Planner::Trtllm(t.capacity_scheduler),
                    async_scheduling: false,
                    reserve_full_isl: false,
                }
            }
            _ => {
                let v = config.vllm();
                Limits {
                    block_size,
                    num_gpu_blocks,
                    max_num_seqs,
                    max_num_batched_tokens: v.max_num_batched_tokens,
                    enable_chunked_prefill: v.enable_chunked_prefill,
                    planner: Planner::Vllm(v.preemption_mode),
                    async_scheduling: v.async_scheduling,
                    reserve_full_isl: v.scheduler_reserve_full_isl,
                }
            }
        };
        debug_assert_eq!(ids.block_size(), config.block_size);
        VllmScheduler {
            role,
            // A block is held at most once by each request that holds blocks (a prompt's
            // identities are distinct), and at most max_num_seqs of them do at once.
            cache: RankCache::new(
                config.num_gpu_blocks,
                ids.end(),
                config.max_num_seqs,
                caches,
            ),
            ids,
            config,
            pricing: Pricing::new(timer),
            seqs: Vec::new(),
            spare: Vec::new(),
            waiting: VecDeque::new(),
            running: Vec::new(),
            in_pass: Vec::new(),
            handoffs: Vec::new(),
            held_for_transfer: 0,
            receiving: 0,
            onboarding: 0,
            receiving_reserved: 0,
            waiting_blocks: 0,
            order: Vec::new(),
            busy: false,
            passes: 0,
            preemptions: 0,
            last_pass: (f64::NAN, f64::NAN),
            quiet_until: f64::NEG_INFINITY,
            continued: None,
        }
    }

    /// A sequence for request `i`.
    fn new_seq(&mut self, workload: &Workload, i: usize) -> u32 {
        let id = match self.spare.pop() {
            Some(id) => id,
            None => {
                self.seqs.push(Seq::default());
                (self.seqs.len() - 1) as u32
            }
        };
        let seq = &mut self.seqs[id as usize];
        seq.request = i as u32;
        seq.prompt = workload.input_length[i];
        seq.output = workload.output_length[i];
        seq.generated = 0;
        seq.computed = 0;
        seq.prefilling = true;
        seq.named = 0;
        seq.prompt_blocks = self.ids.of(i).len() as u32;
        seq.in_pass = false;
        seq.finished = false;
        seq.tier_checked = false;
        seq.last_token_ms = f64::NAN;
        seq.queued_ms = f64::NEG_INFINITY;
        id
    }

    fn free_seq(&mut self, id: u32) {
        let seq = &mut self.seqs[id as usize];
        self.cache.release(&seq.slots, seq.private);
        seq.slots.clear();
        seq.private = 0;
        self.spare.push(id);
    }

    /// Queue `id` at the back, or at the front (a preempted request goes first again).
    fn push_waiting(&mut self, id: u32, front: bool) {
        let target = self.seqs[id as usize].target();
        self.waiting_blocks += self.config.blocks_for(u64::from(target));
        if front {
            self.waiting.push_front(id);
        } else {
            self.waiting.push_back(id);
        }
    }

    /// Release running request `running[vi]` and send it back to the front of the queue to be
    /// recomputed.
    /// 0 when the blocks of a request's last token count toward what it must be able to hold
    /// (TensorRT-LLM's no-evict reservation: prompt plus maximum output), else 1 (the last
    /// token's KV is never written).
    fn last_token_kv(&self) -> u64 {
        u64::from(!self.no_evict())
    }

    /// Whether admissions set aside every request's blocks to completion (TensorRT-LLM's
    /// `guaranteed_no_evict`): then whatever else takes blocks must leave those free too.
    fn no_evict(&self) -> bool {
        self.config.planner == Planner::Trtllm(CapacityScheduler::GuaranteedNoEvict)
    }

    /// Whether a prompt must be computed in one pass, never more than the pass's budget
    /// (TensorRT-LLM without chunked context). vLLM without chunked prefill runs a longer prompt
    /// in a pass of its own instead.
    fn whole_contexts(&self) -> bool {
        matches!(self.config.planner, Planner::Trtllm(_)) && !self.config.enable_chunked_prefill
    }

    pub(super) fn preempt(&mut self, vi: usize, records: &mut Records) {
        let id = self.running.remove(vi);
        let seq = &mut self.seqs[id as usize];
        debug_assert!(!seq.in_pass, "victims are not scheduled in this pass yet");
        self.cache.release(&seq.slots, seq.private);
        seq.slots.clear();
        seq.private = 0;
        seq.named = 0;
        seq.computed = 0;
        seq.prefilling = true;
        seq.queued_ms = f64::NEG_INFINITY;
        records.preemptions[seq.request as usize] += 1;
        self.preemptions += 1;
        self.push_waiting(id, true);
    }

    /// Sequence slots taken toward `max_num_seqs`, the one count every admission checks:
    /// running requests, and those holding blocks while their KV arrives from a prefill worker
    /// or comes up from the offload tiers (each joins the running batch next).
    pub(super) fn seqs_in_use(&self) -> usize {
        self.running.len() + self.receiving as usize + self.onboarding as usize
    }

    /// Give `id` `n` tokens of this pass and `need` new blocks, naming its newly full prompt
    /// blocks so later requests can share them.
    pub(super) fn schedule(&mut self, id: u32, n: u32, need: u32) {
        if need > 0 {
            self.cache.allocate(need);
        }
        let bs = self.config.block_size;
        let seq = &mut self.seqs[id as usize];
        seq.private += need;
        seq.pass_tokens = n;
        seq.computed += n;
        seq.in_pass = true;
        seq.name_full_blocks(&mut self.cache, &self.ids, bs);
        self.in_pass.push(id);
    }

    /// Plan a pass by the vLLM-like rules: running requests spend the token budget first, in
    /// admission order, preempting on a block shortage; then waiting requests are admitted FIFO
    /// while slots, budget and blocks allow.
    /// Plan a vLLM pass at `now`, formed at `formed` (ms): requests that reached the rank
    /// after `formed` wait for a later pass.
    fn plan_vllm(&mut self, mode: PreemptionMode, now: f64, formed: f64, records: &mut Records) {
        let mut budget = self.config.max_num_batched_tokens;
        let mut preempted = false;
        let mut i = 0;
        while i < self.running.len() && budget > 0 {
            let id = self.running[i];
            let seq = &self.seqs[id as usize];
            if seq.queued_ms > formed {
                i += 1;
                continue;
            }
            let n = (seq.target() - seq.computed).min(budget);
            let need = self.config.new_blocks(seq.computed + n, seq.held());
            let mut preempted_self = false;
            while self.cache.counts().available() < need {
                // Victims are admitted after the request that needs the block (later in
                // `running`), else it yields itself: the oldest running request is never
                // preempted for a younger one, so it always progresses. (Preempting the oldest
                // outright livelocks under recompute: found by a property test.)
                let vi = match mode {
                    PreemptionMode::Lifo => self.running.len() - 1,
                    PreemptionMode::Fifo => (i + 1).min(self.running.len() - 1),
                };
                let victim = self.running[vi];
                self.preempt(vi, records);
                preempted = true;
                if victim == id {
                    preempted_self = true;
                    break;
                }
            }
            if preempted_self {
                // vLLM stops scheduling running requests here; Dynamo's mocker goes on with the
                // next one, and so does this.
                continue;
            }
            self.schedule(id, n, need);
            budget -= n;
            i += 1;
        }
        // vLLM admits no waiting request in a step that preempted (nor does Dynamo's mocker):
        // the victims would only be admitted again.
        while let Some(&id) = self.waiting.front().filter(|_| !preempted) {
            if self.seqs_in_use() >= self.config.max_num_seqs as usize
                || budget == 0
                || self.seqs[id as usize].queued_ms > formed
            {
                break;
            }
            let Some(head) = self.head_chunk(id, budget) else {
                break;
            };
            // vLLM 0.19 admits a request only if its whole prompt's blocks are free.
            let need = match self.config.reserve_full_isl {
                true => self
                    .config
                    .new_blocks(self.seqs[id as usize].target(), head.hit.blocks),
                false => head.need,
            };
            if self.cache.counts().available() < head.hit.inactive + need {
                break;
            }
            self.admit(id, head, now, records);
            budget = budget.saturating_sub(head.tokens);
        }
    }

    /// What admitting waiting request `id` would take with `budget` tokens left in the pass: its
    /// cached prefix, the tokens it computes (the rest of its prompt, or a chunk of it), and the
    /// new blocks for them; `None` when the pass has no room for it (an unchunked prompt larger
    /// than the budget runs alone, rather than never).
    pub(super) fn head_chunk(&self, id: u32, budget: u32) -> Option<Head> {
        let target = self.seqs[id as usize].target();
        let hit = self.cache.lookup(self.reusable_ids(id));
        let cached = hit.blocks * self.config.block_size;
        let remaining = target - cached;
        let tokens = if remaining <= budget {
            remaining
        } else if self.config.enable_chunked_prefill {
            budget
        } else if self.in_pass.is_empty() {
            remaining
        } else {
            return None;
        };
        let need = self.config.new_blocks(cached + tokens, hit.blocks);
        Some(Head {
            hit,
            cached,
            tokens,
            need,
        })
    }

    /// Admit waiting request `id` (the queue's head) at `now` as `head` describes: take its
    /// cached prefix and schedule its first tokens in this pass.
    pub(super) fn admit(&mut self, id: u32, head: Head, now: f64, records: &mut Records) {
        let popped = self.waiting.pop_front();
        debug_assert_eq!(popped, Some(id));
        let target = self.seqs[id as usize].target();
        self.waiting_blocks -= self.config.blocks_for(u64::from(target));
        let seq = &mut self.seqs[id as usize];
        let prefix = &self.ids.of(seq.request as usize)[..head.hit.blocks as usize];
        self.cache.acquire_all(prefix, &mut seq.slots);
        seq.named = head.hit.blocks;
        seq.computed = head.cached;
        records.admit(seq.request as usize, now, head.cached);
        self.schedule(id, head.tokens, head.need);
        self.running.push(id);
    }

    /// The shape of the pass planned in `in_pass`.
    fn pass_shape(&self) -> PassShape {
        PassShape::of(self.in_pass.iter().map(|&id| {
            let seq = &self.seqs[id as usize];
            (seq.prefilling, seq.pass_tokens, seq.computed)
        }))
    }

    /// Start the pass planned in `in_pass` at `now`: its shape, or `None` when it is empty.
    fn launch(&mut self, now: f64) -> Option<PassShape> {
        if self.in_pass.is_empty() {
            return None;
        }
        self.busy = true;
        self.passes += 1;
        self.last_pass = (now, f64::NAN);
        self.quiet_until = f64::NEG_INFINITY;
        Some(self.pass_shape())
    }

    /// End the plain decode pass in flight at `now` and plan the next one at once, as
    /// `finish_pass` then `plan_vllm` would: every request in the pass (all those running, none
    /// waiting) emits a token that is neither its second nor its last and takes one more token
    /// in the next pass, the blocks they need being free or evictable. Taken only while
    /// nothing outside this rank can reach it (`quiet_until`): then nothing else happens to it
    /// between the pass end and the next pass's planning at this instant, and two sweeps over
    /// the requests (a check, then the changes) do what four did: end the pass, plan the next,
    /// shape it, and check it for chaining. Returns false, having changed nothing, when the
    /// pass is not such a pass.
    fn continue_plain(&mut self, now: f64, records: &mut Records) -> bool {
        let budget = self.config.max_num_batched_tokens as usize;
        if now >= self.quiet_until
            || !matches!(self.config.planner, Planner::Vllm(_))
            || self.role == Role::Prefill
            || !self.waiting.is_empty()
            || self.in_pass.len() != self.running.len()
            || self.in_pass.len() > budget
            || self.cache.counts().records_evictions()
        {
            return false;
        }
        debug_assert_eq!(
            self.in_pass, self.running,
            "a full pass plans in running order"
        );
        // The pass after this one is formed now, or, with async scheduling, when this one
        // started (as `start_pass` has it).
        let formed = match self.config.async_scheduling {
            true => self.last_pass.0,
            false => now,
        };
        let bs = self.config.block_size;
        // The checks are or-ed without short cuts, and a request's new block counted without a
        // branch: which request reaches a block boundary is no pattern a branch predictor
        // learns.
        let (mut unfit, mut need) = (false, 0);
        for &id in &self.in_pass {
            let seq = &self.seqs[id as usize];
            unfit |= seq.prefilling
                | (seq.pass_tokens != 1)
                | (seq.generated < 2)
                | (seq.generated + 1 >= seq.output)
                | (seq.queued_ms > formed)
                | (seq.named != seq.prompt_blocks);
            need += self.config.one_more_token(seq.computed, seq.held());
        }
        // Blocks taken one request after another: all fit exactly when their sum does, and
        // none preempts.
        if unfit || need > self.cache.counts().available() {
            return false;
        }
        let mut plain = u32::MAX;
        let limits = &self.config;
        let mut gaps = PendingRun::default();
        for &id in &self.in_pass {
            let seq = &mut self.seqs[id as usize];
            // This pass's token (`finish_pass`).
            seq.generated += 1;
            records.itl.push_via(&mut gaps, now - seq.last_token_ms);
            seq.last_token_ms = now;
            // The next pass's token (`plan_vllm`, `schedule`); the request stays in the pass.
            debug_assert_eq!(seq.computed, seq.target() - 1);
            seq.private += limits.one_more_token(seq.computed, seq.held());
            seq.computed += 1;
            plain = plain.min(seq.plain_passes(bs));
        }
        records.itl.flush(gaps);
        // Evicting for all at once evicts what evicting for each in turn would, in order.
        if need > 0 {
            self.cache.allocate(need);
        }
        self.last_pass = (now, f64::NAN);
        self.passes += 1;
        self.quiet_until = f64::NEG_INFINITY;
        self.continued = Some((now, self.pass_shape(), plain));
        #[cfg(debug_assertions)]
        check_invariants(self);
        true
    }
}

impl Engine for VllmScheduler {
    /// Why a request of `prompt` and `output` tokens can never be served by this worker, if it
    /// cannot: its prompt plus one token, or (unless it only prefills here) everything it must
    /// hold at its last token, exceeds the whole cache; or its prompt must be computed in one
    /// pass and exceeds the pass's token budget.
    fn never_fits(&self, prompt: u32, output: u32) -> Option<RejectReason> {
        let capacity = u64::from(self.config.num_gpu_blocks);
        let prompt = u64::from(prompt);
        if self.config.blocks_for(prompt + 1) > capacity {
            Some(RejectReason::PromptExceedsCache)
        } else if self.role != Role::Prefill
            && self
                .config
                .blocks_for(prompt + u64::from(output) - self.last_token_kv())
                > capacity
        {
            Some(RejectReason::OutputExceedsCache)
        } else if self.whole_contexts()
            && self.role != Role::Decode
            && prompt > u64::from(self.config.max_num_batched_tokens)
        {
            Some(RejectReason::PromptExceedsPassBudget)
        } else {
            None
        }
    }

    /// Queue request `i` (it has passed `never_fits`).
    fn enqueue(&mut self, workload: &Workload, i: usize, now: f64) {
        let id = self.new_seq(workload, i);
        self.seqs[id as usize].queued_ms = now;
        self.push_waiting(id, false);
    }

    /// Prefill role: the requests whose prompt finished since the last call, as
    /// (request, handle); each holds its KV until `release_handoff(handle)`.
    fn take_handoffs(&mut self) -> std::vec::Drain<'_, (u32, u32)> {
        self.handoffs.drain(..)
    }

    /// Prefill role: the transfer of a handed-off request is done; free its blocks (they stay
    /// cached for later prompts with the same prefix).
    fn release_handoff(&mut self, handle: u32) {
        self.held_for_transfer -= 1;
        self.free_seq(handle);
    }

    /// Whether blocks are tied to flows still under way: KV transfers (outgoing on a prefill
    /// rank, incoming on a decode rank) or onboarding from the offload tiers. They come free, or
    /// their requests can run, when those flows end.
    fn awaits_transfers(&self) -> bool {
        self.held_for_transfer > 0 || self.receiving > 0 || self.onboarding > 0
    }

    /// Offload tiers: whether requests hold blocks while their prefix comes up from G2/G3.
    fn is_onboarding(&self) -> bool {
        self.onboarding > 0
    }

    /// Offload tiers: keep the identities of blocks this rank's cache evicts.
    fn record_evictions(&mut self) {
        self.cache.counts_mut().record_evictions();
    }

    /// Offload tiers: move the identities of blocks evicted since the last call (least recent
    /// first) to the end of `out`.
    fn drain_evicted_into(&mut self, out: &mut Vec<BlockId>) {
        self.cache.counts_mut().drain_evicted_into(out);
    }

    /// The workload row of request `handle`.
    fn request_of(&self, handle: u32) -> usize {
        self.seqs[handle as usize].request as usize
    }

    /// The prompt block identities of every request at this rank's block size.
    fn block_ids(&self) -> &BlockIds {
        &self.ids
    }

    fn reusable_ids(&self, handle: u32) -> &[BlockId] {
        let seq = &self.seqs[handle as usize];
        let ids = self.ids.of(seq.request as usize);
        reusable_ids(ids, seq.target(), self.config.block_size)
    }

    /// Offload tiers: the waiting requests, in queue order, that the next pass could admit (up
    /// to one token budget of work, the one crossing it included, and `max_num_seqs`) and that
    /// were never looked up in G2/G3. Each is marked looked up.
    fn take_unchecked_heads(&mut self, out: &mut Vec<u32>) {
        out.clear();
        let budget = u64::from(self.config.max_num_batched_tokens);
        let room = (self.config.max_num_seqs as usize).saturating_sub(self.seqs_in_use());
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

    /// Offload tiers: take waiting request `handle` out of the queue to onboard its blocks.
    fn unqueue(&mut self, handle: u32) {
        let at = self.waiting.iter().position(|&id| id == handle);
        let at = at.expect("unqueue takes a waiting request");
        self.waiting.remove(at);
        let target = self.seqs[handle as usize].target();
        self.waiting_blocks -= self.config.blocks_for(u64::from(target));
    }

    /// Offload tiers: hold, for prepared request `handle`, its G1 prefix hit `hit` and `blocks`
    /// private blocks for the following prompt blocks that come up from G2/G3 (as
    /// `reserve_remote` does). Returns false, holding nothing, when G1 cannot hold them now
    /// (under TensorRT-LLM's no-evict, without the blocks running requests set aside): the
    /// request is then looked up again before a later pass.
    fn hold_for_onboard(&mut self, handle: u32, hit: PrefixHit, blocks: u32) -> bool {
        let need = hit.inactive + blocks;
        if self.cache.counts().available() < need
            || (self.no_evict() && u64::from(need) > self.unreserved_blocks())
        {
            self.seqs[handle as usize].tier_checked = false;
            return false;
        }
        let seq = &mut self.seqs[handle as usize];
        seq.hold(
            &mut self.cache,
            self.ids.of(seq.request as usize),
            hit,
            blocks,
        );
        self.onboarding += 1;
        true
    }

    /// Offload tiers: the blocks of held request `handle` are in G1. Name them, release the
    /// hold (they stay cached, most recent) and queue the request first: it is admitted with
    /// them as prefix hits.
    fn finish_onboard(&mut self, handle: u32) {
        self.onboarding -= 1;
        let seq = &mut self.seqs[handle as usize];
        let end = seq.named + seq.private;
        seq.name_blocks_until(&mut self.cache, self.ids.of(seq.request as usize), end);
        self.cache.release(&seq.slots, seq.private);
        seq.slots.clear();
        seq.private = 0;
        seq.named = 0;
        self.push_waiting(handle, true);
    }

    /// Decode role: reserve blocks for request `i`'s prompt KV arriving from a prefill worker.
    /// Returns (handle, prompt tokens this worker already caches), or `None` when there is no
    /// room yet (no sequence slot or too few free blocks).
    fn reserve_remote(&mut self, workload: &Workload, i: usize) -> Option<(u32, u32)> {
        if self.seqs_in_use() >= self.config.max_num_seqs as usize {
            return None;
        }
        let ids = self.ids.of(i);
        let hit = self.cache.lookup(ids);
        let need = self.config.new_blocks(workload.input_length[i], hit.blocks);
        if self.cache.counts().available() < hit.inactive + need {
            return None;
        }
        let no_evict = self.no_evict();
        let (prompt, output) = (workload.input_length[i], workload.output_length[i]);
        if no_evict && !self.fits_to_completion(prompt, output, hit.blocks, hit.inactive) {
            return None;
        }
        let id = self.new_seq(workload, i);
        let seq = &mut self.seqs[id as usize];
        seq.hold(&mut self.cache, self.ids.of(i), hit, need);
        self.receiving += 1;
        if no_evict {
            self.receiving_reserved += self.blocks_to_completion(id);
        }
        Some((id, hit.blocks * self.config.block_size))
    }

    /// Decode role: the KV of reserved request `handle` has arrived at `now` and it joins the
    /// running batch. With `first_token_now` its first token counts from now (it finishes at
    /// once if it wanted one token); otherwise its next pass emits the first token.
    fn activate_remote(
        &mut self,
        handle: u32,
        now: f64,
        first_token_now: bool,
        records: &mut Records,
    ) {
        self.receiving -= 1;
        if self.no_evict() {
            self.receiving_reserved -= self.blocks_to_completion(handle);
        }
        let bs = self.config.block_size;
        let seq = &mut self.seqs[handle as usize];
        seq.computed = seq.prompt;
        seq.prefilling = false;
        seq.queued_ms = now;
        seq.name_full_blocks(&mut self.cache, &self.ids, bs);
        if !first_token_now {
            // A zero-token step on the next pass emits the first token (generated stays 0).
            self.running.push(handle);
            return;
        }
        seq.generated = 1;
        seq.last_token_ms = now;
        let r = seq.request as usize;
        records.first_token_ms[r] = now;
        if seq.output == 1 {
            records.complete(r, now);
            self.free_seq(handle);
        } else {
            self.running.push(handle);
        }
    }

    /// Waiting requests, those holding blocks while their KV arrives or comes up from the
    /// tiers, and the running ones (prefilling or decoding).
    fn load(&self) -> Load {
        Load {
            waiting: (self.waiting.len() + (self.receiving + self.onboarding) as usize) as u64,
            running: self.running.len() as u64,
        }
    }

    /// In blocks. An unchunked prompt larger than the budget runs alone rather than never.
    #[cfg(debug_assertions)]
    fn audit(&self) -> Audit {
        let alone = self.in_pass.len() == 1 && !self.config.enable_chunked_prefill;
        let cache = &self.cache;
        let references = cache.refcounts();
        let mut holders = vec![0u32; references.len()];
        let mut private = 0u64;
        for q in &self.seqs {
            for &slot in &q.slots {
                holders[slot as usize] += 1;
            }
            private += u64::from(q.private);
        }
        let named = holders.iter().filter(|&&n| n > 0).count() as u64;
        Audit {
            seats: self.seqs_in_use(),
            max_seats: self.config.max_num_seqs as usize,
            pass_tokens: self
                .in_pass
                .iter()
                .map(|&id| self.seqs[id as usize].pass_tokens)
                .collect(),
            pass_budget: (!alone).then_some(u64::from(self.config.max_num_batched_tokens)),
            memory: u64::from(cache.counts().active() + cache.counts().inactive()),
            capacity: u64::from(cache.counts().capacity()),
            references,
            holders,
            held: u64::from(cache.counts().active()),
            held_by_requests: named + private,
        }
    }

    /// Blocks the queue will need: waiting requests' prompts (and recomputed tokens).
    fn waiting_blocks(&self) -> u64 {
        self.waiting_blocks
    }

    /// Tokens per KV block of this rank.
    fn block_size(&self) -> u32 {
        self.config.block_size
    }

    fn is_busy(&self) -> bool {
        self.busy
    }

    fn has_work(&self) -> bool {
        !self.waiting.is_empty() || !self.running.is_empty()
    }

    fn waiting_len(&self) -> usize {
        self.waiting.len()
    }

    fn running_len(&self) -> usize {
        self.running.len()
    }

    fn prefix_hit(&self, _request: usize, ids: &[BlockId]) -> PrefixHit {
        self.cache.lookup(ids)
    }

    fn active_blocks(&self) -> u32 {
        self.cache.counts().active()
    }

    fn evictions(&self) -> u64 {
        self.cache.counts().evictions()
    }

    fn passes(&self) -> u64 {
        self.passes
    }

    fn preemptions(&self) -> u64 {
        self.preemptions
    }

    fn pricing(&self) -> &Pricing {
        &self.pricing
    }

    fn pricing_mut(&mut self) -> &mut Pricing {
        &mut self.pricing
    }

    /// Plan the next pass at `now`: running requests spend the token budget first, then waiting
    /// requests are admitted FIFO while slots, budget and blocks allow. Returns the pass's
    /// shape, or `None` when nothing could be scheduled.
    fn start_pass(&mut self, now: f64, records: &mut Records) -> Option<PassShape> {
        if let Some((at, shape, _)) = self.continued {
            // Planned as the last pass ended, at this instant.
            debug_assert_eq!(at, now);
            return Some(shape);
        }
        debug_assert!(!self.busy && self.in_pass.is_empty());
        match self.config.planner {
            Planner::Vllm(mode) => {
                // With async scheduling, a pass following the last one straight away was formed
                // when that one started. A pass formed then with nothing in it was never
                // launched: vLLM forms one now, with what has arrived since.
                let (start, end) = self.last_pass;
                let formed = match self.config.async_scheduling && end == now {
                    true => start,
                    false => now,
                };
                self.plan_vllm(mode, now, formed, records);
                if self.in_pass.is_empty() && formed < now {
                    self.plan_vllm(mode, now, now, records);
                }
            }
            Planner::Trtllm(capacity) => self.plan_trtllm(capacity, now, records),
        }
        let shape = self.launch(now);
        #[cfg(debug_assertions)]
        check_invariants(self);
        shape
    }

    /// Chain plain decode passes without the event loop; returns the end (ms) of the pass
    /// left in flight and how many passes ended here.
    ///
    /// The pass in flight was planned at `start` and ends at `end`. A pass is plain when
    /// nothing waits and every running request decodes one token in it, a token after its
    /// second and before its last, and the next token needs no new block: its end then only
    /// emits tokens, and the next pass has the same requests with one more KV token each. Such
    /// passes end and start here, in the order the event loop would run them, while they end
    /// before `horizon` (ms), the next instant anything outside this rank can reach it. Nothing
    /// the rest of the simulator observes changes (queue, running set, cache, finished
    /// requests), so only the virtual clock, the tokens and the inter-token latencies move.
    fn run_plain_decodes(
        &mut self,
        start: f64,
        end: f64,
        horizon: f64,
        records: &mut Records,
    ) -> (f64, u64) {
        let n = self.in_pass.len();
        let continued = self.continued.take();
        // Every running request in the pass (so the token budget fits them all), none waiting.
        if self.role == Role::Prefill
            || !self.waiting.is_empty()
            || n != self.running.len()
            || end >= horizon
        {
            return (end, 0);
        }
        let (shape, plain) = match continued {
            // `continue_plain` planned this pass and checked it as below.
            Some((at, shape, plain)) if at == start => (shape, plain),
            _ => {
                let bs = self.config.block_size;
                // Passes whose ends are plain for every request.
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
                    plain = plain.min(seq.plain_passes(bs));
                }
                (self.pass_shape(), plain)
            }
        };
        let (prev, end, passes) = chain_decode_passes(
            &self.pricing.timer,
            self.pricing.log.as_deref_mut(),
            shape,
            (start, end, horizon),
            plain,
            records,
        );
        if passes > 0 {
            for &id in &self.in_pass {
                let seq = &mut self.seqs[id as usize];
                seq.generated += passes;
                seq.computed += passes;
                seq.last_token_ms = prev;
            }
            self.passes += u64::from(passes);
        }
        (end, u64::from(passes))
    }

    fn quiet_until(&mut self, horizon_ms: f64) {
        self.quiet_until = horizon_ms;
    }

    /// End the pass at `now`: every request whose KV caught up emits a token; finished ones
    /// release their blocks. On a prefill worker a request leaves once its prompt is done,
    /// keeping its KV for the transfer (see `take_handoffs`).
    fn finish_pass(&mut self, now: f64, records: &mut Records) {
        if self.continue_plain(now, records) {
            return;
        }
        self.continued = None;
        self.busy = false;
        self.last_pass.1 = now;
        let mut any_left = false;
        let pass_start = self.pricing.pass_start_ms();
        // Read once, not per request: the stores to a request could alias them otherwise.
        let prefill_role = self.role == Role::Prefill;
        let seqs = &mut self.seqs[..];
        let mut gaps = PendingRun::default();
        for &id in &self.in_pass {
            let seq = &mut seqs[id as usize];
            seq.in_pass = false;
            let prompt_done = seq.computed == seq.target();
            if let (Some(start), true) = (pass_start, seq.prefilling) {
                records.prefill_pass(seq.request as usize, start, now, prompt_done);
            }
            if !prompt_done {
                continue; // a chunk of a longer prefill
            }
            seq.prefilling = false;
            seq.generated += 1;
            let r = seq.request as usize;
            if prefill_role {
                // The first token counts once the KV reaches the decode worker.
                self.handoffs.push((seq.request, id));
                self.held_for_transfer += 1;
                seq.finished = true;
                any_left = true;
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
                self.cache.release(&seq.slots, seq.private);
                seq.slots.clear();
                seq.private = 0;
                seq.finished = true;
                self.spare.push(id);
                any_left = true;
            }
        }
        records.itl.flush(gaps);
        self.in_pass.clear();
        if any_left {
            self.running.retain(|&id| !seqs[id as usize].finished);
        }
        #[cfg(debug_assertions)]
        check_invariants(self);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::SimConfig;

    /// Two 8-token requests on a rank of 4-token blocks, both admitted in one pass.
    fn two_running() -> VllmScheduler {
        let (arrival, input, output) = ([0.0, 0.0], [8u32, 8], [4u32, 4]);
        let (offsets, hashes) = ([0u64, 2, 4], [1u64, 2, 3, 4]);
        let workload = Workload {
            arrival_ms: &arrival,
            input_length: &input,
            output_length: &output,
            hash_offsets: &offsets,
            hash_ids: &hashes,
            trace_block_size: 4,
            session: None,
            delay_ms: None,
        };
        let config = SimConfig::from_json(
            r#"{"engine": {"block_size": 4, "num_gpu_blocks": 16},
                "timing": {"model": "fixed", "prefill_ms": 10, "decode_ms": 1}}"#,
        )
        .unwrap();
        let ids = Arc::new(BlockIds::new(&workload, 4, 0).unwrap());
        let timer = StepTimer::new(config.timing.clone(), 64);
        let mut rank = VllmScheduler::new(Role::Aggregated, &config.engine, timer, ids, 1);
        let mut records = Records::new(vec![0.0; 2], &input, &output);
        rank.enqueue(&workload, 0, 0.0);
        rank.enqueue(&workload, 1, 0.0);
        assert!(rank.start_pass(0.0, &mut records).is_some());
        rank
    }

    #[test]
    fn consistent_block_accounting_passes_the_check() {
        check_invariants(&two_running());
    }

    #[test]
    #[should_panic(expected = "requests hold it")]
    fn a_slot_held_by_the_wrong_request_is_caught() {
        let mut rank = two_running();
        // Request 0 claims request 1's first block instead of its own: the references still
        // add up (4 slots held, 4 references), but two slots are now miscounted.
        let other = rank.seqs[1].slots[0];
        rank.seqs[0].slots[0] = other;
        check_invariants(&rank);
    }
}
