"""Type stubs of the Rust extension ``dynosim._core`` (see rust/dynosim-py)."""

from typing import Any

import numpy as np
import numpy.typing as npt

#: The most requests one workload may hold (any kind: trace, synthetic, columns).
MAX_REQUESTS: int
#: The most prompt hash ids one workload may hold.
MAX_HASH_IDS: int
#: Whether this build was compiled profile-guided (the build backend's training replays).
PROFILE_GUIDED: bool

class Control:
    """A replay's count of finished requests and its stop switch, shared with other threads.
    One control may serve many replays at once; interrupting it stops them all."""

    def __init__(self) -> None: ...
    @property
    def done(self) -> int:
        """Requests finished (completed or rejected) so far."""
    @property
    def interrupted(self) -> bool:
        """Whether :meth:`interrupt` was called."""
    def interrupt(self) -> None:
        """Stop every replay holding this control: each raises ``KeyboardInterrupt``."""

def default_config_json() -> str:
    """The default configuration as JSON: the single source of every default."""

def normalize_config_json(config_json: str) -> str:
    """Validate a configuration document (raises ConfigError); returns it with defaults."""

def ttft_stage_names() -> list[str]:
    """The stages of a request's time to first token an explained replay reports, in order."""

def reject_reason_names() -> list[str]:
    """Machine names of rejection reasons, indexed by a report's reject_reason codes."""

def replay(columns: Any, config_json: str, control: Control | None = None) -> dict[str, Any]:
    """Replay request columns (a ``TraceColumns``, or any object with its attributes: times in
    ms, lengths in tokens; or a ``PreparedWorkload``, replayed as ``replay_prepared`` does)
    without the GIL.

    ``session`` (-1: none) and ``delay_ms`` (NaN: the timestamp gap) make rows turns of
    sessions: turn n+1 is sent when turn n ends plus its delay.

    Returns ``summary_json``, ``config_json``, ``requests`` (dict of 1-D arrays, one entry per
    request) and ``timeseries`` (``sample_interval_ms``, ``interval_ms``, ``time_ms`` and per
    series a dict of ``mean``, ``min`` and ``max`` arrays over at most 2,048 buckets). With
    offload tiers (``offload.g2_blocks`` set) ``requests`` also has ``g1_hit_blocks``,
    ``g2_hit_blocks``, ``g3_hit_blocks``, ``onboard_start_ms`` and ``onboard_end_ms``,
    ``timeseries`` has ``g2_blocks_used``, ``g3_blocks_used`` and ``onboarding`` (all ranks),
    and the summary an ``offload`` section; without tiers none
    of these keys exist. Raises WorkloadError, ConfigError or SimulationError from
    ``dynosim.errors``; ``KeyboardInterrupt`` when ``control`` is interrupted or on Ctrl-C
    (the replay stops within milliseconds).
    """

def read_mooncake(
    data: bytes, path: str, trace_block_size: int
) -> tuple[PreparedWorkload, tuple[int, int, int] | None]:
    """Read a Mooncake JSONL trace's bytes (``path`` only names it in messages) into the
    requests a replay reads, held by the core: rows in arrival order (a stable sort by
    timestamp), arrivals shifted so the first is at 0 ms, sessions numbered 0, 1, ... in order
    of first arrival, checked by the workload's rules. ``trace_block_size`` is prompt tokens
    per hash id.

    Also returns the rows the file had out of arrival order: ``(how many, rows in the file,
    file line of the first)``, or None. A bad file raises WorkloadError naming file, line,
    field and value; when it refuses a request of a file that was out of order, the error's
    ``late`` holds the same tuple (the refusal may be about the order the sort made).
    """

def arrival_order(
    times: npt.NDArray[np.int64],
) -> tuple[npt.NDArray[np.uint32], int, int] | None:
    """The indices putting rows of timestamps ``times`` (file order) in arrival order (a
    stable sort), how many rows arrive earlier than a row above them, and the index of the
    first of those; None when the rows already are in order."""

def max_min_rates(
    flows: list[list[int]], capacities: list[float], caps: list[float] | None = None
) -> npt.NDArray[np.float64]:
    """Max-min fair rates of flows (link-id lists) over link capacities, in their unit."""

def validate_workload(columns: Any) -> None:
    """Check request columns (a ``TraceColumns``, or any object with its attributes) by the
    core's rules (the ones a replay applies).

    Raises WorkloadError naming the first bad request; the error also has ``request`` (its
    index, None for a shape error) and ``detail`` (the message without the request prefix).
    """

def resolve_config_json(config_json: str) -> str:
    """The configuration as the replay reads it, as JSON: ``roles`` (each with ``role``,
    ``workers``, ``gpus_per_worker``, ``engine``, ``timing``, ``engine_path``,
    ``timing_path``), ``kv_transfer`` (``bytes_per_token``, ``send_gbps``, ``recv_gbps``,
    ``link_model``, ``sizing``, ``first_token``), ``num_workers`` and ``num_gpus``."""

def replay_bytes_estimate(config_json: str, requests: int, tokens: int) -> int:
    """The most bytes one replay of the configuration takes for a workload of ``requests``
    requests of ``tokens`` prompt and output tokens (its columns not included)."""

def kv_shape_bytes_per_token(shape_json: str, tp: int) -> int:
    """KV bytes of one token on one GPU of a ``tp``-way tensor-parallel rank for a
    ``kv_shape`` document (``tp`` 1: the whole model's)."""

def engine_defaults_json() -> str:
    """Every engine flavour's settings at their defaults, by backend name, as JSON."""

def engine_pass_token_budget(engine_json: str) -> int:
    """The token budget of one pass of an engine section: vLLM's max_num_batched_tokens,
    TensorRT-LLM's max_num_tokens, SGLang's max_prefill_tokens."""

def aic_timing_defaults_json() -> str:
    """The fields an ``aic`` timing section may leave out, with their values, as JSON."""

def config_limits_json() -> str:
    """The upper bounds of configuration sizes (``max_workers``, ``max_parallel``, ...), as
    JSON; the core's checks use the same."""

class PreparedWorkload:
    """Requests the core holds: columns copied in once by the constructor (checked by the
    core's rules, raising WorkloadError), or a Mooncake file's requests (``read_mooncake``),
    with their prompt block identities computed once per block size and shared by every replay
    of them, from any thread. Pickling and copying ship the columns."""

    def __init__(self, columns: Any) -> None: ...
    def __len__(self) -> int:
        """Number of requests."""
    @property
    def tables_held(self) -> int:
        """Block identity tables held (one per block size replayed so far)."""
    @property
    def trace_block_size(self) -> int:
        """Prompt tokens per trace hash id."""
    def columns(self) -> dict[str, npt.NDArray[Any] | None]:
        """The columns as read-only numpy arrays over the core's memory (no copy; each keeps
        this object alive), named as ``TraceColumns``' fields; ``session`` and ``delay_ms``
        are None without sessions."""

def replay_prepared(
    prepared: PreparedWorkload, config_json: str, control: Control | None = None
) -> dict[str, Any]:
    """Replay a prepared workload without the GIL; returns what ``replay`` returns, byte for
    byte the same."""

def replay_prepared_summary(
    prepared: PreparedWorkload, config_json: str, control: Control | None = None
) -> str:
    """Replay a prepared workload without the GIL and return only its summary JSON."""
