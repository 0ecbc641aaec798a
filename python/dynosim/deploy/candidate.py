"""A deployment candidate: what a planner simulated and what gets rendered as a Kubernetes
DynamoGraphDeployment. The candidate and the simulation configuration map onto each other here
and only here (:meth:`Candidate.to_config`, :meth:`Candidate.from_config`), so the deployment
simulated and the deployment rendered are the same by construction."""

from __future__ import annotations

import os
import re
from typing import Any

from pydantic import Field, field_validator, model_validator

from dynosim._defaults import Backend, Mode
from dynosim._shown import shown
from dynosim._validation import StrictModel
from dynosim.config import (
    LIMITS,
    AicTiming,
    EngineConfig,
    SimConfig,
    load_settings_file,
    resolve,
)
from dynosim.errors import ConfigError
from dynosim.workload.reading import MAX_LENGTH

_RFC1123_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
# AIC names the DGD "<prefix>-agg" or "<prefix>-disagg"; the name must stay a 63-char label.
_MAX_PREFIX = 63 - len("-disagg")

#: The most tokens one request may hold: request lengths are 32-bit.
MAX_CONTEXT_LENGTH = MAX_LENGTH - 1
#: Sizes of a candidate bounded like the configuration they become (the core's limits).
_MAX_PARALLEL = LIMITS["max_parallel"]


#: A role's engine settings (the candidate's fields) as each backend's engine section names them.
ENGINE_SETTINGS: dict[str, dict[str, str]] = {
    "vllm": {
        "chunked_prefill": "enable_chunked_prefill",
        "max_num_tokens": "max_num_batched_tokens",
    },
    "trtllm": {"chunked_prefill": "enable_chunked_context", "max_num_tokens": "max_num_tokens"},
    "sglang": {"chunk_size": "chunked_prefill_size", "max_num_tokens": "max_prefill_tokens"},
}


def block_size_problem(value: int) -> str | None:
    """Why ``value`` cannot be a deployment's KV block size (1 to the core's limit, and a power
    of two: vLLM, SGLang and TensorRT-LLM page their caches in power-of-two blocks), or None."""
    limit = LIMITS["max_block_size"]
    if not 1 <= value <= limit:
        return f"expected 1 to {limit:,} tokens, got {shown(value)}"
    if value & (value - 1):
        return (
            f"expected a power of two (engines page KV in power-of-two blocks), got {shown(value)}"
        )
    return None


def context_length_problem(value: int) -> str | None:
    """Why ``value`` cannot be a deployment's context length, or None."""
    if not 1 <= value <= MAX_CONTEXT_LENGTH:
        return f"expected 1 to {MAX_CONTEXT_LENGTH:,} tokens, got {shown(value)}"
    return None


class WorkerRole(StrictModel):
    """One worker role of a candidate (``aggregated``, or ``prefill`` / ``decode``): how many
    workers, how each spans GPUs, how many requests each runs at once, and how its engine
    fills a pass (chunked prefill, token budget, SGLang's chunk size)."""

    _root = "role"
    replicas: int = Field(
        ge=1, le=LIMITS["max_workers"], strict=True, description="Workers of this role."
    )
    tensor_parallel_size: int = Field(
        1, ge=1, le=_MAX_PARALLEL, strict=True, description="TP size of a worker."
    )
    pipeline_parallel_size: int = Field(
        1, ge=1, le=_MAX_PARALLEL, strict=True, description="PP size."
    )
    data_parallel_size: int = Field(
        1, ge=1, le=_MAX_PARALLEL, strict=True, description="DP ranks per worker."
    )
    expert_parallel_size: int = Field(
        1,
        ge=1,
        le=_MAX_PARALLEL,
        strict=True,
        description="Expert-parallel size (mixture-of-experts models): the worker's tensor x "
        "data parallel GPUs split the experts this many ways.",
    )
    max_batch_size: int = Field(
        ge=1,
        le=LIMITS["max_num_seqs"],
        strict=True,
        description="Most requests one worker runs at once (vLLM max-num-seqs, SGLang "
        "max-running-requests, TensorRT-LLM max_batch_size).",
    )

    chunked_prefill: bool | None = Field(
        None,
        strict=True,
        description="Whether a prompt longer than the token budget left in a pass is split "
        "over passes (vLLM enable-chunked-prefill, TensorRT-LLM enable_chunked_prefill, its "
        "chunked context); SGLang always chunks, at chunk_size. None: the engine's default.",
    )
    max_num_tokens: int | None = Field(
        None,
        ge=1,
        le=LIMITS["max_batched_tokens"],
        strict=True,
        description="Tokens one pass may compute (vLLM max-num-batched-tokens, TensorRT-LLM "
        "max_num_tokens, SGLang max-prefill-tokens). None: the engine's default.",
    )
    chunk_size: int | None = Field(
        None,
        ge=1,
        le=LIMITS["max_batched_tokens"],
        strict=True,
        description="SGLang chunked-prefill-size: the most prompt tokens of one request in a "
        "pass (vLLM and TensorRT-LLM chunk to the budget left instead). None: the engine's "
        "default.",
    )

    @property
    def gpus_per_worker(self) -> int:
        """GPUs one worker uses: tensor x pipeline x data parallel size."""
        return self.tensor_parallel_size * self.pipeline_parallel_size * self.data_parallel_size


class Candidate(StrictModel):
    """A deployment that was simulated and is to be rendered.

    ``mode`` ``"aggregated"`` has one role, ``aggregated``; ``"disaggregated"`` has ``prefill``
    and ``decode``.
    ``model`` is the Hugging Face id (or model path) served, ``system`` an AIC system name such
    as ``h200_sxm``, ``backend`` one of vllm, sglang, trtllm at ``backend_version`` (the engine
    release the deployment runs; it selects AIC's config templates). ``block_size`` is tokens per
    KV block; ``context_length`` the most tokens (prompt + output) one request may hold, or None
    to take it from the workload's longest request.
    """

    _root = "candidate"
    mode: Mode
    model: str = Field(min_length=1, strict=True)
    system: str = Field(min_length=1, strict=True)
    backend: Backend
    backend_version: str = Field(min_length=1, strict=True)
    block_size: int = Field(strict=True, description="Tokens per KV block (a power of two).")
    context_length: int | None = Field(
        None, strict=True, description="Most tokens per request; None: from the workload."
    )
    aggregated: WorkerRole | None = None
    prefill: WorkerRole | None = None
    decode: WorkerRole | None = None

    @field_validator("block_size")
    @classmethod
    def _block_size(cls, value: int) -> int:
        if problem := block_size_problem(value):
            raise ConfigError(f"candidate.block_size: {problem}")
        return value

    @field_validator("context_length")
    @classmethod
    def _context_length(cls, value: int | None) -> int | None:
        if value is not None and (problem := context_length_problem(value)):
            raise ConfigError(f"candidate.context_length: {problem}")
        return value

    @model_validator(mode="after")
    def _roles_fit_mode(self) -> Candidate:
        need = ("aggregated",) if self.mode == "aggregated" else ("prefill", "decode")
        missing = [f"candidate.{r}" for r in need if getattr(self, r) is None]
        extra = [
            f"candidate.{r}"
            for r in ("aggregated", "prefill", "decode")
            if r not in need and getattr(self, r) is not None
        ]
        if missing or extra:
            what = "an aggregated candidate has an aggregated role"
            if self.mode == "disaggregated":
                what = "a disaggregated candidate has prefill and decode roles"
            fix = [f"missing {', '.join(missing)}"] if missing else []
            fix += [f"remove {', '.join(extra)}"] if extra else []
            raise ConfigError(f"{what}: {'; '.join(fix)}")
        for role, spec in self.roles().items():
            self._check_layout(role, spec)
        return self

    def _check_layout(self, role: str, spec: WorkerRole) -> None:
        """A role's TP, DP and EP, and its engine settings, as its engine can run them."""
        if self.backend == "sglang" and spec.chunked_prefill is False:
            raise ConfigError(
                f"candidate.{role}.chunked_prefill: SGLang's engine is simulated chunking "
                "every prompt longer than chunk_size (chunked-prefill-size -1 is not "
                "simulated); expected true or unset, got false"
            )
        if self.backend != "sglang" and spec.chunk_size is not None:
            raise ConfigError(
                f"candidate.{role}.chunk_size: an SGLang setting (chunked-prefill-size); "
                f"{self.backend} chunks a prompt to the token budget left in a pass "
                "(chunked_prefill, max_num_tokens); expected unset, got "
                f"{spec.chunk_size}"
            )
        tp, dp, ep = spec.tensor_parallel_size, spec.data_parallel_size, spec.expert_parallel_size
        if self.backend == "trtllm" and dp != 1:
            raise ConfigError(
                f"candidate.{role}.data_parallel_size: TensorRT-LLM has no separate "
                "data parallel size (attention DP runs on the tensor parallel ranks); "
                f"expected 1, got {dp}"
            )
        if ep == 1:
            return
        try:  # the simulation's own rule of an expert split (it divides tp x dp)
            SimConfig(
                engine=EngineConfig(
                    backend=self.backend, tensor_parallel_size=tp, data_parallel_size=dp
                ),
                timing=self._timing(spec),
            )
        except ConfigError as e:
            raise ConfigError(f"candidate.{role}.expert_parallel_size: {e}") from None
        if self.backend == "vllm" and ep != tp * dp:
            raise ConfigError(
                f"candidate.{role}.expert_parallel_size: vLLM's expert parallelism "
                "(--enable-expert-parallel) spans every GPU of a worker; expected 1 or "
                f"tensor x data parallel size = {tp * dp}, got {ep}"
            )

    def _timing(self, spec: WorkerRole) -> AicTiming:
        """The ``aic`` timing of one worker of ``spec``: the candidate's model, system and
        engine at the worker's layout."""
        return AicTiming(
            model_name=self.model,
            system=self.system,
            backend=self.backend,
            backend_version=self.backend_version,
            tp=spec.tensor_parallel_size,
            dp=spec.data_parallel_size,
            ep=spec.expert_parallel_size,
        )

    def roles(self) -> dict[str, WorkerRole]:
        """The candidate's worker roles by name: ``{"aggregated": ...}`` or prefill and decode."""
        names = ("aggregated",) if self.mode == "aggregated" else ("prefill", "decode")
        return {name: getattr(self, name) for name in names}

    def to_config(self, base: SimConfig | None = None) -> SimConfig:
        """The simulation of this candidate: ``base`` (default: all defaults) with the
        candidate's serving mode, worker counts and, per role, its engine limits and layout
        (block size, max batch size as ``max_num_seqs``, TP, DP, and the engine settings
        given: chunked prefill, pass token budget, SGLang's chunk size, as
        :data:`ENGINE_SETTINGS` names them) and AIC timing of the candidate's model, system
        and backend version at that layout (TP, DP, EP).

        Each role gets its own engine and timing section in disaggregated mode, starting from
        the base's own section of that role when it has one, else from the shared one; other
        settings of ``base`` (KV transfers, tiers, routing, SLA, unset or given KV blocks) are
        kept.

        Raises:
            ConfigError: a role uses pipeline parallelism, which dynosim does not simulate.
        """
        data = (base or SimConfig()).model_dump()
        data["cluster"]["mode"] = self.mode
        for role, spec in self.roles().items():
            if spec.pipeline_parallel_size != 1:
                raise ConfigError(
                    f"candidate.{role}.pipeline_parallel_size: dynosim simulates tensor and "
                    f"data parallelism only; expected 1, got {spec.pipeline_parallel_size}"
                )
            own = data.get(role, {}).get("engine") if role != "aggregated" else None
            engine = {
                **(own or data["engine"]),
                "backend": self.backend,
                "block_size": self.block_size,
                "max_num_seqs": spec.max_batch_size,
                "tensor_parallel_size": spec.tensor_parallel_size,
                "data_parallel_size": spec.data_parallel_size,
            }
            for name, key in ENGINE_SETTINGS[self.backend].items():
                if getattr(spec, name) is not None:
                    engine[key] = getattr(spec, name)
            timing = self._timing(spec).model_dump()
            if role == "aggregated":
                data["cluster"]["num_workers"] = spec.replicas
                data["engine"], data["timing"] = engine, timing
            else:
                data["cluster"][f"num_{role}_workers"] = spec.replicas
                data[role] = {"engine": engine, "timing": timing}
        return SimConfig.model_validate(data)

    @classmethod
    def from_config(
        cls,
        config: SimConfig,
        *,
        model: str | None = None,
        system: str | None = None,
        backend: str | None = None,
        backend_version: str | None = None,
        context_length: int | None = None,
    ) -> Candidate:
        """The candidate that deploys the cluster ``config`` simulates: per role its workers,
        TP, DP, EP (its ``aic`` timing's; 1 under other timing), ``max_num_seqs`` (as max
        batch size) and its engine settings as the replay used them (set or the flavour's
        default: chunked prefill, pass token budget, SGLang's chunk size), and the block size
        all roles share.

        ``model``, ``system`` and ``backend_version`` default to those of the roles' ``aic``
        timing (all roles must agree; a configuration timed otherwise must name them), and
        ``backend`` to the roles' engines' (which their ``aic`` sections price).

        Raises:
            ConfigError: roles with different block sizes or AIC targets, or a field neither
                given nor found in an ``aic`` timing section.
        """
        view = resolve(config)
        sizes = {v.engine.block_size for v in view.roles.values()}
        if len(sizes) > 1:
            raise ConfigError(
                "a candidate has one block size, but the roles' engines have "
                + ", ".join(
                    f"{v.engine_path}.block_size={v.engine.block_size}" for v in view.roles.values()
                )
            )
        given = {
            "model": model,
            "system": system,
            "backend": backend,
            "backend_version": backend_version,
        }
        fields: dict[str, Any] = {}
        for key, value in given.items():
            if value is not None:
                fields[key] = value
                continue
            aic_key = "model_name" if key == "model" else key
            found = {
                (v.timing_path, getattr(v.timing, aic_key))
                for v in view.roles.values()
                if isinstance(v.timing, AicTiming)
            }
            if key == "backend":  # the engines' own, which their aic sections price
                aic_key = "backend"
                found = {(v.engine_path, v.engine.backend) for v in view.roles.values()}
            values = {value for _, value in found}
            if len(values) != 1 or None in values:
                where = ", ".join(f"{path}.{aic_key}={value}" for path, value in sorted(found))
                raise ConfigError(
                    f"candidate.{key}: not given, and the roles' aic timing sections do not "
                    f"name one{f' ({where})' if where else ''}; pass {key}="
                )
            fields[key] = values.pop()
        roles = {
            name: WorkerRole(
                replicas=v.workers,
                tensor_parallel_size=v.engine.tensor_parallel_size,
                data_parallel_size=v.engine.data_parallel_size,
                expert_parallel_size=v.timing.ep if isinstance(v.timing, AicTiming) else 1,
                max_batch_size=v.engine.max_num_seqs,
                **{
                    field: v.engine.setting(key)
                    for field, key in ENGINE_SETTINGS[v.engine.backend].items()
                },
            )
            for name, v in view.roles.items()
        }
        return cls(
            mode=config.cluster.mode,
            block_size=sizes.pop(),
            context_length=context_length,
            **fields,
            **roles,
        )


class RenderOptions(StrictModel):
    """Where and how the rendered graph deploys.

    ``dynamo_version`` is the Dynamo release whose runtime image runs the workers (None: the
    default release of the installed AIC); it must ship the candidate's backend version unless
    ``image`` names another runtime image. The DGD is named ``<name_prefix>-agg`` or
    ``<name_prefix>-disagg`` (AIC's names); ``namespace`` None leaves ``metadata.namespace`` out.
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
                f"and '-', starting and ending with a letter or digit (RFC 1123), "
                f"got {shown(value)}"
            )
        return value


def load_candidate(path: str | os.PathLike[str]) -> Candidate:
    """Read a :class:`Candidate` from a YAML or JSON file; problems raise ConfigError naming it."""
    return load_settings_file(path, Candidate, "candidate")
