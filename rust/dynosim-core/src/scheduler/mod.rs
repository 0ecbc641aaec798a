//! One rank's engine (a worker has one per data-parallel rank), in the flavour of the serving
//! engine it models (`engine.backend`): what every flavour offers the replay loop (`Engine`),
//! and the flavours themselves, one per file.

pub mod sglang;
mod trtllm;
pub mod vllm;

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::block_ids::{BlockId, BlockIds, TraceChains};
use crate::config::{Backend, EngineConfig, Role};
use crate::error::{Result, SimError};
use crate::explain::{KindSummary, RankLog};
use crate::kv::PrefixHit;
use crate::report::{Records, RejectReason};
use crate::timing::{DecodePrice, Lockstep, PassShape, StepTimer};
use crate::workload::Workload;

pub use sglang::SglangScheduler;
pub use vllm::VllmScheduler;

/// What the replay loop asks of one rank's engine, whatever its flavour. Requests are rows of
/// the workload; a handle names a request inside the engine (for transfers and onboarding).
pub trait Engine {
    /// Why a request of `prompt` and `output` tokens can never be served by this rank, if so.
    fn never_fits(&self, prompt: u32, output: u32) -> Option<RejectReason>;
    /// Queue request `i` at `now` (it has passed `never_fits`).
    fn enqueue(&mut self, workload: &Workload, i: usize, now: f64);
    /// Plan the next pass at `now` and start it: its shape, or `None` when nothing could run.
    fn start_pass(&mut self, now: f64, records: &mut Records) -> Option<PassShape>;
    /// End the pass at `now`: emit tokens, finish requests, free their memory.
    fn finish_pass(&mut self, now: f64, records: &mut Records);
    /// Chain plain decode passes without the event loop (see the vLLM flavour); returns the end
    /// (ms) of the pass left in flight and how many passes ended here. A flavour without the
    /// shortcut returns `(end, 0)`. Chained passes must leave what the time series read (queue,
    /// running requests, blocks in use) unchanged: the loop does not see them.
    fn run_plain_decodes(
        &mut self,
        start: f64,
        end: f64,
        horizon: f64,
        records: &mut Records,
    ) -> (f64, u64);
    /// Nothing outside this rank can reach it before `horizon_ms` (the chaining horizon of the
    /// pass in flight): the vLLM flavour may then plan its next pass as this one ends
    /// (`continue_plain`). A flavour without the shortcut ignores it.
    fn quiet_until(&mut self, _horizon_ms: f64) {}

    /// Prefill role: requests whose prompt finished since the last call, as (request, handle).
    fn take_handoffs(&mut self) -> std::vec::Drain<'_, (u32, u32)>;
    /// Prefill role: the transfer of handed-off request `handle` is done; free its memory.
    fn release_handoff(&mut self, handle: u32);
    /// Decode role: reserve room for request `i`'s prompt KV arriving from a prefill worker:
    /// (handle, prompt tokens already cached here), or `None` when there is no room yet.
    fn reserve_remote(&mut self, workload: &Workload, i: usize) -> Option<(u32, u32)>;
    /// Decode role: the KV of reserved request `handle` arrived at `now`; it joins the batch.
    fn activate_remote(&mut self, handle: u32, now: f64, first_token_now: bool, r: &mut Records);
    /// Whether memory is tied to flows still under way (KV transfers, onboarding).
    fn awaits_transfers(&self) -> bool;

    /// Offload tiers: whether requests hold memory while their prefix comes up from G2/G3.
    fn is_onboarding(&self) -> bool;
    /// Offload tiers: keep the identities of blocks this rank's cache evicts.
    fn record_evictions(&mut self);
    /// Offload tiers: move the identities evicted since the last call to the end of `out`.
    fn drain_evicted_into(&mut self, out: &mut Vec<BlockId>);
    /// Offload tiers: waiting requests the next pass could admit, not looked up in G2/G3 yet
    /// (or whose hit found no room to be held); each is marked looked up.
    fn take_unchecked_heads(&mut self, out: &mut Vec<u32>);
    /// Offload tiers: take waiting request `handle` out of the queue to onboard its blocks.
    fn unqueue(&mut self, handle: u32);
    /// Offload tiers: hold room for `handle`'s G1 prefix `hit` and `blocks` onboarded blocks;
    /// false, holding nothing, when there is no room now (the request stays waiting and is
    /// among the unchecked heads again before a later pass).
    fn hold_for_onboard(&mut self, handle: u32, hit: PrefixHit, blocks: u32) -> bool;
    /// Offload tiers: the onboarded blocks of `handle` are in G1; queue it first.
    fn finish_onboard(&mut self, handle: u32);

    /// The workload row of request `handle`.
    fn request_of(&self, handle: u32) -> usize;
    /// The prompt block identities of every request at this rank's block size.
    fn block_ids(&self) -> &BlockIds;
    /// The identities of the full prompt blocks of waiting request `handle` that a pass may
    /// take from a cache (G1 or the offload tiers) instead of computing them (`reusable_ids`).
    fn reusable_ids(&self, handle: u32) -> &[BlockId];
    /// The cached prefix, in full blocks, of workload row `request`'s prompt blocks `ids` (all
    /// of them, or a leading part) in this rank's G1: a block cache looks the identities up, a
    /// radix cache the row's tokens.
    fn prefix_hit(&self, request: usize, ids: &[BlockId]) -> PrefixHit;
    /// Blocks held by running requests (the load a cache-aware router sees).
    fn active_blocks(&self) -> u32;
    /// Blocks the waiting requests will need.
    fn waiting_blocks(&self) -> u64;
    /// Cached blocks evicted so far.
    fn evictions(&self) -> u64;
    /// The requests the rank holds, as a data-parallel balancer counts them
    /// (`Scheduler::load_score`).
    fn load(&self) -> Load;
    /// What the debug checks read (`check_invariants`).
    #[cfg(debug_assertions)]
    fn audit(&self) -> Audit;
    /// Tokens per KV block of this rank.
    fn block_size(&self) -> u32;
    fn is_busy(&self) -> bool;
    fn has_work(&self) -> bool;
    fn waiting_len(&self) -> usize;
    fn running_len(&self) -> usize;
    fn passes(&self) -> u64;
    fn preemptions(&self) -> u64;

    /// How this rank prices its passes.
    fn pricing(&self) -> &Pricing;
    fn pricing_mut(&mut self) -> &mut Pricing;

    /// The step-time model pricing this rank's passes.
    fn timer(&self) -> &StepTimer {
        &self.pricing().timer
    }

    /// The duration (ms) of the pass `start_pass` started at `now` with `shape`, its worker's
    /// data-parallel ranks passing in `lockstep` (`None`: a worker of one rank).
    fn price_pass(&mut self, shape: &PassShape, lockstep: Option<&Lockstep>, now: f64) -> f64 {
        let p = self.pricing_mut();
        priced(&p.timer, p.log.as_deref_mut(), shape, lockstep, now)
    }

    /// Keep a log of this rank's passes (an explained replay).
    fn explain(&mut self) {
        let p = self.pricing_mut();
        p.log = Some(Box::new(RankLog::new(&p.timer)));
    }

    /// An explained replay: this rank's passes by kind.
    fn explained(&self) -> Option<BTreeMap<&'static str, KindSummary>> {
        let p = self.pricing();
        p.log.as_ref().map(|log| log.summarise(&p.timer))
    }
}

/// How a rank prices its passes: its step-time model, and the log of its passes an explained
/// replay keeps.
#[derive(Debug, Clone)]
pub struct Pricing {
    pub timer: StepTimer,
    pub log: Option<Box<RankLog>>,
}

impl Pricing {
    pub fn new(timer: StepTimer) -> Self {
        Pricing { timer, log: None }
    }

    /// When the pass in flight started (ms), in an explained replay.
    pub fn pass_start_ms(&self) -> Option<f64> {
        self.log.as_ref().map(|log| log.pass_start_ms)
    }
}

/// The requests a rank holds, as a data-parallel balancer counts them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Load {
    /// Waiting to be admitted, or holding memory while their KV arrives from a prefill rank
    /// or comes up from the offload tiers (vLLM keeps both in its waiting queues).
    pub waiting: u64,
    /// Admitted: computing their prompt or decoding.
    pub running: u64,
}

/// What a rank's debug checks read, whatever its flavour, in the units of its memory (blocks
/// of a block cache, tokens of a radix cache).
#[cfg(debug_assertions)]
pub struct Audit {
    /// Sequence slots taken (requests admitted, and those holding memory while their KV
    /// arrives or comes up from the tiers) and `max_num_seqs`.
    pub seats: usize,
    pub max_seats: usize,
    /// Tokens each request computes in the pass in flight, and the most one pass may compute
    /// (`None`: no limit, as for an unchunked prompt larger than the budget, which runs alone).
    pub pass_tokens: Vec<u32>,
    pub pass_budget: Option<u64>,
    /// Memory in use (held or cached) and the rank's capacity.
    pub memory: u64,
    pub capacity: u64,
    /// Per shared unit of memory (a cached block's slot, a radix tree node): the references
    /// the cache counts, and the requests whose holdings reach it.
    pub references: Vec<u32>,
    pub holders: Vec<u32>,
    /// Memory the rank counts as held by requests, and what the requests' own holdings add up
    /// to.
    pub held: u64,
    pub held_by_requests: u64,
}

/// The limits every rank keeps, whatever its flavour, checked in debug builds when a pass is
/// planned and when it ends: sequence slots, the token budget of a pass, the memory's capacity,
/// reference counts (a cached block's, a tree node's locks) equal to the requests holding it,
/// and memory held adding up to the requests' holdings.
#[cfg(debug_assertions)]
pub(super) fn check_invariants(engine: &dyn Engine) {
    let a = engine.audit();
    assert!(
        a.seats <= a.max_seats,
        "{} sequence slots taken, more than max_num_seqs {}",
        a.seats,
        a.max_seats
    );
    let tokens: u64 = a.pass_tokens.iter().map(|&n| u64::from(n)).sum();
    if let Some(budget) = a.pass_budget {
        assert!(
            tokens <= budget,
            "{tokens} tokens scheduled over a budget of {budget}"
        );
    }
    assert!(
        a.memory <= a.capacity,
        "{} of memory in use, more than the capacity {}",
        a.memory,
        a.capacity
    );
    if let Some(k) = (0..a.references.len()).find(|&k| a.references[k] != a.holders[k]) {
        panic!(
            "memory unit {k}: {} references in the cache, {} requests hold it",
            a.references[k], a.holders[k]
        );
    }
    assert_eq!(
        a.held, a.held_by_requests,
        "memory held differs from the requests' holdings"
    );
}

/// The leading tokens of a request that must hold `target` tokens of KV before its next token
/// (its prompt, and after a preemption the tokens it emitted) that a pass may take from a cache
/// instead of computing them: all but the last, so the pass computes at least one token and has
/// logits to sample the next one from. A fully cached prompt still runs a prefill of its last
/// token (of its last block, where the cache reuses whole blocks), as vLLM caps a prefix-cache
/// hit at `num_tokens - 1`, TensorRT-LLM matches reusable blocks over all prompt tokens but the
/// last, and SGLang matches its radix tree over `input_len - 1` tokens.
pub(super) fn reusable_tokens(target: u32) -> u32 {
    debug_assert!(target > 0, "a request needs at least one token");
    target - 1
}

/// The leading prompt blocks of `ids` (full blocks of `block_size` tokens) within
/// `reusable_tokens(target)`.
pub(super) fn reusable_ids(ids: &[BlockId], target: u32, block_size: u32) -> &[BlockId] {
    let blocks = (reusable_tokens(target) / block_size) as usize;
    &ids[..ids.len().min(blocks)]
}

/// Run up to `plain` decode passes after the pass of decodes `shape` that started at `start`
/// and ends at `end`, each ending before `horizon` (ms): every pass end emits a token per
/// request (its gap recorded) and the next pass attends over one more token each. Returns the
/// start and end of the pass left in flight and the passes ended.
pub(super) fn chain_decode_passes(
    timer: &StepTimer,
    log: Option<&mut RankLog>,
    shape: PassShape,
    window: (f64, f64, f64),
    plain: u32,
    records: &mut Records,
) -> (f64, f64, u32) {
    // One loop, monomorphised with and without the log, so an unexplained replay pays nothing,
    // and per timing model, so a pass's price does not match the model again.
    match log {
        None => match timer.decode_price(&shape) {
            DecodePrice::Constant(ms) => chain(shape, window, plain, records, |_, _| ms),
            DecodePrice::Polynomial(p) => chain(shape, window, plain, records, |s, _| p.ms(s)),
            DecodePrice::Model(timer) => {
                chain(shape, window, plain, records, |s, _| timer.pass_ms(s))
            }
        },
        Some(log) => chain(shape, window, plain, records, |s, now| {
            priced(timer, Some(&mut *log), s, None, now)
        }),
    }
}

#[inline]
fn chain(
    mut shape: PassShape,
    (start, end, horizon): (f64, f64, f64),
    plain: u32,
    records: &mut Records,
    mut price: impl FnMut(&PassShape, f64) -> f64,
) -> (f64, f64, u32) {
    let requests = shape.decode_requests;
    let (mut prev, mut end) = (start, end);
    let mut passes = 0u32;
    while passes < plain && end < horizon {
        records.itl.push_n(end - prev, u64::from(requests));
        shape.decode_kv_tokens += u64::from(requests);
        shape.decode_max_context += 1;
        prev = end;
        end = prev + price(&shape, prev);
        passes += 1;
    }
    (prev, end, passes)
}

/// The price (ms) `timer` gives a pass of `shape` starting at `now` (its data-parallel group
/// in `lockstep`), kept in `log` when the replay is explained.
#[inline]
pub(super) fn priced(
    timer: &StepTimer,
    log: Option<&mut RankLog>,
    shape: &PassShape,
    lockstep: Option<&Lockstep>,
    now: f64,
) -> f64 {
    let ms = timer.pass_ms_in(shape, lockstep);
    if let Some(log) = log {
        log.pass(timer, shape, lockstep, now, ms);
    }
    ms
}

/// One rank's engine in the flavour its configuration names.
#[derive(Debug, Clone)]
pub enum Scheduler {
    Vllm(VllmScheduler),
    /// The TensorRT-LLM-like flavour plans passes its own way over the vLLM-like bookkeeping.
    Trtllm(VllmScheduler),
    Sglang(SglangScheduler),
}

impl Scheduler {
    /// The engine `config.backend` names, for `role`, timed by `timer`, whose requests' prompt
    /// blocks are named by `ids` (at the engine's block size) and, for the SGLang flavour's
    /// radix cache, their trace blocks by `chains`; a block cache is one of `caches` in its
    /// replay ([`SimConfig::block_caches`](crate::SimConfig::block_caches)).
    pub fn new(
        role: Role,
        config: &EngineConfig,
        timer: StepTimer,
        ids: Arc<BlockIds>,
        chains: Option<&Arc<TraceChains>>,
        caches: u32,
    ) -> Result<Self> {
        match (config.backend, chains) {
            (Backend::Vllm, _) => Ok(Scheduler::Vllm(VllmScheduler::new(
                role, config, timer, ids, caches,
            ))),
            (Backend::Trtllm, _) => Ok(Scheduler::Trtllm(VllmScheduler::new(
                role, config, timer, ids, caches,
            ))),
            (Backend::Sglang, Some(chains)) => Ok(Scheduler::Sglang(SglangScheduler::new(
                role,
                config,
                timer,
                ids,
                chains.clone(),
            ))),
            (Backend::Sglang, None) => Err(SimError::config(
                "engine.backend",
                "the sglang engine flavour needs the trace's prefix chains".to_string(),
            )),
        }
    }
}

impl Scheduler {
    /// The rank's load as vLLM's data-parallel balancer scores it, `4 x waiting + running`
    /// (vllm/v1/engine/core_client.py), for every flavour; `handed`: requests already sent to
    /// the rank that it has not taken in yet, counted as waiting (vLLM counts each dispatch at
    /// once).
    pub fn load_score(&self, handed: u64) -> u64 {
        let load = self.load();
        4 * (load.waiting + handed) + load.running
    }
}

/// The accessors the replay loop reads on every turn, dispatched by flavour so each inlines
/// (they shadow the `Engine` methods reached through `Deref`, which go through a vtable).
impl Scheduler {
    #[inline]
    pub fn waiting_len(&self) -> usize {
        match self {
            Scheduler::Vllm(s) | Scheduler::Trtllm(s) => s.waiting_len(),
            Scheduler::Sglang(s) => s.waiting_len(),
        }
    }

    #[inline]
    pub fn running_len(&self) -> usize {
        match self {
            Scheduler::Vllm(s) | Scheduler::Trtllm(s) => s.running_len(),
            Scheduler::Sglang(s) => s.running_len(),
        }
    }

    #[inline]
    pub fn active_blocks(&self) -> u32 {
        match self {
            Scheduler::Vllm(s) | Scheduler::Trtllm(s) => s.active_blocks(),
            Scheduler::Sglang(s) => s.active_blocks(),
        }
    }

    #[inline]
    pub fn is_busy(&self) -> bool {
        match self {
            Scheduler::Vllm(s) | Scheduler::Trtllm(s) => s.is_busy(),
            Scheduler::Sglang(s) => s.is_busy(),
        }
    }
}

impl std::ops::Deref for Scheduler {
    type Target = dyn Engine;

    fn deref(&self) -> &Self::Target {
        match self {
            Scheduler::Vllm(s) | Scheduler::Trtllm(s) => s,
            Scheduler::Sglang(s) => s,
        }
    }
}

impl std::ops::DerefMut for Scheduler {
    fn deref_mut(&mut self) -> &mut Self::Target {
        match self {
            Scheduler::Vllm(s) | Scheduler::Trtllm(s) => s,
            Scheduler::Sglang(s) => s,
        }
    }
}
