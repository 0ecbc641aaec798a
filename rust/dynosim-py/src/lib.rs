//! `dynosim._core`: the Python face of dynosim-core. It only converts types and errors and
//! releases the GIL while a replay runs; every decision lives in the core.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::mpsc::{channel, RecvTimeoutError};
use std::sync::Arc;
use std::time::Duration;

use dynosim_core::config::{AicTiming, EngineConfig, FlavourDefaults, KvShape};
use dynosim_core::links;
use dynosim_core::report::RejectReason;
use dynosim_core::time_series::Shape;
use dynosim_core::{
    Control as CoreControl, PreparedWorkload as CorePrepared, Report, SimConfig, SimError, Workload,
};
use numpy::{IntoPyArray, PyArray1, PyArrayMethods, PyReadonlyArray1, PyUntypedArrayMethods};
use pyo3::exceptions::PyKeyboardInterrupt;
use pyo3::prelude::*;
use pyo3::types::PyDict;

/// A replay allocates and frees tens of MB of short-lived vectors; the system allocator hands
/// the pages of each replay's thread arena back to the kernel, so the next replay faults them
/// in again (a fifth of a replay's time). mimalloc keeps freed pages for reuse.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// mimalloc's `purge_decommits` option (its place in the `mi_option_e` enum of mimalloc.h,
/// the same in mimalloc 2 and 3; the Rust constants name only some options).
const MI_OPTION_PURGE_DECOMMITS: libmimalloc_sys::mi_option_t = 5;

/// Free pages mimalloc purges once they have stayed idle a while (a planner's process between
/// replays, doing other work) go back lazily freed (`MADV_FREE`) instead of unmapped
/// (`MADV_DONTNEED`): the kernel takes them when memory runs short, and until then the next
/// replay reuses them without a page fault and the zeroing of a fresh page (a tenth of a
/// replay that follows other work). They count in the resident size until taken.
/// `MIMALLOC_PURGE_DECOMMITS` (or its older name `MIMALLOC_RESET_DECOMMITS`) in the
/// environment still decides.
fn purge_lazily() {
    let given = ["MIMALLOC_PURGE_DECOMMITS", "MIMALLOC_RESET_DECOMMITS"]
        .iter()
        .any(|name| std::env::var_os(name).is_some());
    if !given {
        // SAFETY: sets one integer option, which mimalloc reads at each purge.
        unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DECOMMITS, 0) };
    }
}

/// Raise `dynosim.errors.<class_name>(message)`, the one exception hierarchy of the package.
fn raise(py: Python<'_>, class_name: &str, message: String) -> PyErr {
    match py
        .import("dynosim.errors")
        .and_then(|m| m.getattr(class_name))
    {
        Ok(class) => PyErr::from_value(
            class
                .call1((message,))
                .unwrap_or_else(|e| e.into_value(py).into_bound(py).into_any()),
        ),
        Err(e) => e,
    }
}

/// A `WorkloadError` that also carries the request index (`request`, None for a shape error)
/// and the message without its prefix (`detail`), so a trace reader can name the file line.
fn workload_err(py: Python<'_>, err: SimError) -> PyErr {
    let (request, detail) = match &err {
        SimError::Workload { request, message } => (Some(*request), message.clone()),
        SimError::WorkloadShape(message) => (None, message.clone()),
        _ => return to_py_err(py, err),
    };
    let exc = raise(py, "WorkloadError", err.to_string());
    let value = exc.value(py);
    match value
        .setattr("request", request)
        .and_then(|()| value.setattr("detail", detail))
    {
        Ok(()) => exc,
        Err(e) => e,
    }
}

fn to_py_err(py: Python<'_>, err: SimError) -> PyErr {
    // A stop asked through a `Control` (by a signal, or a sweep being cancelled) is Python's
    // own way of saying the user interrupted.
    if let SimError::Interrupted { .. } = err {
        return PyKeyboardInterrupt::new_err(err.to_string());
    }
    let class = match err {
        SimError::Config { .. } | SimError::ConfigFormat(_) => "ConfigError",
        SimError::Workload { .. } | SimError::WorkloadShape(_) | SimError::Trace(_) => {
            "WorkloadError"
        }
        SimError::Internal(_) | SimError::Links(_) | SimError::Interrupted { .. } => {
            "SimulationError"
        }
    };
    raise(py, class, err.to_string())
}

/// A replay's count of finished requests and its stop switch, shared with other threads: the
/// replay keeps `done` current, and `interrupt()` stops it (it raises `KeyboardInterrupt`). One
/// control may serve many replays at once; interrupting it stops them all.
#[pyclass(frozen, module = "dynosim._core")]
struct Control {
    inner: Arc<CoreControl>,
}

#[pymethods]
impl Control {
    #[new]
    fn new() -> Self {
        Control {
            inner: Arc::new(CoreControl::new()),
        }
    }

    /// Requests finished (completed or rejected) so far.
    #[getter]
    fn done(&self) -> u64 {
        self.inner.finished()
    }

    /// Stop every replay holding this control.
    fn interrupt(&self) {
        self.inner.interrupt();
    }

    #[getter]
    fn interrupted(&self) -> bool {
        self.inner.is_interrupted()
    }
}

/// The default configuration as JSON: the single source of every default.
#[pyfunction]
fn default_config_json() -> String {
    SimConfig::default().to_json()
}

/// Every engine flavour's settings at their defaults, by backend name, as JSON (an engine's
/// unset flavour settings take these).
#[pyfunction]
fn engine_defaults_json() -> String {
    FlavourDefaults::all_json().to_string()
}

/// The token budget of one pass of an engine section (JSON): vLLM's max_num_batched_tokens,
/// TensorRT-LLM's max_num_tokens, SGLang's max_prefill_tokens.
#[pyfunction]
fn engine_pass_token_budget(py: Python<'_>, engine_json: &str) -> PyResult<u32> {
    let engine: EngineConfig = serde_json::from_str(engine_json)
        .map_err(|e| to_py_err(py, SimError::ConfigFormat(e.to_string())))?;
    Ok(engine.pass_token_budget())
}

/// The upper bounds of configuration sizes, as JSON (`max_workers`, ...).
#[pyfunction]
fn config_limits_json() -> String {
    dynosim_core::config::limits::limits_json().to_string()
}

/// The JSON of the aic timing fields a section may leave out, with their values.
#[pyfunction]
fn aic_timing_defaults_json() -> String {
    AicTiming::defaults_json().to_string()
}

/// The configuration as the replay reads it (roles with their engine, timing and where those
/// came from; effective KV-transfer settings; workers and GPUs), as JSON.
#[pyfunction]
fn resolve_config_json(py: Python<'_>, config_json: &str) -> PyResult<String> {
    let config = SimConfig::from_json(config_json).map_err(|e| to_py_err(py, e))?;
    serde_json::to_string(&config.resolved())
        .map_err(|e| raise(py, "SimulationError", e.to_string()))
}

/// The most bytes one replay of the configuration takes for a workload of `requests`
/// requests of `tokens` prompt and output tokens (the workload's columns not included).
#[pyfunction]
fn replay_bytes_estimate(
    py: Python<'_>,
    config_json: &str,
    requests: u64,
    tokens: u64,
) -> PyResult<u64> {
    let config = SimConfig::from_json(config_json).map_err(|e| to_py_err(py, e))?;
    Ok(dynosim_core::replay::memory::replay_bytes(
        &config, requests, tokens,
    ))
}

/// KV bytes of one token on one GPU of a `tp`-way tensor-parallel rank, for a `kv_shape`
/// document (checked by the core's rules first).
#[pyfunction]
fn kv_shape_bytes_per_token(py: Python<'_>, shape_json: &str, tp: i64) -> PyResult<u64> {
    KvShape::from_json(shape_json)
        .and_then(|shape| shape.checked_bytes_per_token("kv_shape", tp))
        .map_err(|e| to_py_err(py, e))
}

/// The request columns of a `dynosim.workload.TraceColumns` (any object with its attributes),
/// borrowed from numpy without copying.
#[derive(FromPyObject)]
struct Columns<'py> {
    #[pyo3(attribute)]
    arrival_ms: PyReadonlyArray1<'py, f64>,
    #[pyo3(attribute)]
    input_length: PyReadonlyArray1<'py, u32>,
    #[pyo3(attribute)]
    output_length: PyReadonlyArray1<'py, u32>,
    #[pyo3(attribute)]
    hash_offsets: PyReadonlyArray1<'py, u64>,
    #[pyo3(attribute)]
    hash_ids: PyReadonlyArray1<'py, u64>,
    #[pyo3(attribute)]
    trace_block_size: u32,
    #[pyo3(attribute)]
    session: Option<PyReadonlyArray1<'py, i64>>,
    #[pyo3(attribute)]
    delay_ms: Option<PyReadonlyArray1<'py, f64>>,
}

impl Columns<'_> {
    fn workload(&self) -> PyResult<Workload<'_>> {
        Ok(Workload {
            arrival_ms: self.arrival_ms.as_slice()?,
            input_length: self.input_length.as_slice()?,
            output_length: self.output_length.as_slice()?,
            hash_offsets: self.hash_offsets.as_slice()?,
            hash_ids: self.hash_ids.as_slice()?,
            trace_block_size: self.trace_block_size,
            session: self.session.as_ref().map(|a| a.as_slice()).transpose()?,
            delay_ms: self.delay_ms.as_ref().map(|a| a.as_slice()).transpose()?,
        })
    }
}

/// Check request columns by the core's rules; raises `WorkloadError` (with `request` and
/// `detail`) naming the first bad request.
#[pyfunction]
fn validate_workload(py: Python<'_>, columns: Columns<'_>) -> PyResult<()> {
    columns
        .workload()?
        .validate()
        .map_err(|e| workload_err(py, e))
}

/// Validate a configuration document; returns it normalised (defaults filled in) as JSON.
#[pyfunction]
fn normalize_config_json(py: Python<'_>, config_json: &str) -> PyResult<String> {
    SimConfig::from_json(config_json)
        .map(|c| c.to_json())
        .map_err(|e| to_py_err(py, e))
}

/// Machine names of rejection reasons, indexed by the `reject_reason` codes of a report.
/// The stages of a request's time to first token an explained replay reports, in order
/// (`requests["ttft_<stage>_ms"]`).
#[pyfunction]
fn ttft_stage_names() -> Vec<&'static str> {
    dynosim_core::report::TTFT_STAGES.to_vec()
}

#[pyfunction]
fn reject_reason_names() -> Vec<&'static str> {
    RejectReason::ALL.iter().map(|r| r.name()).collect()
}

/// Max-min fair rates of `flows` (each a list of link ids) over links of the given
/// `capacities`, optionally capped per flow; rates come in the capacities' unit.
#[pyfunction]
#[pyo3(signature = (flows, capacities, caps=None))]
fn max_min_rates<'py>(
    py: Python<'py>,
    flows: Vec<Vec<usize>>,
    capacities: Vec<f64>,
    caps: Option<Vec<f64>>,
) -> PyResult<Bound<'py, PyArray1<f64>>> {
    links::max_min_rates(&flows, &capacities, caps.as_deref())
        .map(|rates| rates.into_pyarray(py))
        .map_err(|e| raise(py, "ConfigError", e.to_string()))
}

/// A panic (a bug) as a `SimulationError` rather than a crashed interpreter.
fn panic_err(py: Python<'_>, panic: Box<dyn std::any::Any + Send>) -> PyErr {
    let what = panic
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "unknown panic".into());
    raise(
        py,
        "SimulationError",
        format!("internal simulation error (a bug, please report it): {what}"),
    )
}

/// How often a thread waiting for a replay runs Python's signal handlers.
const SIGNAL_POLL: Duration = Duration::from_millis(20);

/// Stack of the worker thread: what a Python thread gets on Linux (the main thread's 8 MiB).
const WORKER_STACK: usize = 8 << 20;

/// Run `f` (a replay, a parse) without the GIL, and so that Ctrl-C stops it: `f` runs on a
/// thread of its own while this one wakes every `SIGNAL_POLL` to run Python's signal handlers
/// (they run in the main thread only; elsewhere the check does nothing). When a handler raises
/// (`KeyboardInterrupt`), `control` is interrupted, `f` stops at its next look at it (a replay
/// within a turn of its event loop), and the handler's exception is raised. Errors of `f`
/// become the matching `dynosim.errors` class, a panic (a bug) a `SimulationError` rather than
/// a crashed interpreter.
fn interruptible<T: Send>(
    py: Python<'_>,
    control: &CoreControl,
    f: impl FnOnce() -> Result<T, SimError> + Send,
) -> PyResult<T> {
    let (tx, rx) = channel();
    std::thread::scope(|scope| {
        std::thread::Builder::new()
            .name("dynosim-core".into())
            .stack_size(WORKER_STACK)
            .spawn_scoped(scope, move || {
                // The receiver waits until this is sent; it cannot be gone.
                let _ = tx.send(catch_unwind(AssertUnwindSafe(f)));
            })
            .map_err(|e| {
                raise(
                    py,
                    "SimulationError",
                    format!("cannot start a worker thread: {e}"),
                )
            })?;
        let mut signalled: Option<PyErr> = None;
        let mut rx = rx;
        let outcome = loop {
            // The receiver goes into the GIL-free closure and back (it is Send, not Sync).
            let (received, back) = py.detach(move || (rx.recv_timeout(SIGNAL_POLL), rx));
            rx = back;
            match received {
                Ok(outcome) => break outcome,
                Err(RecvTimeoutError::Timeout) => {
                    if signalled.is_none() {
                        if let Err(e) = py.check_signals() {
                            control.interrupt();
                            signalled = Some(e);
                        }
                    }
                }
                Err(RecvTimeoutError::Disconnected) => {
                    return Err(raise(
                        py,
                        "SimulationError",
                        "internal simulation error: the worker thread ended without a result"
                            .into(),
                    ))
                }
            }
        };
        if let Some(e) = signalled {
            return Err(e);
        }
        match outcome {
            Ok(result) => result.map_err(|e| to_py_err(py, e)),
            Err(panic) => Err(panic_err(py, panic)),
        }
    })
}

/// The control a replay runs under: the caller's, or its own (so Ctrl-C can still stop it).
fn control_of(control: Option<PyRef<'_, Control>>) -> Arc<CoreControl> {
    control.map_or_else(|| Arc::new(CoreControl::new()), |c| c.inner.clone())
}

/// Rows of a file out of arrival order: how many, of how many, and the first one's line.
type LateRows = (usize, usize, u64);

/// Read a Mooncake JSONL trace's bytes into the requests a replay reads (arrival order, first
/// at 0 ms, sessions by first arrival, checked); returns them with the rows the file had out
/// of arrival order (`(late rows, rows, first late line)`, or None), which a `WorkloadError`
/// refusing a request also carries as its `late`. See `_core.pyi`.
#[pyfunction]
fn read_mooncake<'py>(
    py: Python<'py>,
    data: &[u8],
    path: &str,
    trace_block_size: u64,
) -> PyResult<(PreparedWorkload, Option<LateRows>)> {
    let control = CoreControl::new();
    let read = interruptible(py, &control, || {
        dynosim_core::read_mooncake(data, path, trace_block_size, Some(&control))
    })?;
    let late = read.late.map(|l| (l.rows, l.of, l.first_line));
    match read.requests {
        Ok(requests) => Ok((
            PreparedWorkload {
                inner: Arc::new(requests),
            },
            late,
        )),
        Err(e) => {
            let exc = to_py_err(py, e);
            exc.value(py).setattr("late", late)?;
            Err(exc)
        }
    }
}

/// An order of rows, how many rows were late, and the first of them.
type Ordered<'py> = (Bound<'py, PyArray1<u32>>, usize, usize);

/// The order putting rows of integer timestamps `times` (file order) in arrival order, with
/// how many rows were late and the index of the first; None when they already are in order.
#[pyfunction]
fn arrival_order<'py>(
    py: Python<'py>,
    times: PyReadonlyArray1<'py, i64>,
) -> PyResult<Option<Ordered<'py>>> {
    let times = times.as_slice()?;
    dynosim_core::workload::check_size(times.len() as u64, 0).map_err(|e| to_py_err(py, e))?;
    Ok(dynosim_core::arrival::arrival_order(times)
        .map(|(order, late)| (order.into_pyarray(py), late.rows, late.first)))
}

/// Replay request columns, or requests the core holds (a `PreparedWorkload`); see
/// `dynosim.replay` for the public API.
#[pyfunction]
#[pyo3(signature = (columns, config_json, control=None))]
fn replay<'py>(
    py: Python<'py>,
    columns: &Bound<'py, PyAny>,
    config_json: &str,
    control: Option<PyRef<'py, Control>>,
) -> PyResult<Bound<'py, PyDict>> {
    // Requests the core already holds are replayed as they are (numpy is not needed).
    if let Ok(prepared) = columns.cast::<PreparedWorkload>() {
        return replay_prepared(py, prepared.borrow(), config_json, control);
    }
    let columns: Columns<'py> = columns.extract()?;
    let config = SimConfig::from_json(config_json).map_err(|e| to_py_err(py, e))?;
    let workload = columns.workload()?;
    let control = control_of(control);
    let report = interruptible(py, &control, || {
        dynosim_core::replay(&workload, &config, Some(&control))
    })?;
    report_dict(py, report, &config)
}

/// Requests the core holds (columns copied in once, or a Mooncake file's requests), with their
/// block identities computed once per block size and shared by every replay of them (from any
/// thread).
#[pyclass(frozen, module = "dynosim._core")]
struct PreparedWorkload {
    inner: Arc<CorePrepared>,
}

#[pymethods]
impl PreparedWorkload {
    #[new]
    fn new(py: Python<'_>, columns: Columns<'_>) -> PyResult<Self> {
        let workload = columns.workload()?;
        let inner = CorePrepared::new(&workload).map_err(|e| workload_err(py, e))?;
        Ok(PreparedWorkload {
            inner: Arc::new(inner),
        })
    }

    /// Block identity tables held (one per block size replayed so far).
    #[getter]
    fn tables_held(&self) -> usize {
        self.inner.tables_held()
    }

    fn __len__(&self) -> usize {
        self.inner.workload().len()
    }

    /// Tokens per trace hash id.
    #[getter]
    fn trace_block_size(&self) -> u32 {
        self.inner.workload().trace_block_size
    }

    /// The columns as read-only numpy arrays over the core's memory (no copy; each keeps this
    /// object alive), by the names of `TraceColumns`' fields; `session` and `delay_ms` are None
    /// without sessions.
    fn columns<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyDict>> {
        let py = slf.py();
        let w = slf.get().inner.workload();
        let out = PyDict::new(py);
        out.set_item("arrival_ms", borrowed(slf, w.arrival_ms))?;
        out.set_item("input_length", borrowed(slf, w.input_length))?;
        out.set_item("output_length", borrowed(slf, w.output_length))?;
        out.set_item("hash_offsets", borrowed(slf, w.hash_offsets))?;
        out.set_item("hash_ids", borrowed(slf, w.hash_ids))?;
        out.set_item("session", w.session.map(|c| borrowed(slf, c)))?;
        out.set_item("delay_ms", w.delay_ms.map(|c| borrowed(slf, c)))?;
        Ok(out)
    }

    /// Pickling (and copying) ships the columns; the receiver holds its own copy.
    fn __reduce__<'py>(slf: &Bound<'py, Self>) -> PyResult<Reduced<'py>> {
        let py = slf.py();
        let columns = py
            .import("types")?
            .getattr("SimpleNamespace")?
            .call((), Some(&Self::columns(slf)?))?;
        columns.setattr(
            "trace_block_size",
            slf.get().inner.workload().trace_block_size,
        )?;
        Ok((slf.get_type().into_any(), (columns,)))
    }
}

/// What `__reduce__` returns: a class and the arguments that build the object again.
type Reduced<'py> = (Bound<'py, PyAny>, (Bound<'py, PyAny>,));

/// A read-only numpy array over `column`, which `owner` holds and keeps alive.
fn borrowed<'py, T: numpy::Element>(
    owner: &Bound<'py, PreparedWorkload>,
    column: &[T],
) -> Bound<'py, PyArray1<T>> {
    let view = numpy::ndarray::ArrayView1::from(column);
    // SAFETY: the columns live in the frozen `owner` (behind an `Arc`, never changed or moved
    // after construction), and the array holds a reference to `owner`. It is made read-only
    // before Python sees it, so nothing writes through it.
    unsafe {
        let array = PyArray1::borrow_from_array(&view, owner.clone().into_any());
        (*array.as_array_ptr()).fields.flags &= !numpy::npyffi::NPY_ARRAY_WRITEABLE;
        array
    }
}

/// Replay a prepared workload; returns what `replay` returns.
#[pyfunction]
#[pyo3(signature = (prepared, config_json, control=None))]
fn replay_prepared<'py>(
    py: Python<'py>,
    prepared: PyRef<'py, PreparedWorkload>,
    config_json: &str,
    control: Option<PyRef<'py, Control>>,
) -> PyResult<Bound<'py, PyDict>> {
    let config = SimConfig::from_json(config_json).map_err(|e| to_py_err(py, e))?;
    let inner = prepared.inner.clone();
    let control = control_of(control);
    let report = interruptible(py, &control, || {
        dynosim_core::replay_prepared(&inner, &config, Some(&control))
    })?;
    report_dict(py, report, &config)
}

/// Replay a prepared workload and return only the summary JSON (no per-request arrays).
#[pyfunction]
#[pyo3(signature = (prepared, config_json, control=None))]
fn replay_prepared_summary<'py>(
    py: Python<'py>,
    prepared: PyRef<'py, PreparedWorkload>,
    config_json: &str,
    control: Option<PyRef<'py, Control>>,
) -> PyResult<String> {
    let config = SimConfig::from_json(config_json).map_err(|e| to_py_err(py, e))?;
    let inner = prepared.inner.clone();
    let control = control_of(control);
    interruptible(py, &control, || {
        dynosim_core::replay_prepared(&inner, &config, Some(&control)).map(|r| r.summary_json())
    })
}

/// A report as the dict `replay` returns.
fn report_dict<'py>(
    py: Python<'py>,
    report: Report,
    config: &SimConfig,
) -> PyResult<Bound<'py, PyDict>> {
    let out = PyDict::new(py);
    out.set_item("summary_json", report.summary_json())?;
    out.set_item("config_json", config.to_json())?;
    if let Some(json) = report.breakdown_json() {
        out.set_item("breakdown_json", json)?;
    }
    let r = report.records;
    let d = report.derived;
    let requests = PyDict::new(py);
    requests.set_item("arrival_ms", r.arrival_ms.into_pyarray(py))?;
    requests.set_item("first_admit_ms", r.first_admit_ms.into_pyarray(py))?;
    requests.set_item("first_token_ms", r.first_token_ms.into_pyarray(py))?;
    requests.set_item("second_token_ms", r.second_token_ms.into_pyarray(py))?;
    requests.set_item("last_token_ms", r.last_token_ms.into_pyarray(py))?;
    requests.set_item("ttft_ms", d.ttft_ms.into_pyarray(py))?;
    requests.set_item("ttst_ms", d.ttst_ms.into_pyarray(py))?;
    requests.set_item("tpot_ms", d.tpot_ms.into_pyarray(py))?;
    requests.set_item("e2e_ms", d.e2e_ms.into_pyarray(py))?;
    requests.set_item("input_length", r.input_length.into_pyarray(py))?;
    requests.set_item("output_length", r.output_length.into_pyarray(py))?;
    requests.set_item("reused_tokens", r.reused_tokens.into_pyarray(py))?;
    requests.set_item("worker", r.worker.into_pyarray(py))?;
    requests.set_item("decode_worker", r.decode_worker.into_pyarray(py))?;
    requests.set_item("transfer_bytes", r.transfer_bytes.into_pyarray(py))?;
    requests.set_item("transfer_start_ms", r.transfer_start_ms.into_pyarray(py))?;
    requests.set_item("transfer_end_ms", r.transfer_end_ms.into_pyarray(py))?;
    requests.set_item("status", r.status.into_pyarray(py))?;
    requests.set_item("reject_reason", r.reject_reason.into_pyarray(py))?;
    requests.set_item("preemptions", r.preemptions.into_pyarray(py))?;
    // Offload-tier columns exist only with tiers, so replays without them are unchanged.
    let tiers = config.offload.enabled();
    if tiers {
        requests.set_item("g1_hit_blocks", r.g1_hit_blocks.into_pyarray(py))?;
        requests.set_item("g2_hit_blocks", r.g2_hit_blocks.into_pyarray(py))?;
        requests.set_item("g3_hit_blocks", r.g3_hit_blocks.into_pyarray(py))?;
        requests.set_item("onboard_start_ms", r.onboard_start_ms.into_pyarray(py))?;
        requests.set_item("onboard_end_ms", r.onboard_end_ms.into_pyarray(py))?;
    }
    // An explained replay: where its time went, and each request's TTFT by stage.
    if let Some((_, stages)) = report.breakdown {
        for (name, column) in dynosim_core::report::TTFT_STAGES.iter().zip(stages) {
            requests.set_item(format!("ttft_{name}_ms"), column.into_pyarray(py))?;
        }
    }
    out.set_item("requests", requests)?;
    // Each series as {"mean", "min", "max"} over the buckets; a series with a column per
    // worker or link is 2-D (buckets x columns).
    let ts = report.timeseries;
    let buckets = ts.len();
    let series = PyDict::new(py);
    series.set_item("sample_interval_ms", ts.sample_interval_ms)?;
    series.set_item("interval_ms", ts.interval_ms())?;
    series.set_item("time_ms", ts.time_ms().into_pyarray(py))?;
    for (name, b) in ts.series() {
        let part = PyDict::new(py);
        for (key, values) in [("mean", b.mean), ("min", b.min), ("max", b.max)] {
            let array = values.into_pyarray(py);
            match b.shape {
                Shape::Scalar => part.set_item(key, array)?,
                Shape::Columns(n) => part.set_item(key, array.reshape([buckets, n])?)?,
            }
        }
        series.set_item(name, part)?;
    }
    out.set_item("timeseries", series)?;
    Ok(out)
}

#[pymodule]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    purge_lazily();
    m.add_class::<Control>()?;
    m.add("MAX_REQUESTS", dynosim_core::workload::MAX_REQUESTS)?;
    m.add("MAX_HASH_IDS", dynosim_core::workload::MAX_HASH_IDS)?;
    // Set by the build backend when it compiles with a training profile.
    m.add(
        "PROFILE_GUIDED",
        option_env!("DYNOSIM_PROFILE_GUIDED") == Some("1"),
    )?;
    m.add_class::<PreparedWorkload>()?;
    m.add_function(wrap_pyfunction!(replay_prepared, m)?)?;
    m.add_function(wrap_pyfunction!(replay_prepared_summary, m)?)?;
    m.add_function(wrap_pyfunction!(default_config_json, m)?)?;
    m.add_function(wrap_pyfunction!(normalize_config_json, m)?)?;
    m.add_function(wrap_pyfunction!(reject_reason_names, m)?)?;
    m.add_function(wrap_pyfunction!(ttft_stage_names, m)?)?;
    m.add_function(wrap_pyfunction!(replay, m)?)?;
    m.add_function(wrap_pyfunction!(max_min_rates, m)?)?;
    m.add_function(wrap_pyfunction!(read_mooncake, m)?)?;
    m.add_function(wrap_pyfunction!(arrival_order, m)?)?;
    m.add_function(wrap_pyfunction!(validate_workload, m)?)?;
    m.add_function(wrap_pyfunction!(resolve_config_json, m)?)?;
    m.add_function(wrap_pyfunction!(kv_shape_bytes_per_token, m)?)?;
    m.add_function(wrap_pyfunction!(replay_bytes_estimate, m)?)?;
    m.add_function(wrap_pyfunction!(aic_timing_defaults_json, m)?)?;
    m.add_function(wrap_pyfunction!(engine_defaults_json, m)?)?;
    m.add_function(wrap_pyfunction!(engine_pass_token_budget, m)?)?;
    m.add_function(wrap_pyfunction!(config_limits_json, m)?)?;
    Ok(())
}
