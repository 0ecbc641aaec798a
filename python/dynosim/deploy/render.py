"""Render a simulated deployment as a Kubernetes DynamoGraphDeployment (DGD) with AIConfigurator.

A :class:`Candidate` is the deployment a planner simulated: serving mode, model, GPU system,
backend and version, and per worker role its parallelism, replicas and batch limit.
:func:`render_dgd` passes it with the workload to AIConfigurator's generator (AIC, the ``aic``
extra) and returns the ``k8s_deploy.yaml`` AIC wrote, unchanged, in a :class:`RenderedManifest`.

Passthrough: the workload goes as it is to one lowering function, :func:`lower_workload`, which
derives the lengths AIC needs from it (a synthetic workload's isl/osl, a trace's real rows) and
invents none. The engine limits the simulation assumed (context length, batch size, block size,
prefix caching) are handed to AIC with ``preserve_engine_limits`` so AIC keeps them, instead of
being patched into the manifest afterwards; the manifest itself is never edited.
"""

from __future__ import annotations

import importlib
import logging
import os
import re
import stat
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, ClassVar, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from dynosim.config import load_settings_file
from dynosim.errors import ConfigError, ManifestError, MissingExtraError, WorkloadError
from dynosim.workload import SyntheticWorkload, TraceWorkload

if TYPE_CHECKING:
    from dynosim.manifest import Problem

__all__ = [
    "Candidate",
    "LoweredWorkload",
    "RenderOptions",
    "RenderedManifest",
    "WorkerRole",
    "load_candidate",
    "lower_workload",
    "render_dgd",
]

#: The artifact of AIC's generator that holds the DGD manifest.
MANIFEST_ARTIFACT = "k8s_deploy.yaml"
_INSTALL_HINT = "pip install 'dynosim[aic]'"
_RFC1123_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
# AIC names the DGD "<prefix>-agg" or "<prefix>-disagg"; the name must stay a 63-char label.
_MAX_PREFIX = 63 - len("-disagg")


class _FieldProblems(ConfigError):
    """A ConfigError keeping its problems as (path below the model, message) pairs, so that a
    model holding this one can put its own path in front (pydantic validates a nested model
    through its ``__init__``)."""

    def __init__(self, root: str, problems: list[tuple[str, str]]) -> None:
        self.problems = problems
        super().__init__("; ".join(f"{root}.{p}: {m}" if p else m for p, m in problems))


def _config_error(exc: ValidationError, root: str) -> ConfigError:
    problems: list[tuple[str, str]] = []
    for err in exc.errors():
        where = ".".join(map(str, err["loc"]))
        cause = err.get("ctx", {}).get("error")
        if isinstance(cause, _FieldProblems):  # a nested model's report: re-rooted here
            problems += [(".".join(filter(None, (where, p))), m) for p, m in cause.problems]
        elif isinstance(cause, ConfigError):  # a complete message from one of our validators
            problems.append(("", str(cause)))
        elif err["type"] == "missing":
            problems.append((where, "required, but not given"))
        elif err["type"] == "extra_forbidden":
            problems.append((where, "unknown field"))
        else:
            problems.append((where, f"{err['msg']}, got {err['input']!r}"))
    return _FieldProblems(root, problems)


class _Typed(BaseModel):
    """Frozen, refusing unknown fields, and raising ConfigError (named from ``_root``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    _root: ClassVar[str]

    def __init__(self, **data: Any) -> None:
        try:
            super().__init__(**data)
        except ValidationError as exc:
            raise _config_error(exc, self._root) from None

    @classmethod
    def model_validate(cls, obj: Any, **kwargs: Any):  # type: ignore[override]
        try:
            return super().model_validate(obj, **kwargs)
        except ValidationError as exc:
            raise _config_error(exc, cls._root) from None


class WorkerRole(_Typed):
    """One worker role of a candidate (``agg``, or ``prefill`` / ``decode``): how many workers,
    how each spans GPUs, and how many requests each runs at once."""

    _root = "role"
    replicas: int = Field(ge=1, strict=True, description="Workers of this role.")
    tensor_parallel_size: int = Field(1, ge=1, strict=True, description="TP size of a worker.")
    pipeline_parallel_size: int = Field(1, ge=1, strict=True, description="PP size.")
    data_parallel_size: int = Field(1, ge=1, strict=True, description="DP ranks per worker.")
    max_batch_size: int = Field(
        ge=1,
        strict=True,
        description="Most requests one worker runs at once (vLLM max-num-seqs, SGLang "
        "max-running-requests, TensorRT-LLM max_batch_size).",
    )

    @property
    def gpus_per_worker(self) -> int:
        """GPUs one worker uses: tensor x pipeline x data parallel size."""
        return self.tensor_parallel_size * self.pipeline_parallel_size * self.data_parallel_size


class Candidate(_Typed):
    """A deployment that was simulated and is to be rendered.

    ``mode`` ``"agg"`` has one role, ``agg``; ``"disagg"`` has ``prefill`` and ``decode``.
    ``model`` is the Hugging Face id (or model path) served, ``system`` an AIC system name such
    as ``h200_sxm``, ``backend`` one of vllm, sglang, trtllm at ``backend_version`` (the engine
    release the deployment runs; it selects AIC's config templates). ``block_size`` is tokens per
    KV block; ``context_length`` the most tokens (prompt + output) one request may hold, or None
    to take it from the workload's longest request.
    """

    _root = "candidate"
    mode: Literal["agg", "disagg"]
    model: str = Field(min_length=1, strict=True)
    system: str = Field(min_length=1, strict=True)
    backend: Literal["vllm", "sglang", "trtllm"]
    backend_version: str = Field(min_length=1, strict=True)
    block_size: int = Field(ge=1, strict=True, description="Tokens per KV block.")
    context_length: int | None = Field(
        None, ge=1, strict=True, description="Most tokens per request; None: from the workload."
    )
    agg: WorkerRole | None = None
    prefill: WorkerRole | None = None
    decode: WorkerRole | None = None

    @model_validator(mode="after")
    def _roles_fit_mode(self) -> Candidate:
        need = ("agg",) if self.mode == "agg" else ("prefill", "decode")
        missing = [f"candidate.{r}" for r in need if getattr(self, r) is None]
        extra = [
            f"candidate.{r}"
            for r in ("agg", "prefill", "decode")
            if r not in need and getattr(self, r) is not None
        ]
        if missing or extra:
            what = "an agg candidate has an agg role"
            if self.mode == "disagg":
                what = "a disagg candidate has prefill and decode roles"
            fix = [f"missing {', '.join(missing)}"] if missing else []
            fix += [f"remove {', '.join(extra)}"] if extra else []
            raise ConfigError(f"{what}: {'; '.join(fix)}")
        if self.backend == "trtllm":
            for role, spec in self.roles().items():
                if spec.data_parallel_size != 1:
                    raise ConfigError(
                        f"candidate.{role}.data_parallel_size: TensorRT-LLM has no separate "
                        "data parallel size (attention DP runs on the tensor parallel ranks); "
                        f"expected 1, got {spec.data_parallel_size}"
                    )
        return self

    def roles(self) -> dict[str, WorkerRole]:
        """The candidate's worker roles by name: ``{"agg": ...}`` or prefill and decode."""
        names = ("agg",) if self.mode == "agg" else ("prefill", "decode")
        return {name: getattr(self, name) for name in names}


class RenderOptions(_Typed):
    """Where and how the rendered graph deploys.

    ``dynamo_version`` is the Dynamo release whose runtime image runs the workers (None: the
    default release of the installed AIC); it must ship the candidate's backend version unless
    ``image`` names another runtime image. The DGD is named ``<name_prefix>-agg`` or
    ``<name_prefix>-disagg``; ``namespace`` None leaves ``metadata.namespace`` out.
    ``gpus_per_node`` (None: the system's, from AIC) decides when a worker spans nodes.
    """

    _root = "options"
    dynamo_version: str | None = Field(None, min_length=1, strict=True)
    image: str | None = Field(None, min_length=1, strict=True)
    name_prefix: str = Field("dynosim", strict=True)
    namespace: str | None = Field(None, strict=True)
    gpus_per_node: int | None = Field(None, ge=1, strict=True)

    @field_validator("name_prefix", "namespace")
    @classmethod
    def _rfc1123(cls, value: str | None, info: Any) -> str | None:
        limit = _MAX_PREFIX if info.field_name == "name_prefix" else 63
        if value is not None and not (len(value) <= limit and _RFC1123_LABEL.fullmatch(value)):
            raise ConfigError(
                f"options.{info.field_name}: expected at most {limit} lowercase letters, digits "
                f"and '-', starting and ending with a letter or digit (RFC 1123), got {value!r}"
            )
        return value


def load_candidate(path: str | os.PathLike[str]) -> Candidate:
    """Read a :class:`Candidate` from a YAML or JSON file; problems raise ConfigError naming it."""
    return load_settings_file(path, Candidate, "candidate")


# --- lowering the workload ----------------------------------------------------------------------


@dataclass(frozen=True)
class LoweredWorkload:
    """What a workload tells AIC, all in tokens.

    ``isl`` / ``osl`` are the request lengths AIC's SLA section takes (a synthetic workload's
    own; a trace's mean, rounded half up). ``context_length`` is the engine's per-request token
    limit (``max_seq_len``): the candidate's, else ``longest_request``. ``longest_prompt`` sizes
    TensorRT-LLM's KV transfer buffer. ``requests`` counts the workload's requests.
    """

    kind: Literal["trace", "synthetic"]
    isl: int
    osl: int
    context_length: int
    longest_prompt: int
    longest_request: int
    requests: int


def _as_workload(workload: Any) -> TraceWorkload | SyntheticWorkload:
    if isinstance(workload, TraceWorkload | SyntheticWorkload):
        return workload
    if isinstance(workload, Mapping):
        data = dict(workload)
        kind = data.pop("kind", None)
        # The models apply the workload rule: a trace with isl/osl is refused, by name.
        if kind == "trace":
            return TraceWorkload(**data)
        if kind == "synthetic":
            return SyntheticWorkload(**data)
        raise WorkloadError(f"workload.kind: expected 'trace' or 'synthetic', got {kind!r}")
    raise WorkloadError(
        "workload: expected a TraceWorkload, a SyntheticWorkload or a mapping with a kind, "
        f"got {type(workload).__name__}"
    )


def _mean_half_up(tokens: np.ndarray) -> int:
    return int(np.floor(tokens.mean() + 0.5))


def lower_workload(
    workload: TraceWorkload | SyntheticWorkload | Mapping[str, Any],
    context_length: int | None = None,
) -> LoweredWorkload:
    """Derive what AIC needs from a workload, exactly as given; the one place this happens.

    A synthetic workload with fixed lengths and count supplies its own ``isl`` and ``osl``. A
    trace workload (which has no fixed length; one given isl/osl is refused by the workload
    rule), or a synthetic one with drawn lengths or a duration, is lowered from its rows:

    * ``isl`` / ``osl``: the mean prompt and output length, rounded half up. With the generator
      keeping the engine limits passed in, AIC uses these lengths only for its benchmark
      artifacts, which send requests of that length; the mean makes such a benchmark carry the
      trace's token volume per request (so tokens/s at a request rate match), where the median
      would understate a heavy-tailed trace (Mooncake conversation: mean 12,035, median 6,909).
    * ``context_length``: ``context_length`` if given, else the longest request's prompt plus
      output tokens, so the engine admits every request the simulation served.
    * ``longest_prompt``: the longest prompt, for buffers that must hold one prompt's KV.

    A ``context_length`` shorter than the longest request raises
    :class:`~dynosim.errors.ConfigError`: the deployment would reject requests the simulation
    served. All lengths are tokens.
    """
    wl = _as_workload(workload)
    kind: Literal["trace", "synthetic"] = (
        "synthetic" if isinstance(wl, SyntheticWorkload) else "trace"
    )
    fixed = (
        isinstance(wl, SyntheticWorkload)
        and isinstance(wl.isl, int)
        and isinstance(wl.osl, int)
        and wl.count is not None
    )
    if fixed:
        isl, osl, requests = wl.isl, wl.osl, wl.count
        longest_prompt = wl.isl
        totals = np.array([wl.isl + wl.osl], dtype=np.int64)
    else:
        # Lengths drawn from distributions (or a duration) are lowered from the generated rows
        # like a trace's: the same statistics of real, not invented, lengths.
        cols = wl.columns()
        prompts = cols.input_length.astype(np.int64)
        outputs = cols.output_length.astype(np.int64)
        totals = prompts + outputs  # int64: uint32 sums could wrap
        isl, osl, requests = _mean_half_up(prompts), _mean_half_up(outputs), len(cols)
        longest_prompt = int(prompts.max())
    longest = int(totals.max())
    if context_length is not None and context_length < longest:
        over = requests if fixed else int((totals > context_length).sum())
        raise ConfigError(
            f"candidate.context_length {context_length} is shorter than the longest request of "
            f"the {kind} workload ({longest} tokens, prompt plus output); the deployment would "
            f"reject {over} of {requests} requests that the simulation served"
        )
    return LoweredWorkload(
        kind=kind,
        isl=isl,
        osl=osl,
        context_length=longest if context_length is None else context_length,
        longest_prompt=longest_prompt,
        longest_request=longest,
        requests=requests,
    )


# --- rendering ----------------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class RenderedManifest:
    """A DGD manifest AIC rendered for a candidate.

    ``text`` is AIC's ``k8s_deploy.yaml`` exactly as AIC returned it; ``artifacts`` every file
    AIC returned, by name (``text`` included). ``deployed`` is the candidate with the context
    length the manifest carries (``lowered.context_length``); it is what :meth:`validate`
    checks the manifest against. ``aic_warnings`` are the warnings AIC logged while rendering.
    """

    text: str
    artifacts: Mapping[str, str]
    candidate: Candidate
    deployed: Candidate
    options: RenderOptions
    lowered: LoweredWorkload
    dynamo_version: str
    aic_warnings: tuple[str, ...]

    def validate(self) -> list[Problem]:
        """Problems of the manifest, checked against the deployed candidate (none: [])."""
        from dynosim.manifest import validate_manifest

        return validate_manifest(self.text, self.deployed)

    def write(self, directory: str | os.PathLike[str]) -> list[Path]:
        """Write every artifact, byte for byte, into ``directory`` (created if needed).

        Files keep AIC's artifact names (the manifest is ``k8s_deploy.yaml``); shell scripts are
        made executable. Returns the paths written, sorted by name.
        """
        out = Path(directory)
        out.mkdir(parents=True, exist_ok=True)
        written = []
        for name in sorted(self.artifacts):
            if not name or name in (".", "..") or "/" in name or os.sep in name:
                raise ManifestError(f"AIC returned an artifact named {name!r}, not a file name")
            path = out / name
            # newline="" keeps the text byte for byte on every platform.
            with open(path, "w", encoding="utf-8", newline="") as fh:
                fh.write(self.artifacts[name])
            if name.endswith(".sh"):
                path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
            written.append(path)
        return written


def _aic() -> tuple[ModuleType, ModuleType]:
    """AIC's generator API and performance database modules, imported on first use (~0.3 s)."""
    try:
        api = importlib.import_module("aiconfigurator.generator.api")
        perf = importlib.import_module("aiconfigurator.sdk.perf_database")
    except ImportError as exc:
        raise MissingExtraError(
            f"rendering a DGD manifest needs AIConfigurator: {_INSTALL_HINT} ({exc})"
        ) from exc
    return api, perf


class _Collect(logging.Handler):
    def __init__(self, messages: list[str]) -> None:
        super().__init__(logging.WARNING)
        self.messages = messages

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(f"{record.levelname.lower()}: {record.getMessage()}")


@contextmanager
def _aic_log() -> Iterator[list[str]]:
    """Collect AIC's warnings: it reports some failures (a manifest it could not build) only so."""
    messages: list[str] = []
    handler = _Collect(messages)
    loggers = [logging.getLogger(name) for name in ("aiconfigurator", "aiconfigurator_core")]
    for logger in loggers:
        logger.addHandler(handler)
    try:
        yield messages
    finally:
        for logger in loggers:
            logger.removeHandler(handler)


def _dynamo_release(api: ModuleType, cand: Candidate, opts: RenderOptions) -> str:
    """The Dynamo release to render for, checked to run the candidate's backend version."""
    release = opts.dynamo_version or api.get_default_dynamo_version_mapping()[0]
    try:
        shipped = api.resolve_backend_version_for_dynamo(release, cand.backend)
    except (TypeError, ValueError) as exc:  # AIC's words for an unknown release or backend
        raise ConfigError(f"options.dynamo_version {release!r}: {exc}") from None
    if opts.image is None and shipped != cand.backend_version:
        raise ConfigError(
            f"candidate.backend_version {cand.backend_version} is not the {cand.backend} that "
            f"Dynamo {release} ships ({shipped}); use backend_version {shipped}, a Dynamo "
            "release that ships it (options.dynamo_version), or a runtime image that runs it "
            "(options.image)"
        )
    return release


def _role_params(
    cand: Candidate, role: str, spec: WorkerRole, lowered: LoweredWorkload
) -> dict[str, Any]:
    params: dict[str, Any] = {
        "tensor_parallel_size": spec.tensor_parallel_size,
        "pipeline_parallel_size": spec.pipeline_parallel_size,  # TensorRT-LLM needs it set
        "data_parallel_size": spec.data_parallel_size,
        "gpus_per_worker": spec.gpus_per_worker,
        "max_batch_size": spec.max_batch_size,
        "tokens_per_block": cand.block_size,
        "max_seq_len": lowered.context_length,
        # dynosim simulates a prefix-sharing KV cache; AIC turns TensorRT-LLM's block reuse
        # off unless told otherwise (vLLM and SGLang share prefixes by default).
        "disable_prefix_cache": False,
    }
    if cand.backend == "trtllm" and role in ("prefill", "decode"):
        # With preserve_engine_limits AIC drops cache_transceiver_config unless this is set.
        # TensorRT-LLM advises a buffer of at least the longest prompt; AIC rounds its own
        # size up to whole KV blocks, and so does this.
        blocks = -(-lowered.longest_prompt // cand.block_size)
        params["cache_transceiver_max_tokens_in_buffer"] = blocks * cand.block_size
    return params


def render_dgd(
    candidate: Candidate | Mapping[str, Any],
    workload: TraceWorkload | SyntheticWorkload | Mapping[str, Any],
    options: RenderOptions | Mapping[str, Any] | None = None,
) -> RenderedManifest:
    """Render ``candidate`` serving ``workload`` as a DGD with AIC's generator.

    The workload is lowered by :func:`lower_workload` as it is; the candidate's engine limits
    (context length, max batch size, block size) go to AIC's ``collect_generator_params`` with
    ``preserve_engine_limits`` set, then ``generate_backend_artifacts`` renders for the
    candidate's backend version. The manifest AIC returns is not edited.

    Raises :class:`~dynosim.errors.MissingExtraError` without the ``aic`` extra,
    :class:`~dynosim.errors.ConfigError` for a candidate or options AIC cannot render as given
    (unknown system or Dynamo release, a backend version the release does not ship, a context
    length shorter than a request), :class:`~dynosim.errors.WorkloadError` for a bad workload,
    and :class:`~dynosim.errors.ManifestError` when AIC returns no ``k8s_deploy.yaml``.
    """
    cand = candidate if isinstance(candidate, Candidate) else Candidate.model_validate(candidate)
    if options is None:
        opts = RenderOptions()
    else:
        opts = options if isinstance(options, RenderOptions) else RenderOptions(**options)
    lowered = lower_workload(workload, cand.context_length)
    api, perf = _aic()
    release = _dynamo_release(api, cand, opts)
    system = perf.load_system_spec(cand.system)
    if not system:
        raise ConfigError(f"candidate.system {cand.system!r}: not a system AIC knows")
    gpus_per_node = opts.gpus_per_node or int(system["node"]["num_gpus_per_node"])

    k8s: dict[str, Any] = {"system_name": cand.system, "name_prefix": opts.name_prefix}
    if opts.namespace is not None:
        k8s["k8s_namespace"] = opts.namespace
    if opts.image is not None:
        k8s["k8s_image"] = opts.image
    roles = {
        f"{role}_params": _role_params(cand, role, spec, lowered)
        for role, spec in cand.roles().items()
    }
    workers = {f"{role}_workers": spec.replicas for role, spec in cand.roles().items()}
    with _aic_log() as warnings:
        try:
            params = api.collect_generator_params(
                service={"model_path": cand.model, "served_model_name": cand.model},
                k8s=k8s,
                **roles,
                **workers,
                num_gpus_per_node=gpus_per_node,
                sla={"isl": lowered.isl, "osl": lowered.osl},
                dyn_config={"mode": cand.mode},
                backend=cand.backend,
                generator_dynamo_version=release,
            )
            params["preserve_engine_limits"] = True
            artifacts = api.generate_backend_artifacts(
                params, cand.backend, backend_version=cand.backend_version
            )
        except Exception as exc:  # AIC's own failure, whatever its type: name it and re-raise
            raise ManifestError(
                f"AIC generator failed for the {cand.mode} {cand.backend} {cand.backend_version} "
                f"candidate: {type(exc).__name__}: {exc}"
            ) from exc
    if not isinstance(artifacts, Mapping) or not artifacts.get(MANIFEST_ARTIFACT):
        logged = f" (AIC logged: {'; '.join(warnings)})" if warnings else ""
        raise ManifestError(f"AIC generator did not return {MANIFEST_ARTIFACT}{logged}")
    return RenderedManifest(
        text=artifacts[MANIFEST_ARTIFACT],
        artifacts=dict(artifacts),
        candidate=cand,
        deployed=cand.model_copy(update={"context_length": lowered.context_length}),
        options=opts,
        lowered=lowered,
        dynamo_version=release,
        aic_warnings=tuple(warnings),
    )
