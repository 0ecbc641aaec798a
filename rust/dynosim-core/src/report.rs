//! What a replay produces: per-request records (arrival, admission, first, second and last
//! token, reuse, worker, status), the time series (bounded buckets of the cluster's state), and the summary
//! (distributions of TTFT, TTST, TPOT, ITL and E2E, throughput, goodput, GPU-hours).

use std::collections::BTreeMap;

use serde::Serialize;

use crate::config::{Role, ServingMode, SimConfig};
use crate::explain::{Breakdown, PartNames, RankBreakdown, StageMean};
use crate::offload::{Lane, LaneStats, TierCounters, TierTotals};
use crate::stats::{Cdf, Distribution, WeightedSamples};
use crate::time_series::TimeSeries;

/// How a request ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Status {
    Completed = 0,
    Rejected = 1,
    /// Still in the system; never present in a finished report.
    Pending = 255,
}

/// Why a request was rejected.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
#[repr(u8)]
pub enum RejectReason {
    None = 0,
    /// The prompt plus one token needs more blocks than the worker's whole cache.
    PromptExceedsCache = 1,
    /// Prompt plus output needs more blocks than the whole cache: it could never finish.
    OutputExceedsCache = 2,
    /// An engine without chunked prefill (TensorRT-LLM's chunked context off) computes a prompt
    /// in one pass, and this one exceeds the token budget of a pass.
    PromptExceedsPassBudget = 3,
}

impl RejectReason {
    pub const ALL: [RejectReason; 4] = [
        RejectReason::None,
        RejectReason::PromptExceedsCache,
        RejectReason::OutputExceedsCache,
        RejectReason::PromptExceedsPassBudget,
    ];

    /// A stable machine name, used as the key of the summary's rejection counts.
    pub fn name(self) -> &'static str {
        match self {
            RejectReason::None => "none",
            RejectReason::PromptExceedsCache => "prompt_exceeds_kv_cache",
            RejectReason::OutputExceedsCache => "prompt_plus_output_exceeds_kv_cache",
            RejectReason::PromptExceedsPassBudget => "prompt_exceeds_pass_token_budget",
        }
    }
}

/// Per-request outcomes, one entry per workload row, in row order. Times are virtual ms; a
/// time a request never reached is NaN.
#[derive(Debug, Clone)]
pub struct Records {
    pub arrival_ms: Vec<f64>,
    pub first_admit_ms: Vec<f64>,
    pub first_token_ms: Vec<f64>,
    pub second_token_ms: Vec<f64>,
    pub last_token_ms: Vec<f64>,
    pub input_length: Vec<u32>,
    pub output_length: Vec<u32>,
    /// Prompt tokens found in the KV cache at first admission.
    pub reused_tokens: Vec<u32>,
    /// Worker index (the prefill worker in disaggregated mode), -1 when none.
    pub worker: Vec<i32>,
    /// Decode worker index in disaggregated mode, -1 otherwise.
    pub decode_worker: Vec<i32>,
    /// KV bytes moved from the prefill to the decode worker (0 when aggregated).
    pub transfer_bytes: Vec<f64>,
    pub transfer_start_ms: Vec<f64>,
    pub transfer_end_ms: Vec<f64>,
    pub status: Vec<u8>,
    pub reject_reason: Vec<u8>,
    pub preemptions: Vec<u32>,
    /// Offload tiers (empty without them): prompt blocks found at queueing in G1 (the prefix
    /// hit), then in G2 right after it, then in G3 after those; and when onboarding the G2/G3
    /// blocks to G1 started and ended (NaN: no onboarding).
    pub g1_hit_blocks: Vec<u32>,
    pub g2_hit_blocks: Vec<u32>,
    pub g3_hit_blocks: Vec<u32>,
    pub onboard_start_ms: Vec<f64>,
    pub onboard_end_ms: Vec<f64>,
    /// An explained replay (empty otherwise): the time of the passes that computed each
    /// request's prompt before its first token (ms), and when its prompt was done.
    pub prefill_pass_ms: Vec<f64>,
    pub prefill_end_ms: Vec<f64>,
    /// Every inter-token gap of every request (ms); emptied by [`Report::build`], which keeps
    /// their summary.
    pub itl: WeightedSamples,
    /// Requests completed or rejected so far.
    pub finished: usize,
    /// Requests that ended since the replay loop last looked (sessions and closed loop).
    pub just_finished: Vec<u32>,
}

impl Records {
    /// Records of requests that arrive at `arrival_ms` (NaN: set when dispatched).
    pub fn new(arrival_ms: Vec<f64>, input_length: &[u32], output_length: &[u32]) -> Self {
        let n = arrival_ms.len();
        Records {
            arrival_ms,
            first_admit_ms: vec![f64::NAN; n],
            first_token_ms: vec![f64::NAN; n],
            second_token_ms: vec![f64::NAN; n],
            last_token_ms: vec![f64::NAN; n],
            input_length: input_length.to_vec(),
            output_length: output_length.to_vec(),
            reused_tokens: vec![0; n],
            worker: vec![-1; n],
            decode_worker: Vec::new(),
            transfer_bytes: Vec::new(),
            transfer_start_ms: Vec::new(),
            transfer_end_ms: Vec::new(),
            status: vec![Status::Pending as u8; n],
            reject_reason: vec![RejectReason::None as u8; n],
            preemptions: vec![0; n],
            g1_hit_blocks: Vec::new(),
            g2_hit_blocks: Vec::new(),
            g3_hit_blocks: Vec::new(),
            onboard_start_ms: Vec::new(),
            onboard_end_ms: Vec::new(),
            prefill_pass_ms: Vec::new(),
            prefill_end_ms: Vec::new(),
            itl: WeightedSamples::default(),
            finished: 0,
            just_finished: Vec::new(),
        }
    }

    /// Make room for the KV-transfer columns (`decode_worker`, `transfer_*`), every request's
    /// holding "none yet". A disaggregated replay writes them as it goes; an aggregated one
    /// never does, and its report gets them only at the end of [`Report::build`], in memory
    /// its summaries have freed (at 10 M requests they are 280 MB).
    pub fn make_transfer_columns(&mut self) {
        let n = self.arrival_ms.len();
        self.decode_worker = vec![-1; n];
        self.transfer_bytes = vec![0.0; n];
        self.transfer_start_ms = vec![f64::NAN; n];
        self.transfer_end_ms = vec![f64::NAN; n];
    }

    /// Make room for the offload-tier columns.
    pub fn enable_tiers(&mut self) {
        let n = self.arrival_ms.len();
        self.g1_hit_blocks = vec![0; n];
        self.g2_hit_blocks = vec![0; n];
        self.g3_hit_blocks = vec![0; n];
        self.onboard_start_ms = vec![f64::NAN; n];
        self.onboard_end_ms = vec![f64::NAN; n];
    }

    /// `request` is admitted at `now` with `cached` prompt tokens found in the KV cache: its
    /// first admission anywhere is what the records keep (a decode worker re-admitting a
    /// request it preempted does not replace the prefill worker's).
    pub fn admit(&mut self, request: usize, now: f64, cached: u32) {
        if self.first_admit_ms[request].is_nan() {
            self.first_admit_ms[request] = now;
            self.reused_tokens[request] = cached;
        }
    }

    /// Make room for the columns of an explained replay.
    pub fn enable_explain(&mut self) {
        let n = self.arrival_ms.len();
        self.prefill_pass_ms = vec![0.0; n];
        self.prefill_end_ms = vec![f64::NAN; n];
    }

    /// An explained replay: a pass from `start` to `now` computed part of `request`'s prompt
    /// (all the rest of it when `prompt_done`). Passes after its first prompt was done (a
    /// recompute after preemption) are not part of its time to first token.
    pub fn prefill_pass(&mut self, request: usize, start: f64, now: f64, prompt_done: bool) {
        if !self.prefill_end_ms[request].is_nan() {
            return;
        }
        self.prefill_pass_ms[request] += now - start;
        if prompt_done {
            self.prefill_end_ms[request] = now;
        }
    }

    pub fn complete(&mut self, request: usize, now: f64) {
        self.last_token_ms[request] = now;
        self.status[request] = Status::Completed as u8;
        self.finished += 1;
        self.just_finished.push(request as u32);
    }

    pub fn reject(&mut self, request: usize, reason: RejectReason) {
        self.status[request] = Status::Rejected as u8;
        self.reject_reason[request] = reason as u8;
        self.finished += 1;
        self.just_finished.push(request as u32);
    }
}

/// Counters and cluster-wide facts the replay loop hands to the report.
#[derive(Debug, Clone, Default)]
pub struct Counters {
    pub passes: u64,
    pub preemptions: u64,
    pub evictions: u64,
    pub events: u64,
    /// Max-min rate solves of the KV-transfer links.
    pub rate_recomputations: u64,
    /// Used fraction of each KV-transfer link (one per rank), prefill send links first.
    pub link_utilization: Vec<f64>,
    /// Time each worker spent running passes (ms).
    pub worker_busy_ms: Vec<f64>,
    /// Offload tiers, when on.
    pub tiers: Option<TierTotals>,
    /// An explained replay: each rank's passes, and the parts each role's prices split into.
    pub explained: Option<(Vec<RankBreakdown>, PartNames)>,
}

/// Per-request metrics derived from the records, one entry per request (NaN where undefined).
#[derive(Debug, Clone)]
pub struct Derived {
    pub ttft_ms: Vec<f64>,
    pub ttst_ms: Vec<f64>,
    pub tpot_ms: Vec<f64>,
    pub e2e_ms: Vec<f64>,
}

impl Derived {
    fn of(r: &Records) -> Derived {
        let n = r.arrival_ms.len();
        let mut d = Derived {
            ttft_ms: vec![f64::NAN; n],
            ttst_ms: vec![f64::NAN; n],
            tpot_ms: vec![f64::NAN; n],
            e2e_ms: vec![f64::NAN; n],
        };
        for i in 0..n {
            if r.status[i] != Status::Completed as u8 {
                continue;
            }
            let ttft = r.first_token_ms[i] - r.arrival_ms[i];
            let e2e = r.last_token_ms[i] - r.arrival_ms[i];
            d.ttft_ms[i] = ttft;
            d.e2e_ms[i] = e2e;
            d.ttst_ms[i] = r.second_token_ms[i] - r.first_token_ms[i];
            if r.output_length[i] > 1 {
                d.tpot_ms[i] = (e2e - ttft) / f64::from(r.output_length[i] - 1);
            }
        }
        d
    }
}

/// The stages a completed request's time to first token is made of (ms), in order; they add up
/// to its TTFT. Waiting for admission includes onboarding from offload tiers.
pub const TTFT_STAGES: [&str; 6] = [
    "queue",
    "prefill_passes",
    "between_chunks",
    "handoff",
    "transfer",
    "after_transfer",
];

/// Each stage of every request's time to first token (ms; NaN for a request that did not
/// complete), in [`TTFT_STAGES`] order:
/// - `queue`: arrival to first admission;
/// - `prefill_passes`: the passes that computed its prompt (a pass lasts until its worker's
///   slowest data-parallel rank ends; a prompt recomputed after preemption counts again);
/// - `between_chunks`: the rest until its prompt was done (passes without its chunks);
/// - `handoff`: disaggregated, prompt done to the start of its KV transfer (a decode worker
///   reserving blocks);
/// - `transfer`: the KV transfer;
/// - `after_transfer`: the KV landed to the first token (the decode worker's first pass when
///   the first token comes from it).
pub fn ttft_stages(r: &Records) -> [Vec<f64>; 6] {
    let n = r.arrival_ms.len();
    let mut out: [Vec<f64>; 6] = std::array::from_fn(|_| vec![f64::NAN; n]);
    for i in 0..n {
        if r.status[i] != Status::Completed as u8 {
            continue;
        }
        let admitted = r.first_admit_ms[i];
        let prompt_done = r.prefill_end_ms[i];
        // No transfer (aggregated, where the columns are not made yet): the first token
        // ends the prompt's last pass.
        let (start, end) = match r.transfer_start_ms.get(i) {
            Some(&start) if !start.is_nan() => (start, r.transfer_end_ms[i]),
            _ => (prompt_done, prompt_done),
        };
        let stages = [
            admitted - r.arrival_ms[i],
            r.prefill_pass_ms[i],
            prompt_done - admitted - r.prefill_pass_ms[i],
            start - prompt_done,
            end - start,
            r.first_token_ms[i] - end,
        ];
        for (column, v) in out.iter_mut().zip(stages) {
            column[i] = v;
        }
    }
    out
}

/// The mean of each stage of `stages` (as [`ttft_stages`] gives them) over the requests that
/// have it (ms), in stage order.
fn ttft_means(stages: &[Vec<f64>; 6]) -> Vec<StageMean> {
    TTFT_STAGES
        .iter()
        .zip(stages)
        .map(|(&stage, column)| StageMean {
            stage,
            mean_ms: Distribution::of(column.iter().copied()).mean.unwrap_or(0.0),
        })
        .collect()
}

/// The summary of a replay. Serialised with fields in this order; the canonical report sorts
/// keys anyway.
#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    pub num_requests: u64,
    pub completed_requests: u64,
    pub rejected_requests: u64,
    pub rejections_by_reason: BTreeMap<&'static str, u64>,
    /// Prompt and output tokens of completed requests.
    pub total_input_tokens: u64,
    pub total_output_tokens: u64,
    /// From the first arrival (0) to the last token of the replay (ms).
    pub duration_ms: f64,
    pub request_throughput_rps: f64,
    pub output_token_throughput_tps: f64,
    pub total_token_throughput_tps: f64,
    pub ttft_ms: Distribution,
    pub ttst_ms: Distribution,
    pub tpot_ms: Distribution,
    pub itl_ms: Distribution,
    /// The CDF of every inter-token gap (ms), at most 50 points per factor of ten.
    pub itl_cdf_ms: Cdf,
    pub e2e_ms: Distribution,
    /// Prompt tokens served from the KV cache at first admission, over all prompt tokens of
    /// completed requests.
    pub reused_tokens: u64,
    pub prefix_reuse_ratio: f64,
    /// Disaggregated mode: KV transfers, their bytes and durations (ms).
    pub num_transfers: u64,
    pub transfer_bytes: f64,
    pub transfer_ms: Distribution,
    /// Used fraction of each KV-transfer link over the replay: the send link of each prefill
    /// rank, then the receive link of each decode rank (empty without a bandwidth).
    pub link_utilization: Vec<f64>,
    /// Time each worker spent running passes (ms), in worker order.
    pub worker_busy_ms: Vec<f64>,
    pub rate_recomputations: u64,
    /// All workers (prefill plus decode in disaggregated mode).
    pub num_workers: u32,
    pub num_gpus: u32,
    pub gpu_hours: f64,
    /// Completed requests meeting every set SLA threshold, and their rate.
    pub goodput_requests: u64,
    pub goodput_rps: f64,
    pub num_passes: u64,
    pub num_preemptions: u64,
    pub num_evictions: u64,
    pub num_events: u64,
    /// Offload tiers (absent without them).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub offload: Option<OffloadSummary>,
}

/// What the offload tiers did: for the ranks requests queue on (aggregated or prefill), and in
/// disaggregation for the decode ranks (`decode`), each in its own role's block size.
#[derive(Debug, Clone, Serialize)]
pub struct OffloadSummary {
    #[serde(flatten)]
    pub queueing: TierRoleSummary,
    /// Blocks evicted from the last tier and lost, all ranks.
    pub dropped_blocks: u64,
    /// Max-min rate solves of the tier links.
    pub rate_recomputations: u64,
    /// The tier links' use over the replay, each kind's mean over its links.
    pub link_utilization: TierLinkUse,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub decode: Option<TierRoleSummary>,
}

/// What the tiers of one role's ranks did. Hits count prompt blocks found in G1 (the prefix
/// hit), then in G2 right after it, then in G3 after those: on the queueing ranks those of
/// completed requests at queueing, on decode ranks those of every KV reservation.
#[derive(Debug, Clone, Serialize)]
pub struct TierRoleSummary {
    pub g1_hit_blocks: u64,
    pub g2_hit_blocks: u64,
    pub g3_hit_blocks: u64,
    pub g1_hit_tokens: u64,
    pub g2_hit_tokens: u64,
    pub g3_hit_tokens: u64,
    /// Requests whose G2/G3 blocks were onboarded, and how long that took (ms; queueing ranks).
    pub num_onboards: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub onboard_ms: Option<Distribution>,
    /// Requests whose G2/G3 hit found no room in G1 when first looked up (each is looked up
    /// again before later passes while it waits).
    pub onboards_skipped: u64,
    /// Onboards that first waited for offload copies still in flight, their share of all
    /// onboards, and the mean of those waits (ms).
    pub onboards_delayed: u64,
    pub delayed_onboard_share: f64,
    pub offload_wait_ms_mean: f64,
    /// With `in_flight: recompute`: lookups whose hit a copy still in flight cut short, and
    /// the blocks they lost (recomputed instead).
    pub hits_cut_by_copies: u64,
    pub blocks_lost_to_copies: u64,
    /// Blocks copied down (G1 -> G2, G2 -> G3) and up (G2 -> G1, G3 -> G2 -> G1), and lost
    /// for want of a G3.
    pub offloaded_blocks: u64,
    pub offloaded_g2_blocks: u64,
    pub offloaded_g3_blocks: u64,
    pub onboarded_blocks: u64,
    pub onboarded_g2_blocks: u64,
    pub onboarded_g3_blocks: u64,
    /// Bytes moved: offloaded blocks x block bytes, onboarded blocks x block bytes.
    pub offload_bytes: f64,
    pub onboard_bytes: f64,
    /// The flows of each tier and direction.
    pub flows: TierFlows,
}

/// Flows of each tier and direction: offloads G1 -> G2 and G2 -> G3, onboards G2 -> G1 and
/// G3 -> G2 -> G1.
#[derive(Debug, Clone, Serialize)]
pub struct TierFlows {
    pub g1_to_g2: LaneSummary,
    pub g2_to_g3: LaneSummary,
    pub g2_to_g1: LaneSummary,
    pub g3_to_g1: LaneSummary,
}

/// Bytes the tier links delivered over their capacity for the replay, averaged over the links
/// of each kind (0 for copies down when they are free).
#[derive(Debug, Clone, Serialize)]
pub struct TierLinkUse {
    pub g1_to_g2: f64,
    /// Carries G2 hits, and G3 hits staging through G2.
    pub g2_to_g1: f64,
    /// With a half-duplex G3 link, `g2_to_g3` and `g3_to_g2` are both its one shared use.
    pub g2_to_g3: f64,
    pub g3_to_g2: f64,
}

/// What the flows of one tier and direction moved: flows started (0 for free copies), bytes,
/// and of the flows that landed before the replay ended (its last request), how many and the
/// sum and mean of their durations (start to landing, ms).
#[derive(Debug, Clone, Serialize)]
pub struct LaneSummary {
    pub flows: u64,
    pub bytes: f64,
    pub landed: u64,
    pub flow_ms: f64,
    pub mean_flow_ms: f64,
}

impl LaneSummary {
    fn of(s: &LaneStats) -> Self {
        LaneSummary {
            flows: s.flows,
            bytes: s.bytes,
            flow_ms: s.flow_ms,
            landed: s.landed,
            mean_flow_ms: ratio(s.flow_ms, s.landed as f64),
        }
    }
}

/// `a / b`, 0 when `b` is 0.
fn ratio(a: f64, b: f64) -> f64 {
    if b > 0.0 {
        a / b
    } else {
        0.0
    }
}

impl TierRoleSummary {
    /// `hits`: G1, G2, G3 hit blocks; `block`: the role's tokens per block; `onboard_ms`: the
    /// onboard times of requests, where recorded.
    fn of(
        t: &TierCounters,
        hits: [u64; 3],
        block: u64,
        num_onboards: u64,
        onboard_ms: Option<Distribution>,
    ) -> Self {
        let lane = |l: Lane| LaneSummary::of(&t.lanes[l as usize]);
        TierRoleSummary {
            g1_hit_blocks: hits[0],
            g2_hit_blocks: hits[1],
            g3_hit_blocks: hits[2],
            g1_hit_tokens: hits[0] * block,
            g2_hit_tokens: hits[1] * block,
            g3_hit_tokens: hits[2] * block,
            num_onboards,
            onboard_ms,
            onboards_skipped: t.onboards_skipped,
            onboards_delayed: t.onboards_delayed,
            delayed_onboard_share: ratio(t.onboards_delayed as f64, t.onboards as f64),
            offload_wait_ms_mean: ratio(t.offload_wait_ms, t.onboards_delayed as f64),
            hits_cut_by_copies: t.hits_cut_by_copies,
            blocks_lost_to_copies: t.blocks_lost_to_copies,
            offloaded_blocks: t.offloaded_g2_blocks + t.offloaded_g3_blocks,
            offloaded_g2_blocks: t.offloaded_g2_blocks,
            offloaded_g3_blocks: t.offloaded_g3_blocks,
            onboarded_blocks: t.onboarded_g2_blocks + t.onboarded_g3_blocks,
            onboarded_g2_blocks: t.onboarded_g2_blocks,
            onboarded_g3_blocks: t.onboarded_g3_blocks,
            offload_bytes: t.offload_bytes,
            onboard_bytes: t.onboard_bytes,
            flows: TierFlows {
                g1_to_g2: lane(Lane::OffloadG2),
                g2_to_g3: lane(Lane::OffloadG3),
                g2_to_g1: lane(Lane::OnboardG2),
                g3_to_g1: lane(Lane::OnboardG3),
            },
        }
    }
}

/// Everything one replay produced.
#[derive(Debug, Clone)]
pub struct Report {
    pub records: Records,
    pub derived: Derived,
    pub timeseries: TimeSeries,
    pub summary: Summary,
    /// An explained replay: where its time went, and each request's time to first token by
    /// stage (the columns of [`ttft_stages`]).
    pub breakdown: Option<(Breakdown, [Vec<f64>; 6])>,
}

fn per_second(count: f64, duration_ms: f64) -> f64 {
    if duration_ms > 0.0 {
        count * 1000.0 / duration_ms
    } else {
        0.0
    }
}

impl Report {
    pub fn build(
        mut records: Records,
        timeseries: TimeSeries,
        counters: Counters,
        duration_ms: f64,
        config: &SimConfig,
    ) -> Report {
        // The inter-token gaps first, freed once summarised: the derived columns built next
        // then take their memory instead of adding to a long replay's peak, which is here.
        let (itl_ms, itl_cdf_ms) = std::mem::take(&mut records.itl).summarise();
        let derived = Derived::of(&records);
        let breakdown = counters.explained.map(|(ranks, parts)| {
            let stages = ttft_stages(&records);
            let breakdown = Breakdown {
                parts,
                ranks,
                ttft_stages: ttft_means(&stages),
            };
            (breakdown, stages)
        });
        let n = records.arrival_ms.len();
        // Request indices fit 32 bits (`workload::MAX_REQUESTS`): half the memory of usize.
        let done: Vec<u32> = (0..n as u32)
            .filter(|&i| records.status[i as usize] == Status::Completed as u8)
            .collect();
        let mut rejections_by_reason = BTreeMap::new();
        for i in 0..n {
            if records.status[i] == Status::Rejected as u8 {
                let reason = RejectReason::ALL[records.reject_reason[i] as usize];
                *rejections_by_reason.entry(reason.name()).or_insert(0) += 1;
            }
        }
        let sum = |v: &[u32]| done.iter().map(|&i| u64::from(v[i as usize])).sum::<u64>();
        let total_input_tokens = sum(&records.input_length);
        let total_output_tokens = sum(&records.output_length);
        let reused_tokens = sum(&records.reused_tokens);
        let pick = |v: &[f64]| Distribution::of_rows(v, &done);
        let sla = &config.sla;
        let meets =
            |limit: Option<f64>, value: f64| limit.is_none_or(|l| value.is_nan() || value <= l);
        let goodput_requests = done
            .iter()
            .filter(|&&i| {
                let i = i as usize;
                meets(sla.ttft_ms, derived.ttft_ms[i])
                    && meets(sla.itl_ms, derived.tpot_ms[i])
                    && meets(sla.e2e_ms, derived.e2e_ms[i])
            })
            .count() as u64;
        let cluster = &config.cluster;
        let (num_workers, num_gpus) = (config.num_workers(), config.num_gpus());
        let offload = counters.tiers.as_ref().map(|t| {
            // Requests queue on aggregated or prefill ranks.
            let (queueing, decode) = match cluster.mode {
                ServingMode::Aggregated => (Role::Aggregated, None),
                ServingMode::Disaggregated => (Role::Prefill, Some(Role::Decode)),
            };
            let block = |role| u64::from(config.role(role).0.block_size());
            let onboarded: Vec<usize> = (0..n)
                .filter(|&i| !records.onboard_end_ms[i].is_nan())
                .collect();
            let hits = [
                sum(&records.g1_hit_blocks),
                sum(&records.g2_hit_blocks),
                sum(&records.g3_hit_blocks),
            ];
            let onboard_ms = Distribution::of(
                onboarded
                    .iter()
                    .map(|&i| records.onboard_end_ms[i] - records.onboard_start_ms[i]),
            );
            let d = &t.decode;
            OffloadSummary {
                queueing: TierRoleSummary::of(
                    &t.queueing,
                    hits,
                    block(queueing),
                    onboarded.len() as u64,
                    Some(onboard_ms),
                ),
                dropped_blocks: t.queueing.dropped_blocks + d.dropped_blocks + t.g3_dropped_blocks,
                rate_recomputations: t.rate_recomputations,
                link_utilization: TierLinkUse {
                    g1_to_g2: t.link_utilization[Lane::OffloadG2 as usize],
                    g2_to_g3: t.link_utilization[Lane::OffloadG3 as usize],
                    g2_to_g1: t.link_utilization[Lane::OnboardG2 as usize],
                    g3_to_g2: t.link_utilization[Lane::OnboardG3 as usize],
                },
                decode: decode.map(|role| {
                    TierRoleSummary::of(d, d.hit_blocks, block(role), d.onboards, None)
                }),
            }
        });
        let transferred: Vec<usize> = (0..records.transfer_end_ms.len())
            .filter(|&i| !records.transfer_end_ms[i].is_nan())
            .collect();
        let completed = done.len() as u64;
        let summary = Summary {
            num_requests: n as u64,
            completed_requests: completed,
            rejected_requests: rejections_by_reason.values().sum(),
            rejections_by_reason,
            total_input_tokens,
            total_output_tokens,
            duration_ms,
            request_throughput_rps: per_second(completed as f64, duration_ms),
            output_token_throughput_tps: per_second(total_output_tokens as f64, duration_ms),
            total_token_throughput_tps: per_second(
                (total_input_tokens + total_output_tokens) as f64,
                duration_ms,
            ),
            ttft_ms: pick(&derived.ttft_ms),
            ttst_ms: pick(&derived.ttst_ms),
            tpot_ms: pick(&derived.tpot_ms),
            itl_ms,
            itl_cdf_ms,
            e2e_ms: pick(&derived.e2e_ms),
            num_transfers: transferred.len() as u64,
            transfer_bytes: transferred.iter().map(|&i| records.transfer_bytes[i]).sum(),
            transfer_ms: Distribution::of(
                transferred
                    .iter()
                    .map(|&i| records.transfer_end_ms[i] - records.transfer_start_ms[i]),
            ),
            link_utilization: counters.link_utilization,
            worker_busy_ms: counters.worker_busy_ms,
            rate_recomputations: counters.rate_recomputations,
            reused_tokens,
            prefix_reuse_ratio: if total_input_tokens > 0 {
                reused_tokens as f64 / total_input_tokens as f64
            } else {
                0.0
            },
            num_workers,
            num_gpus,
            gpu_hours: f64::from(num_gpus) * duration_ms / 3_600_000.0,
            goodput_requests,
            goodput_rps: per_second(goodput_requests as f64, duration_ms),
            num_passes: counters.passes,
            num_preemptions: counters.preemptions,
            num_evictions: counters.evictions,
            num_events: counters.events,
            offload,
        };
        if records.transfer_end_ms.len() != n {
            records.make_transfer_columns();
        }
        Report {
            records,
            derived,
            timeseries,
            summary,
            breakdown,
        }
    }

    /// The summary as JSON (`null` for undefined statistics).
    pub fn summary_json(&self) -> String {
        serde_json::to_string(&self.summary).expect("summary serialises")
    }

    /// An explained replay's breakdown as JSON.
    pub fn breakdown_json(&self) -> Option<String> {
        let (breakdown, _) = self.breakdown.as_ref()?;
        Some(serde_json::to_string(breakdown).expect("breakdown serialises"))
    }
}
