//! Where a replay's time goes, kept only when a replay is explained (`report.explain`): each
//! rank's passes by kind (prefill only, decode only, mixed) with the parts of their priced
//! time. (Each request's time to first token by stage is derived from its records, in
//! `report`.)

use std::collections::BTreeMap;

use serde::Serialize;

use crate::stats::Distribution;
use crate::timing::{Lockstep, PassShape, StepTimer};

/// What a pass computes: prompt chunks only, decodes only, or both.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PassKind {
    PrefillOnly = 0,
    DecodeOnly = 1,
    Mixed = 2,
}

impl PassKind {
    pub const ALL: [PassKind; 3] = [PassKind::PrefillOnly, PassKind::DecodeOnly, PassKind::Mixed];

    pub fn name(self) -> &'static str {
        match self {
            PassKind::PrefillOnly => "prefill_only",
            PassKind::DecodeOnly => "decode_only",
            PassKind::Mixed => "mixed",
        }
    }

    /// The kind of a pass of `shape`; `None` for a pass that computes nothing.
    pub fn of(shape: &PassShape) -> Option<PassKind> {
        match (shape.prefill_tokens > 0, shape.decode_requests > 0) {
            (true, false) => Some(PassKind::PrefillOnly),
            (false, true) => Some(PassKind::DecodeOnly),
            (true, true) => Some(PassKind::Mixed),
            (false, false) => None,
        }
    }
}

/// The passes of one kind a rank ran: each one's priced time (f32 keeps the log at 4 bytes a
/// pass), and the sum of each part of their prices.
#[derive(Debug, Clone, Default)]
struct KindLog {
    durations: Vec<f32>,
    parts: Vec<f64>,
}

/// One rank's passes while a replay is explained, and when its pass in flight started.
#[derive(Debug, Clone)]
pub struct RankLog {
    kinds: [KindLog; 3],
    /// When the pass in flight started (ms): a prefilling request's pass time runs from here.
    pub pass_start_ms: f64,
}

impl RankLog {
    /// An empty log for a rank priced by `timer`.
    pub fn new(timer: &StepTimer) -> Self {
        let parts = timer.part_names().len();
        let kind = || KindLog {
            durations: Vec::new(),
            parts: vec![0.0; parts],
        };
        RankLog {
            kinds: [kind(), kind(), kind()],
            pass_start_ms: f64::NAN,
        }
    }

    /// A pass of `shape`, priced `ms` by `timer` (its data-parallel group in `lockstep`),
    /// starts at `now`.
    pub fn pass(
        &mut self,
        timer: &StepTimer,
        shape: &PassShape,
        lockstep: Option<&Lockstep>,
        now: f64,
        ms: f64,
    ) {
        self.pass_start_ms = now;
        if let Some(kind) = PassKind::of(shape) {
            let k = &mut self.kinds[kind as usize];
            k.durations.push(ms as f32);
            timer.add_parts(shape, lockstep, &mut k.parts);
        }
    }

    /// What this rank's passes were, by kind, their parts named by `timer`.
    pub fn summarise(&self, timer: &StepTimer) -> BTreeMap<&'static str, KindSummary> {
        let names = timer.part_names();
        PassKind::ALL
            .iter()
            .filter(|k| !self.kinds[**k as usize].durations.is_empty())
            .map(|&kind| {
                let log = &self.kinds[kind as usize];
                let n = log.durations.len() as f64;
                let d = Distribution::of(log.durations.iter().map(|&x| f64::from(x)));
                let parts_mean_ms = names
                    .iter()
                    .zip(&log.parts)
                    .map(|(name, &sum)| (name.clone(), sum / n))
                    .collect();
                let summary = KindSummary {
                    passes: log.durations.len() as u64,
                    mean_ms: d.mean.unwrap_or(0.0),
                    p99_ms: d.p99.unwrap_or(0.0),
                    parts_mean_ms,
                };
                (kind.name(), summary)
            })
            .collect()
    }
}

/// The passes of one kind on one rank: how many, their mean and 99th-percentile priced time,
/// and the mean of each part of the price (ms).
#[derive(Debug, Clone, Serialize)]
pub struct KindSummary {
    pub passes: u64,
    pub mean_ms: f64,
    pub p99_ms: f64,
    pub parts_mean_ms: BTreeMap<String, f64>,
}

/// One rank's passes, by kind.
#[derive(Debug, Clone, Serialize)]
pub struct RankBreakdown {
    /// `aggregated`, `prefill` or `decode`.
    pub role: &'static str,
    /// The worker (in the role's own numbering) and the data-parallel rank inside it.
    pub worker: u32,
    pub dp_rank: u32,
    pub passes: BTreeMap<&'static str, KindSummary>,
}

/// The names of the parts each role's pass prices split into.
pub type PartNames = BTreeMap<&'static str, Vec<String>>;

/// Where a replay's time went: each rank's passes, and the mean of each stage of the time to
/// first token over completed requests (ms), stages in order.
#[derive(Debug, Clone, Serialize)]
pub struct Breakdown {
    /// The parts of each rank's pass prices, named per role (its timing model's parts).
    pub parts: PartNames,
    pub ranks: Vec<RankBreakdown>,
    pub ttft_stages: Vec<StageMean>,
}

/// The mean of one stage of the time to first token over completed requests (ms).
#[derive(Debug, Clone, Serialize)]
pub struct StageMean {
    pub stage: &'static str,
    pub mean_ms: f64,
}
