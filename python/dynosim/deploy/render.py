"""Render a simulated deployment as a Kubernetes DynamoGraphDeployment (DGD) with AIConfigurator.

:func:`render_dgd` passes a :class:`~dynosim.deploy.Candidate` with its workload to
AIConfigurator's generator (AIC, the ``aic`` extra) and returns the ``k8s_deploy.yaml`` AIC wrote,
unchanged, in a :class:`RenderedManifest`.

Passthrough: the workload goes as it is to one lowering function,
:func:`~dynosim.deploy.lower_workload`, which derives the lengths AIC needs from it and invents
none. The engine limits the simulation assumed (context length, batch size, block size, prefix
caching, chunked prefill, the pass token budget, SGLang's chunk size) are handed to AIC with
``preserve_engine_limits`` so AIC keeps them, instead of being patched into the manifest
afterwards; the manifest itself is never edited.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dynosim._files import atomic_open, make_dirs
from dynosim.aic.database import is_moe, system_spec
from dynosim.aic.generator import dynamo_release, generate
from dynosim.aic.target import expert_split_problem
from dynosim.aic.versions import aic_version
from dynosim.deploy.candidate import Candidate, RenderOptions, WorkerRole
from dynosim.deploy.lowering import LoweredWorkload, lower_workload
from dynosim.deploy.manifest import Problem, validate_manifest
from dynosim.errors import ConfigError, ManifestError
from dynosim.workload import SyntheticWorkload, TraceWorkload

#: The artifact of AIC's generator that holds the DGD manifest.
MANIFEST_ARTIFACT = "k8s_deploy.yaml"


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
        return validate_manifest(self.text, self.deployed)

    def write(self, directory: str | os.PathLike[str]) -> list[Path]:
        """Write every artifact, byte for byte, into ``directory`` (created if needed).

        Files keep AIC's artifact names (the manifest is ``k8s_deploy.yaml``); shell scripts are
        made executable. Each file is created fresh: a link planted under its name is replaced,
        never written through. Returns the paths written, sorted by name.
        """
        out = make_dirs(directory)
        written = []
        for name in sorted(self.artifacts):
            if not name or name in (".", "..") or "/" in name or os.sep in name:
                raise ManifestError(f"AIC returned an artifact named {name!r}, not a file name")
            with atomic_open(out / name, fresh=True) as fh:
                fh.write(self.artifacts[name])
                if name.endswith(".sh"):  # set on the new file itself, before it has the name
                    mode = os.fstat(fh.fileno()).st_mode
                    os.fchmod(fh.fileno(), mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
            written.append(out / name)
        return written


def _expert_splits(cand: Candidate) -> dict[str, dict[str, int]] | None:
    """Per role, the expert split AIC's generator takes (``moe_tensor_parallel_size`` x
    ``moe_expert_parallel_size`` = the worker's tensor x data parallel GPUs), when a role splits
    its model's experts; None when none does. A split needs a model with experts, and SGLang
    attention DP is refused: AIC's generator sizes such a worker at tp-size x dp-size GPUs
    where SGLang runs it on tp-size GPUs."""
    roles = cand.roles()
    splits = any(s.expert_parallel_size != 1 for s in roles.values())
    data_parallel = any(s.data_parallel_size != 1 for s in roles.values())
    if not splits and not (cand.backend == "sglang" and data_parallel):
        return None
    try:
        moe = is_moe(cand.model)
    except ConfigError as exc:
        raise ConfigError(f"candidate.model: {exc}") from None
    for role, spec in roles.items():
        if problem := expert_split_problem(cand.model, spec.expert_parallel_size):
            raise ConfigError(f"candidate.{role}.expert_parallel_size: {problem}")
        if moe and cand.backend == "sglang" and spec.data_parallel_size != 1:
            raise ConfigError(
                f"candidate.{role}.data_parallel_size: SGLang serves the DP ranks of a "
                "mixture-of-experts model as attention DP on its --tp-size GPUs, and AIC's "
                f"generator {aic_version()} sizes such a worker at tp-size x dp-size GPUs; "
                "rendering it is not supported (use data_parallel_size 1, or vLLM), got "
                f"{spec.data_parallel_size}"
            )
    if not splits:
        return None
    return {
        role: {
            "moe_tensor_parallel_size": spec.tensor_parallel_size
            * spec.data_parallel_size
            // spec.expert_parallel_size,
            "moe_expert_parallel_size": spec.expert_parallel_size,
        }
        for role, spec in roles.items()
    }


def engine_settings_problem(backend: str, chunked_prefill: bool | None) -> str | None:
    """Why AIC's generator cannot render a role's engine settings as simulated, or None.

    AIC's vLLM templates emit no chunked-prefill flag (its ``enable_chunked_prefill``
    parameter is dropped), so a vLLM worker runs vLLM's default, chunked prefill on; a vLLM
    candidate with it off cannot be rendered.
    """
    if backend == "vllm" and chunked_prefill is False:
        return (
            f"AIC's generator {aic_version()} renders no chunked-prefill flag for vLLM, whose "
            "workers then chunk prompts (vLLM's default); a vLLM candidate with chunked "
            "prefill off cannot be rendered (use chunked_prefill true)"
        )
    return None


def _engine_params(backend: str, spec: WorkerRole) -> dict[str, Any]:
    """A role's engine settings as AIC's generator takes them (none when left to the engine).

    TensorRT-LLM's engine config takes ``enable_chunked_prefill`` and ``max_num_tokens``;
    vLLM's ``max_num_tokens`` becomes ``--max-num-batched-tokens``; SGLang's
    ``max_prefill_tokens`` becomes ``--max-prefill-tokens``, and its chunk size goes under
    the flag's own name (``chunked-prefill-size``), a worker parameter AIC passes to the
    command line as it is: AIC's ``enable_chunked_prefill`` mapping for SGLang renders -1
    (chunking off) whatever it is given.
    """
    out: dict[str, Any] = {}
    if spec.max_num_tokens is not None:
        out["max_prefill_tokens" if backend == "sglang" else "max_num_tokens"] = spec.max_num_tokens
    if backend == "trtllm" and spec.chunked_prefill is not None:
        out["enable_chunked_prefill"] = spec.chunked_prefill
    if backend == "sglang" and spec.chunk_size is not None:
        out["chunked-prefill-size"] = spec.chunk_size
    return out


def _role_params(
    cand: Candidate, role: str, spec: WorkerRole, lowered: LoweredWorkload
) -> dict[str, Any]:
    if problem := engine_settings_problem(cand.backend, spec.chunked_prefill):
        raise ConfigError(f"candidate.{role}.chunked_prefill: {problem}")
    params: dict[str, Any] = {
        **_engine_params(cand.backend, spec),
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
        params["cache_transceiver_max_tokens_in_buffer"] = lowered.longest_prompt_blocks(
            cand.block_size
        )
    return params


#: GPUs of the largest deployment rendered: AIC's generator works per replica, and beyond this
#: it runs for minutes and writes thousands of files for a cluster nobody deploys.
MAX_RENDER_GPUS = 16_384


def render_dgd(
    candidate: Candidate | Mapping[str, Any],
    workload: TraceWorkload | SyntheticWorkload | Mapping[str, Any],
    options: RenderOptions | Mapping[str, Any] | None = None,
) -> RenderedManifest:
    """Render ``candidate`` serving ``workload`` as a DGD with AIC's generator.

    The workload is lowered by :func:`~dynosim.deploy.lower_workload` as it is; the candidate's
    engine limits (context length, max batch size, block size) go to AIC's generator with
    ``preserve_engine_limits`` set, which renders for the candidate's backend version. The
    manifest AIC returns is not edited.

    Raises :class:`~dynosim.errors.MissingExtraError` without the ``aic`` extra,
    :class:`~dynosim.errors.ConfigError` for a candidate or options AIC cannot render as given
    (unknown system or Dynamo release, a backend version the release does not ship, a context
    length shorter than a request), :class:`~dynosim.errors.WorkloadError` for a bad workload,
    and :class:`~dynosim.errors.ManifestError` when AIC returns no ``k8s_deploy.yaml``.
    """
    cand = candidate if isinstance(candidate, Candidate) else Candidate.model_validate(candidate)
    gpus = sum(spec.replicas * spec.gpus_per_worker for spec in cand.roles().values())
    if gpus > MAX_RENDER_GPUS:
        raise ConfigError(
            f"candidate: {gpus:,} GPUs over its roles (replicas x tensor x pipeline x data "
            f"parallel size), more than the {MAX_RENDER_GPUS:,} a deployment is rendered for"
        )
    if options is None:
        opts = RenderOptions()
    else:
        opts = options if isinstance(options, RenderOptions) else RenderOptions(**options)
    lowered = lower_workload(workload, cand.context_length)
    release, shipped = dynamo_release(opts.dynamo_version, cand.backend)
    if opts.image is None and shipped != cand.backend_version:
        raise ConfigError(
            f"candidate.backend_version {cand.backend_version} is not the {cand.backend} that "
            f"Dynamo {release} ships ({shipped}); use backend_version {shipped}, a Dynamo "
            "release that ships it (options.dynamo_version), or a runtime image that runs it "
            "(options.image)"
        )
    try:
        system = system_spec(cand.system)
    except ConfigError as exc:
        raise ConfigError(f"candidate.system: {exc}") from None
    k8s: dict[str, Any] = {"system_name": cand.system, "name_prefix": opts.name_prefix}
    if opts.namespace is not None:
        k8s["k8s_namespace"] = opts.namespace
    if opts.image is not None:
        k8s["k8s_image"] = opts.image
    splits = _expert_splits(cand)
    artifacts, warnings = generate(
        mode=cand.mode,
        backend=cand.backend,
        backend_version=cand.backend_version,
        release=release,
        roles={
            role: (
                spec.replicas,
                {**_role_params(cand, role, spec, lowered), **(splits or {}).get(role, {})},
            )
            for role, spec in cand.roles().items()
        },
        model={"is_moe": True} if splits else None,
        service={"model_path": cand.model, "served_model_name": cand.model},
        k8s=k8s,
        gpus_per_node=opts.gpus_per_node or int(system["node"]["num_gpus_per_node"]),
        sla={"isl": lowered.isl, "osl": lowered.osl},
    )
    if not artifacts.get(MANIFEST_ARTIFACT):
        logged = f" (AIC logged: {'; '.join(warnings)})" if warnings else ""
        raise ManifestError(f"AIC generator did not return {MANIFEST_ARTIFACT}{logged}")
    return RenderedManifest(
        text=artifacts[MANIFEST_ARTIFACT],
        artifacts=artifacts,
        candidate=cand,
        deployed=cand.model_copy(update={"context_length": lowered.context_length}),
        options=opts,
        lowered=lowered,
        dynamo_version=release,
        aic_warnings=tuple(warnings),
    )


__all__ = [
    "MANIFEST_ARTIFACT",
    "MAX_RENDER_GPUS",
    "RenderedManifest",
    "engine_settings_problem",
    "render_dgd",
]
