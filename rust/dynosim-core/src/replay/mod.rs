//! The discrete-event replay of a workload on a cluster: aggregated workers, or prefill and
//! decode workers joined by KV transfers.
//!
//! The event loop (`run`, behind [`replay`]) is here; `cluster` holds the workers and what each
//! event does to them, `dispatcher` decides when requests are sent, and `sampler` records the
//! time series.

mod cluster;
mod dispatcher;
pub mod memory;
mod sampler;

use crate::config::SimConfig;
use crate::control::Control;
use crate::error::{Result, SimError};
use crate::event_queue::EventQueue;
use crate::offload::Onboard;
use crate::prepared::PreparedWorkload;
use crate::report::{Counters, Records, Report, Status};
use crate::workload::Workload;
use cluster::Cluster;
use dispatcher::Dispatcher;
use sampler::Sampler;

/// Something that happens at an instant of the virtual clock. Session starts come from the
/// `Dispatcher`, and transfers finish inside the `Transport`.
#[derive(Debug, Clone, Copy)]
enum Event {
    PassEnd {
        worker: u32,
    },
    /// A later turn of a session is sent.
    Send {
        request: u32,
    },
}

/// Replay `workload` under `config`. `control`, when given, is kept equal to the number of
/// requests finished (completed or rejected) so another thread can show progress, and stops
/// the replay with [`SimError::Interrupted`] once interrupted.
pub fn replay(
    workload: &Workload,
    config: &SimConfig,
    control: Option<&Control>,
) -> Result<Report> {
    run(workload, None, config, control, Shortcuts::ALL)
}

/// `replay` of a prepared workload: the same report, with the block identities it already
/// holds (any number of threads may replay one prepared workload at once).
pub fn replay_prepared(
    prepared: &PreparedWorkload,
    config: &SimConfig,
    control: Option<&Control>,
) -> Result<Report> {
    run(
        &prepared.workload(),
        Some(prepared),
        config,
        control,
        Shortcuts::ALL,
    )
}

/// The loop's shortcuts, each of which changes no result (the tests replay without them):
/// `chain_plain_passes` runs plain decode passes outside the event loop, and
/// `continue_plain_passes` lets a rank that nothing outside can reach plan its next pass as
/// its pass ends.
#[derive(Debug, Clone, Copy)]
struct Shortcuts {
    chain_plain_passes: bool,
    continue_plain_passes: bool,
}

impl Shortcuts {
    const ALL: Shortcuts = Shortcuts {
        chain_plain_passes: true,
        continue_plain_passes: true,
    };
}

/// `replay`; `prepared` holds the block identities of `workload` when given; `shortcuts`
/// off send every pass through the event loop and plan it there (the tests check that the
/// shortcuts change nothing).
fn run(
    workload: &Workload,
    prepared: Option<&PreparedWorkload>,
    config: &SimConfig,
    control: Option<&Control>,
    shortcuts: Shortcuts,
) -> Result<Report> {
    config.check_replayable()?;
    workload.validate()?;
    workload.check_speedup(config.cluster.arrival_speedup_ratio)?;
    let ends_send = workload.session.is_some() || config.cluster.concurrency.is_some();
    let mut cluster = Cluster::new(config, workload, prepared, ends_send)?;
    // Naming the blocks of a large workload takes a while: a stop asked meanwhile holds.
    if let Some(c) = control {
        c.checkpoint(0)?;
    }
    let mut dispatcher = Dispatcher::new(workload, config);
    // Arrival times are known up front only for open-loop session starts.
    let arrivals: Vec<f64> = (0..workload.len())
        .map(|i| match config.cluster.concurrency {
            None if !dispatcher.follows[i] => dispatcher.timestamps[i],
            _ => f64::NAN,
        })
        .collect();
    let mut records = Records::new(arrivals, workload.input_length, workload.output_length);
    if cluster.disaggregated() {
        records.make_transfer_columns();
    }
    if cluster.tiers.is_some() {
        records.enable_tiers();
    }
    if config.report.explain {
        records.enable_explain();
    }
    let mut onboarded: Vec<Onboard> = Vec::new();
    let mut sampler = Sampler::new(config.report.sample_interval_ms, &cluster);
    let mut queue: EventQueue<Event> = EventQueue::default();
    let mut counters = Counters::default();
    let mut finished_transfers: Vec<u64> = Vec::new();
    let mut to_send: Vec<u32> = Vec::new();
    let mut done: Vec<u32> = Vec::new();
    let mut new_passes: Vec<u32> = Vec::new();
    let mut now = 0.0_f64;
    let mut started = false;

    loop {
        // Once every request has ended only copies down to the tiers can be in flight, and
        // their landing changes no request: the replay ends with its last request.
        if started && records.finished == workload.len() {
            break;
        }
        let next = [
            dispatcher.next_start_ms(),
            queue.peek_time(),
            cluster.transport.next_finish_ms()?,
            match &mut cluster.tiers {
                Some(tiers) => tiers.next_finish_ms()?,
                None => None,
            },
        ];
        let t = next.into_iter().flatten().reduce(f64::min);
        // The closed loop starts at 0 with no event before it (once: an empty workload ends).
        let Some(t) = t.or((!started).then_some(0.0)) else {
            break;
        };
        started = true;
        now = t;
        sampler.record_until(now, &mut cluster);
        // Onboards that end now queue first, ahead of what arrives now; flows start after.
        if let Some(tiers) = &mut cluster.tiers {
            onboarded.clear();
            tiers.pop_finished(now, &mut onboarded)?;
            for &o in &onboarded {
                cluster.events += 1;
                cluster.onboard_done(o, now, &mut records)?;
            }
        }
        dispatcher.starts(now, &mut to_send);
        for i in to_send.drain(..) {
            cluster.send(workload, i as usize, now, &mut records);
        }
        while let Some(event) = queue.pop_due(now) {
            match event {
                Event::PassEnd { worker } => {
                    cluster.events += 1;
                    cluster.pass_end(worker as usize, now, workload, &mut records);
                }
                Event::Send { request } => {
                    dispatcher.sending();
                    cluster.send(workload, request as usize, now, &mut records);
                }
            }
        }
        finished_transfers.clear();
        cluster
            .transport
            .pop_finished(now, &mut finished_transfers)?;
        for &id in &finished_transfers {
            cluster.events += 1;
            cluster.transfer_done(id, now, &mut records)?;
        }
        // Ends free closed-loop slots and release later session turns; what they send can
        // itself be rejected at once, so repeat until nothing more ends.
        while !records.just_finished.is_empty() {
            std::mem::swap(&mut done, &mut records.just_finished);
            for &i in &done {
                dispatcher.finished(i as usize, now, &mut queue);
            }
            done.clear();
            dispatcher.starts(now, &mut to_send);
            for i in to_send.drain(..) {
                cluster.send(workload, i as usize, now, &mut records);
            }
        }
        // Ascending worker order keeps event insertion, hence tie-breaking, deterministic.
        cluster.dirty.sort_unstable();
        for k in 0..cluster.dirty.len() {
            let w = cluster.dirty[k] as usize;
            cluster.is_dirty[w] = false;
            let between_passes = !cluster.workers[w].busy || cluster.first_token_on_arrival;
            if cluster.disaggregated() && w >= cluster.num_prefill && between_passes {
                cluster.reserve(w, now, workload, &mut records)?;
            }
            if cluster.workers[w].busy {
                continue;
            }
            if let Some(ms) = cluster.start_pass(w, now, &mut records)? {
                cluster.set_pass_end(w, now + ms);
                new_passes.push(w as u32);
            }
        }
        sampler.refresh(&cluster);
        cluster.dirty.clear();
        // Chain only once every worker has started what it starts now: their pass ends bound
        // the horizon.
        for &w in &new_passes {
            let w = w as usize;
            if shortcuts.chain_plain_passes && cluster.runs_alone(w) {
                let next_send = [dispatcher.next_start_ms(), dispatcher.next_send_ms()]
                    .into_iter()
                    .flatten()
                    .fold(f64::INFINITY, f64::min);
                let horizon = cluster.horizon(w, next_send)?;
                let end = cluster.workers[w].pass_end_ms;
                let rank = &mut cluster.ranks[cluster.workers[w].first_rank];
                if shortcuts.continue_plain_passes {
                    rank.quiet_until(horizon);
                }
                let (last_end, passes) = rank.run_plain_decodes(now, end, horizon, &mut records);
                cluster.set_pass_end(w, last_end);
                cluster.events += passes;
            }
            let end = cluster.workers[w].pass_end_ms;
            queue.push(end, Event::PassEnd { worker: w as u32 });
        }
        new_passes.clear();
        if let Some(c) = control {
            c.checkpoint(records.finished)?;
        }
    }
    sampler.finish(now, &mut cluster);

    if let Some(i) = records
        .status
        .iter()
        .position(|&s| s == Status::Pending as u8)
    {
        return Err(SimError::Internal(format!(
            "request {i} neither completed nor was rejected"
        )));
    }
    for w in &cluster.ranks {
        counters.passes += w.passes();
        counters.preemptions += w.preemptions();
        counters.evictions += w.evictions();
    }
    counters.events = cluster.events;
    counters.rate_recomputations = cluster.transport.recomputations();
    counters.link_utilization = cluster.transport.utilization(now);
    counters.worker_busy_ms = sampler.busy_ms;
    counters.tiers = cluster.tiers.as_ref().map(|t| t.finish(now));
    counters.explained = cluster.explained();
    // The report's columns are the largest thing built: free the cluster (block identities,
    // caches) and the dispatcher first, so their memory is not held beside them.
    drop(cluster);
    drop(dispatcher);
    Ok(Report::build(
        records,
        sampler.series,
        counters,
        now,
        config,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The offload tiers' flow times (ms), each kind's total and mean, in the summary's order:
    /// the flows advance at every loop instant, so merging instants changes their sums'
    /// rounding.
    fn tier_flow_ms(summary: &mut serde_json::Value, mut each: impl FnMut(&mut serde_json::Value)) {
        let Some(offload) = summary["offload"].as_object_mut() else {
            return;
        };
        // Each role's flows (the queueing side, and the decode side when disaggregated).
        for role in offload.values_mut() {
            if let Some(flows) = role.get_mut("flows").and_then(|f| f.as_object_mut()) {
                for kind in flows.values_mut() {
                    each(&mut kind["flow_ms"]);
                    each(&mut kind["mean_flow_ms"]);
                }
            }
        }
    }

    /// [`tier_flow_ms`] of `report`.
    fn tier_flows(report: &Report) -> Vec<f64> {
        let mut summary: serde_json::Value =
            serde_json::from_str(&report.summary_json()).expect("summary is JSON");
        let mut ms = Vec::new();
        tier_flow_ms(&mut summary, |v| ms.push(v.as_f64().unwrap_or(f64::NAN)));
        ms
    }

    /// Everything a replay reports except the inter-token mean and spread, whose sums depend
    /// on the order workers push their gaps in, the time series' means (sums of spans), and
    /// the tiers' flow times ([`tier_flow_ms`]).
    fn observed(report: &Report) -> String {
        let r = &report.records;
        let mut summary: serde_json::Value =
            serde_json::from_str(&report.summary_json()).expect("summary is JSON");
        let itl = &mut summary["itl_ms"];
        itl["mean"] = serde_json::Value::Null;
        itl["std"] = serde_json::Value::Null;
        tier_flow_ms(&mut summary, |v| *v = serde_json::Value::Null);
        // Busy time sums the spans between loop iterations, which chaining merges: equal up to
        // rounding.
        for busy in summary["worker_busy_ms"].as_array_mut().expect("a list") {
            *busy = serde_json::json!((busy.as_f64().expect("ms") * 1e6).round());
        }
        format!(
            "{:?}",
            (
                (&r.first_admit_ms, &r.first_token_ms, &r.second_token_ms),
                (
                    &r.last_token_ms,
                    &r.reused_tokens,
                    &r.worker,
                    &r.decode_worker
                ),
                (&r.transfer_start_ms, &r.transfer_end_ms, &r.status),
                (
                    &r.preemptions,
                    report
                        .timeseries
                        .get("kv_blocks_used")
                        .map(|b| (b.min, b.max))
                ),
                summary.to_string(),
                report.breakdown_json(),
            )
        )
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(200))]

        /// Chaining plain decode passes outside the event loop gives the replay the loop gives,
        /// and planning a pass as the one before it ends gives the same replay bit for bit.
        #[test]
        fn chained_passes_change_nothing(
            rows in prop::collection::vec((0u32..60, 1u32..700, 1u32..200, 0u64..6), 1..40),
            sessions in 0usize..4,
            concurrency in prop::option::of(1u32..4),
            workers in 1u32..4,
            dp in 1u32..3,
            disaggregated in any::<bool>(),
            kv_aware in any::<bool>(),
            block_size in 2u32..24,
            num_gpu_blocks in 60u32..400,
            max_num_seqs in 1u32..9,
            (fifo, line_rate, first_decode_pass, missing, sglang) in any::<(bool, bool, bool, bool, bool)>(),
            (explain, vllm_async) in any::<(bool, bool)>(),
            tiers in prop::option::of((1u32..64, prop::option::of(1u32..128), any::<(bool, bool)>())),
        ) {
            let tbs = 32;
            let (mut arrival, mut input, mut output) = (vec![], vec![], vec![]);
            let (mut offsets, mut ids) = (vec![0u64], vec![]);
            let mut t = 0.0;
            for (k, &(gap, prompt, out, family)) in rows.iter().enumerate() {
                t += f64::from(gap);
                arrival.push(t);
                input.push(prompt);
                output.push(out);
                // Requests of one family share a prefix; the rest of each prompt is its own.
                for b in 0..u64::from(prompt.div_ceil(tbs)) {
                    ids.push(if b < 3 { family * 1000 + b } else { 1_000_000 * (k as u64 + 1) + b });
                }
                offsets.push(ids.len() as u64);
            }
            // Request k is a turn of session k % sessions (sessions first appear in order).
            let session: Vec<i64> = (0..rows.len()).map(|k| (k % sessions.max(1)) as i64).collect();
            let delay: Vec<f64> = (0..rows.len())
                .map(|k| if k < sessions || k % 2 == 0 { f64::NAN } else { (k % 7) as f64 })
                .collect();
            let with_sessions = sessions > 0;
            let workload = Workload {
                arrival_ms: &arrival,
                input_length: &input,
                output_length: &output,
                hash_offsets: &offsets,
                hash_ids: &ids,
                trace_block_size: tbs,
                session: with_sessions.then_some(&session[..]),
                delay_ms: with_sessions.then_some(&delay[..]),
            };
            let offload = tiers.map_or(String::new(), |(g2, g3, (shared, recompute))| {
                let g3 = g3.map_or(String::new(), |g3| format!(r#","g3_blocks":{g3},"g3_shared":{shared}"#));
                let in_flight = if recompute { "recompute" } else { "wait" };
                format!(r#","offload":{{"g2_blocks":{g2}{g3},"g1_g2_gbps":0.01,"g2_g3_gbps":0.005,
                            "in_flight":"{in_flight}"}}"#)
            });
            let closed = concurrency.map_or(String::new(), |c| format!(r#","concurrency":{c}"#));
            let mode = if disaggregated {
                format!(r#""mode":"disaggregated","num_prefill_workers":{workers},"num_decode_workers":{workers}"#)
            } else {
                format!(r#""num_workers":{workers}"#)
            };
            let router = if kv_aware { "kv_aware" } else { "round_robin" };
            let preemption = if fifo { "fifo" } else { "lifo" };
            let link = if line_rate { "line_rate" } else { "max_min" };
            let first_token = if first_decode_pass { "first_decode_pass" } else { "kv_arrival" };
            let sizing = if missing { "destination_missing" } else { "full_prompt" };
            // The SGLang flavour, its page size 1 to 3 tokens.
            let flavour = if sglang {
                format!(r#""backend":"sglang","page_size":{},"chunked_prefill_size":256,"max_prefill_tokens":512"#,
                        block_size % 3 + 1)
            } else {
                format!(r#""max_num_batched_tokens":256,"preemption_mode":"{preemption}",
                           "async_scheduling":{vllm_async}"#)
            };
            let config = SimConfig::from_json(&format!(
                r#"{{"cluster":{{{mode},"router":"{router}"{closed}}},
                    "engine":{{"block_size":{block_size},"num_gpu_blocks":{num_gpu_blocks},
                               "data_parallel_size":{dp},"max_num_seqs":{max_num_seqs},{flavour}}},
                    "kv_transfer":{{"kv_bytes_per_token":100000,"bandwidth_gbps":1,
                                    "link_model":"{link}","first_token":"{first_token}",
                                    "sizing":"{sizing}"}},
                    "report":{{"sample_interval_ms":50,"explain":{explain}}}{offload}}}"#
            ))
            .unwrap();
            let chained = run(&workload, None, &config, None, Shortcuts::ALL).unwrap();
            let stepped = run(&workload, None, &config, None, Shortcuts {
                chain_plain_passes: false,
                continue_plain_passes: false,
            }).unwrap();
            prop_assert_eq!(observed(&chained), observed(&stepped));
            // Planning a pass as the one before it ends changes nothing at all, bit for bit.
            let planned_in_loop = run(&workload, None, &config, None, Shortcuts {
                chain_plain_passes: true,
                continue_plain_passes: false,
            }).unwrap();
            prop_assert_eq!(format!("{planned_in_loop:?}"), format!("{chained:?}"));
            // A prepared workload's tables give the same report, the second replay too.
            let prepared = PreparedWorkload::new(&workload).unwrap();
            for _ in 0..2 {
                let again = replay_prepared(&prepared, &config, None).unwrap();
                prop_assert_eq!(observed(&again), observed(&chained));
                prop_assert_eq!(again.summary_json(), chained.summary_json());
            }
            let (a, b) = (chained.summary.itl_ms.mean, stepped.summary.itl_ms.mean);
            prop_assert!(a.zip(b).is_none_or(|(a, b)| (a - b).abs() <= 1e-9 * b.abs()));
            let (a, b) = (tier_flows(&chained), tier_flows(&stepped));
            prop_assert_eq!(a.len(), b.len());
            for (a, b) in a.iter().zip(&b) {
                prop_assert!((a - b).abs() <= 1e-9 * b.abs(), "tier flow ms {} vs {}", a, b);
            }
            // Explaining a replay changes none of it, and each request's stages add up to its
            // time to first token.
            let mut plain = config.clone();
            plain.report.explain = !explain;
            let other = run(&workload, None, &plain, None, Shortcuts::ALL).unwrap();
            prop_assert_eq!(other.summary_json(), chained.summary_json());
            if let Some((_, stages)) = &chained.breakdown {
                for (i, ttft) in chained.derived.ttft_ms.iter().enumerate() {
                    let sum: f64 = stages.iter().map(|s| s[i]).sum();
                    prop_assert!(ttft.is_nan() == sum.is_nan());
                    prop_assert!(ttft.is_nan() || (sum - ttft).abs() <= 1e-9 * ttft.abs().max(1.0),
                                 "request {}: stages {:?} sum to {} != ttft {}", i,
                                 stages.iter().map(|s| s[i]).collect::<Vec<_>>(), sum, ttft);
                    if !ttft.is_nan() {
                        prop_assert!(stages.iter().all(|s| s[i] >= -1e-9), "negative stage {:?} request {} sglang {} disagg {} tiers {:?} first_decode_pass {}", stages.iter().map(|s| s[i]).collect::<Vec<_>>(), i, sglang, disaggregated, tiers, first_decode_pass);
                    }
                }
            }
        }
    }
}
