"""Checks of a Kubernetes DynamoGraphDeployment (DGD) manifest, and of what it deploys.

:func:`validate_manifest` reads a multi-document YAML manifest (it never rewrites it) and returns
one :class:`Problem` per thing wrong, each naming its path in the document, for example
``spec.services.VllmDecodeWorker.resources.limits.gpu: expected "2", got "4"``. Given the
:class:`~dynosim.deploy.Candidate` that was simulated, it also checks that the manifest deploys
that candidate.

The parts of the DGD that are checked are pydantic models here; every one allows unknown fields,
because the CRD keeps growing and a field this module does not know is not a problem.
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictInt, StrictStr, ValidationError

from dynosim._documents import DocumentError, yaml_document, yaml_documents
from dynosim._files import MAX_LINE_BYTES, read_input
from dynosim._shown import listing, short_key, shown, under
from dynosim._validation import problems
from dynosim.config import LIMITS
from dynosim.deploy.candidate import (
    Candidate,
    WorkerRole,
    block_size_problem,
    context_length_problem,
    load_candidate,
)
from dynosim.errors import ConfigError, ManifestError

__all__ = [
    "DGD_API_VERSION",
    "ConfigMap",
    "DGDService",
    "DynamoGraphDeployment",
    "Problem",
    "validate_manifest",
    "worker_service_name",
]

#: The apiVersion every DGD carries.
DGD_API_VERSION = "nvidia.com/v1alpha1"
_DGD_KIND = "DynamoGraphDeployment"
_RFC1123_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_BACKEND_PREFIX = {"vllm": "Vllm", "sglang": "SGLang", "trtllm": "TRTLLM"}
# subComponentType -> service name suffix; None is an aggregated worker. "encode" is AIC's
# multimodal encode worker, accepted so its manifests are not flagged.
_ROLE_SUFFIX = {
    None: "Worker",
    "prefill": "PrefillWorker",
    "decode": "DecodeWorker",
    "encode": "EncodeWorker",
}
_NAME_TO_WORKER = {
    prefix + suffix: (backend, role)
    for backend, prefix in _BACKEND_PREFIX.items()
    for role, suffix in _ROLE_SUFFIX.items()
}
_SHELLS = frozenset({"bash", "sh", "/bin/bash", "/bin/sh", "/usr/bin/bash", "/usr/bin/env"})
# `cat > PATH <<'TAG'` ... `TAG`: how AIC (and most hand-written specs) inline a config file.
_HEREDOC = re.compile(
    r"cat\s*>\s*(?P<path>\S+)\s*<<-?\s*(?P<q>['\"]?)(?P<tag>\w+)(?P=q)[^\n]*\n"
    r"(?P<body>.*?)\n[ \t]*(?P=tag)[ \t]*(?=\n|$)",
    re.DOTALL,
)


def worker_service_name(backend: str, role: str) -> str:
    """The DGD service name of a ``backend`` worker in ``role`` (aggregated, prefill or
    decode)."""
    return _BACKEND_PREFIX[backend] + _ROLE_SUFFIX[None if role == "aggregated" else role]


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a manifest: where it is (``path``, dotted, list items as ``[i]``;
    parts outside the DGD as ``Kind/name...`` or ``document N``) and what is wrong."""

    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"


# --- the checked parts of the DGD ------------------------------------------------------------


class _Part(BaseModel):
    """A checked part of a Kubernetes object; fields it does not name are kept, not refused."""

    model_config = ConfigDict(extra="allow", frozen=True)


class ObjectMeta(_Part):
    """``metadata``: the object's name and optional namespace."""

    name: StrictStr
    namespace: StrictStr | None = None


class ResourceList(_Part):
    """``resources.limits``: the GPU count is a string, as Kubernetes quantities are."""

    gpu: StrictStr | None = None


class Resources(_Part):
    """A service's ``resources``."""

    limits: ResourceList | None = None


class VolumeMount(_Part):
    """One ``volumeMounts`` entry of a container."""

    name: StrictStr
    mountPath: StrictStr


class Container(_Part):
    """``extraPodSpec.mainContainer``: the command line that starts the engine."""

    command: list[StrictStr] | None = None
    args: list[StrictStr] | None = None
    volumeMounts: list[VolumeMount] | None = None


class ConfigMapSource(_Part):
    """A volume's ``configMap`` source."""

    name: StrictStr


class Volume(_Part):
    """One ``extraPodSpec.volumes`` entry."""

    name: StrictStr
    configMap: ConfigMapSource | None = None


class ExtraPodSpec(_Part):
    """A service's ``extraPodSpec``."""

    mainContainer: Container | None = None
    volumes: list[Volume] | None = None


class DGDService(_Part):
    """One entry of ``spec.services``."""

    componentType: StrictStr
    subComponentType: StrictStr | None = None
    replicas: StrictInt | None = None
    resources: Resources | None = None
    extraPodSpec: ExtraPodSpec | None = None


class DGDSpec(_Part):
    """``spec``: the services of the graph, by name."""

    services: dict[StrictStr, DGDService] = Field(min_length=1)


class DynamoGraphDeployment(_Part):
    """A ``DynamoGraphDeployment`` document."""

    apiVersion: StrictStr
    kind: Literal["DynamoGraphDeployment"]
    metadata: ObjectMeta
    spec: DGDSpec


class ConfigMap(_Part):
    """A ``ConfigMap`` document (AIC's TensorRT-LLM engine configs in ``configmap`` mode)."""

    kind: Literal["ConfigMap"]
    metadata: ObjectMeta
    data: dict[StrictStr, StrictStr] | None = None


# --- reading -----------------------------------------------------------------------------------


def _read(source: str | os.PathLike[str]) -> str:
    # A str is manifest text when it spans lines or is a JSON object; otherwise it is a path.
    if isinstance(source, str) and ("\n" in source or source.lstrip().startswith("{")):
        return source
    if not isinstance(source, str | os.PathLike):
        raise ManifestError(f"expected manifest text or a path to it, got {type(source).__name__}")
    path = Path(source)
    try:
        return read_input(path, ManifestError, "manifest", max_line=MAX_LINE_BYTES).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ManifestError(f"{path}: the manifest is not UTF-8 text (byte {exc.start})") from exc


def _documents(text: str) -> tuple[list[tuple[int, Any]], list[Problem]]:
    try:
        docs = yaml_documents(text)
    except DocumentError as exc:
        return [], [Problem(exc.where or "document", exc.problem)]
    return [(i, doc) for i, doc in enumerate(docs, start=1) if doc is not None], []


# --- what a worker runs --------------------------------------------------------------------------


@dataclass(frozen=True)
class _Setting:
    """One engine setting found in a worker: its raw value, where, and under which name."""

    value: Any
    path: str
    name: str


class _EngineArgs:
    """The engine command line of one worker container: its flags, the Python module it runs,
    and the engine config files the pod spec writes inline (heredocs) or mounts (ConfigMaps)."""

    def __init__(
        self,
        base: str,
        pod: ExtraPodSpec,
        config_maps: Mapping[str, ConfigMap],
    ) -> None:
        container = pod.mainContainer
        assert container is not None  # callers only build this for a main container
        self.files: dict[str, tuple[str, str]] = {}  # container path -> (text, document path)
        tokens: list[tuple[str, str]] = []
        argv = [(t, f"{base}.command[{i}]") for i, t in enumerate(container.command or [])]
        argv += [(t, f"{base}.args[{i}]") for i, t in enumerate(container.args or [])]
        words = [t for t, _ in argv]
        script_at = None
        if words and words[0] in _SHELLS and "-c" in words:
            script_at = words.index("-c") + 1
        if script_at is not None and script_at < len(argv):
            script, where = argv[script_at]
            for m in _HEREDOC.finditer(script):
                self.files[m["path"].strip("'\"")] = (m["body"], where)
            lexer = shlex.shlex(_HEREDOC.sub(" ", script), posix=True, punctuation_chars=True)
            lexer.whitespace_split = True
            try:
                tokens = [(t, where) for t in lexer]
            except ValueError:  # unbalanced quotes: read what the shell would not run anyway
                tokens = []
        else:
            tokens = argv
        # Every flag in command-line order as (name, value or None, where the value is).
        self.flags: list[tuple[str, str | None, str]] = []
        self.module: str | None = None
        for i, (token, where) in enumerate(tokens):
            if token == "-m" and i + 1 < len(tokens):
                self.module = tokens[i + 1][0]
            if not token.startswith("-") or token in ("-", "--") or token[1:2].isdigit():
                continue
            if "=" in token:
                name, value = token.split("=", 1)
            else:
                nxt = tokens[i + 1] if i + 1 < len(tokens) else None
                name, value = token, None
                # A negative number is a value (SGLang's --chunked-prefill-size -1), not a flag.
                if nxt is not None and (not nxt[0].startswith("-") or nxt[0][1:2].isdigit()):
                    value, where = nxt
            self.flags.append((name, value, where))
        mounts = {m.name: m.mountPath.rstrip("/") for m in container.volumeMounts or []}
        for volume in pod.volumes or []:
            cm = config_maps.get(volume.configMap.name) if volume.configMap else None
            if cm is None or volume.name not in mounts:
                continue
            for key, text in (cm.data or {}).items():
                where = f"ConfigMap/{cm.metadata.name}.data.{key}"
                self.files.setdefault(f"{mounts[volume.name]}/{key}", (text, where))

    def flag(self, *names: str) -> _Setting | None:
        """The last value given to any of ``names`` (the engines' parsers keep the last)."""
        for name, value, where in reversed(self.flags):
            if name in names:
                return _Setting(value, where, name)
        return None

    def engine_config(self) -> tuple[str, dict[str, Any] | None, str] | None:
        """(file, parsed config or None when unreadable, document path) of the file passed
        with ``--extra-engine-args``; None when the worker names no such file."""
        given = self.flag("--extra-engine-args")
        if given is None or given.value is None:
            return None
        file = given.value
        if file not in self.files:
            return file, None, given.path
        text, where = self.files[file]
        try:
            config = yaml_document(text)
        except DocumentError:
            config = None
        return file, config if isinstance(config, dict) else None, where


def _nested(config: Mapping[str, Any], dotted: str) -> tuple[bool, Any]:
    node: Any = config
    for key in dotted.split("."):
        if not isinstance(node, Mapping) or key not in node:
            return False, None
        node = node[key]
    return True, node


# Where each backend's engine takes a setting: command-line flags (first name canonical), and
# for TensorRT-LLM the keys of its engine config file, which win over flags in Dynamo.
_FLAGS: dict[str, dict[str, tuple[str, ...]]] = {
    "vllm": {
        "tp": ("--tensor-parallel-size", "-tp"),
        "pp": ("--pipeline-parallel-size", "-pp"),
        "dp": ("--data-parallel-size", "-dp"),
        "block_size": ("--block-size",),
        "context_length": ("--max-model-len",),
        "max_batch_size": ("--max-num-seqs",),
        "max_num_tokens": ("--max-num-batched-tokens",),
    },
    "sglang": {
        "tp": ("--tensor-parallel-size", "--tp-size", "--tp"),
        "pp": ("--pipeline-parallel-size", "--pp-size"),
        "dp": ("--data-parallel-size", "--dp-size", "--dp"),
        "ep": ("--expert-parallel-size", "--ep-size", "--ep"),
        "block_size": ("--page-size",),
        "context_length": ("--context-length",),
        "max_batch_size": ("--max-running-requests",),
        "max_num_tokens": ("--max-prefill-tokens",),
        "chunk_size": ("--chunked-prefill-size",),
    },
    "trtllm": {
        "tp": ("--tensor-parallel-size",),
        "pp": ("--pipeline-parallel-size",),
        "ep": ("--expert-parallel-size",),
        "context_length": ("--max-seq-len",),
        "max_batch_size": ("--max-batch-size",),
    },
}
_TRTLLM_KEYS = {
    "tp": "tensor_parallel_size",
    "pp": "pipeline_parallel_size",
    "ep": "moe_expert_parallel_size",
    "block_size": "kv_cache_config.tokens_per_block",
    "context_length": "max_seq_len",
    "max_batch_size": "max_batch_size",
    "max_num_tokens": "max_num_tokens",
}
_SETTING_NAMES = {
    "tp": "tensor parallel size",
    "pp": "pipeline parallel size",
    "dp": "data parallel size",
    "ep": "expert parallel size",
    "block_size": "block size",
    "context_length": "context length",
    "max_batch_size": "max batch size",
    "max_num_tokens": "pass token budget",
    "chunk_size": "chunk size",
}
_HUMAN_SUFFIX = {"k": 1000, "m": 1000**2, "g": 1000**3, "K": 1024, "M": 1024**2, "G": 1024**3}


@dataclass
class _Worker:
    """A worker service as the checks see it."""

    name: str
    path: str
    backend: str | None
    service: DGDService
    engine: _EngineArgs | None
    config: tuple[str, dict[str, Any] | None, str] | None  # TensorRT-LLM engine config

    def setting(self, key: str) -> _Setting | None:
        """Where the worker sets ``key`` (tp, pp, dp, block_size, ...), or None if it does not."""
        if self.engine is None or self.backend is None:
            return None
        if self.backend == "trtllm" and key in _TRTLLM_KEYS and self.config and self.config[1]:
            file, config, where = self.config
            found, value = _nested(config, _TRTLLM_KEYS[key])
            if found and value is not None:
                return _Setting(value, where, f"engine config {file}: {_TRTLLM_KEYS[key]}")
        names = _FLAGS[self.backend].get(key)
        return self.engine.flag(*names) if names else None

    def wanted(self, key: str) -> str:
        """How the manifest would set ``key`` for this backend, for 'not set' messages."""
        assert self.backend is not None
        if self.backend == "trtllm" and key in _TRTLLM_KEYS:
            return f"{_TRTLLM_KEYS[key]} in the engine config"
        return _FLAGS[self.backend][key][0]


def _int_value(setting: _Setting, human: bool = False) -> int | None:
    value = setting.value
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        text = value.strip()
        if text.isascii() and text.isdigit():
            return int(text)
        # vLLM reads --max-model-len like 32k (x1000) or 32K (x1024).
        if human and text[-1:] in _HUMAN_SUFFIX and text[:-1].isdigit():
            return int(text[:-1]) * _HUMAN_SUFFIX[text[-1]]
    return None


# --- the checks --------------------------------------------------------------------------------


class _Checker:
    def __init__(self, docs: list[tuple[int, Any]]) -> None:
        self.docs = docs
        self.problems: list[Problem] = []
        self.config_maps: dict[str, ConfigMap] = {}

    def add(self, path: str, message: str) -> None:
        # A path names the document's keys (service names): each shown, not copied whole.
        self.problems.append(Problem(".".join(map(short_key, path.split("."))), message))

    def _add_problems(self, exc: ValidationError, prefix: str) -> None:
        for path, message in problems(exc):
            self.add(under(prefix, path or ""), message)

    def run(self, candidate: Candidate | None) -> list[Problem]:
        dgds = []
        for index, doc in self.docs:
            if not isinstance(doc, dict):
                self.add(f"document {index}", f"expected a mapping, got {shown(doc)}")
            elif doc.get("kind") is None:
                self.add(f"document {index}", "has no kind")
            elif not isinstance(doc["kind"], str):
                self.add(f"document {index}.kind", f"expected a string, got {shown(doc['kind'])}")
            elif doc["kind"] == _DGD_KIND:
                dgds.append((index, doc))
            elif doc["kind"] == "ConfigMap":
                self._config_map(index, doc)
        if not dgds:
            kinds = sorted(
                {
                    d["kind"]
                    for _, d in self.docs
                    if isinstance(d, dict) and isinstance(d.get("kind"), str)
                }
            )
            self.add("kind", f"no {_DGD_KIND} document (found: {listing(kinds) or 'none'})")
            return self.problems
        for index, _ in dgds[1:]:
            self.add(
                f"document {index}",
                f"a second {_DGD_KIND} (the first is document {dgds[0][0]}); expected one",
            )
        self._dgd(dgds[0][1], candidate)
        return self.problems

    def _config_map(self, index: int, doc: dict[str, Any]) -> None:
        try:
            cm = ConfigMap.model_validate(doc)
        except ValidationError as exc:
            self._add_problems(exc, f"document {index} (ConfigMap)")
            return
        self.config_maps[cm.metadata.name] = cm

    def _dgd(self, doc: dict[str, Any], candidate: Candidate | None) -> None:
        try:
            DynamoGraphDeployment.model_validate(doc)
        except ValidationError as exc:
            self._add_problems(exc, "")
        # Check every part that is well-formed, even when another part is not.
        if isinstance(doc.get("apiVersion"), str) and doc["apiVersion"] != DGD_API_VERSION:
            self.add("apiVersion", f"expected {DGD_API_VERSION}, got {shown(doc['apiVersion'])}")
        meta = _try(ObjectMeta, doc.get("metadata"))
        if meta is not None:
            self._names(meta)
        spec = doc.get("spec")
        raw = spec.get("services") if isinstance(spec, dict) else None
        if not isinstance(raw, dict) or not raw:
            return  # reported by the model already; the role checks would only repeat it
        typed = {name: _try(DGDService, svc) for name, svc in raw.items() if isinstance(name, str)}
        services = {name: svc for name, svc in typed.items() if svc is not None}
        # Count roles on the raw values so one malformed field does not hide a frontend.
        kinds = {
            name: svc.get("componentType")
            for name, svc in raw.items()
            if isinstance(svc, dict) and isinstance(name, str)
        }
        frontends = [n for n, k in kinds.items() if k == "frontend"]
        if len(frontends) != 1:
            self.add(
                "spec.services",
                "expected exactly one service with componentType frontend, got "
                + (listing(frontends) if frontends else "none"),
            )
        workers = [
            self._worker(name, svc)
            for name, svc in services.items()
            if svc.componentType == "worker"
        ]
        for name, svc in services.items():
            if svc.componentType != "worker" and svc.replicas is not None:
                self._replicas(f"spec.services.{name}.replicas", svc.replicas)
        self._graph(workers, kinds)
        for worker in workers:
            self._worker_checks(worker)
        if candidate is not None:
            self._candidate(candidate, workers, kinds)

    def _names(self, meta: ObjectMeta) -> None:
        for field, value in (("name", meta.name), ("namespace", meta.namespace)):
            if value is not None and not (len(value) <= 63 and _RFC1123_LABEL.fullmatch(value)):
                self.add(
                    f"metadata.{field}",
                    "expected an RFC 1123 label (at most 63 characters: lowercase letters, "
                    "digits and '-', starting and ending with a letter or digit), "
                    f"got {shown(value)}",
                )

    def _worker(self, name: str, svc: DGDService) -> _Worker:
        path = f"spec.services.{name}"
        backend = _NAME_TO_WORKER.get(name, (None, None))[0]
        pod = svc.extraPodSpec
        engine = None
        if pod is not None and pod.mainContainer is not None:
            engine = _EngineArgs(f"{path}.extraPodSpec.mainContainer", pod, self.config_maps)
        config = engine.engine_config() if engine is not None and backend == "trtllm" else None
        return _Worker(name, path, backend, svc, engine, config)

    def _graph(self, workers: list[_Worker], kinds: Mapping[str, Any]) -> None:
        """Roles, names and backend of the workers, taken together."""
        roles = {w.service.subComponentType for w in workers}
        if "worker" not in kinds.values():
            self.add("spec.services", "no service with componentType worker")
        if None in roles and roles & {"prefill", "decode"}:
            self.add(
                "spec.services",
                "aggregated workers (no subComponentType) mixed with prefill/decode workers: "
                + listing(w.name for w in workers),
            )
        for have, need in (("prefill", "decode"), ("decode", "prefill")):
            if have in roles and need not in roles:
                self.add(
                    "spec.services",
                    f"a {have} worker needs a {need} worker (subComponentType: {need}); "
                    f"got workers {listing(w.name for w in workers)}",
                )
        backends = sorted({w.backend for w in workers if w.backend})
        if len(backends) > 1:
            self.add(
                "spec.services",
                f"workers of different backends ({', '.join(backends)}): "
                + listing(w.name for w in workers),
            )

    def _worker_checks(self, w: _Worker) -> None:
        svc = w.service
        role = svc.subComponentType
        if role is not None and role not in _ROLE_SUFFIX:
            self.add(f"{w.path}.subComponentType", f"expected prefill or decode, got {shown(role)}")
        elif w.backend is None or _NAME_TO_WORKER[w.name][1] != role:
            names = " / ".join(p + _ROLE_SUFFIX[role] for p in _BACKEND_PREFIX.values())
            kind = f"subComponentType {role}" if role else "no subComponentType"
            self.add(w.path, f"a worker with {kind} must be named {names}")
        if w.engine is not None and w.backend is not None and w.engine.module is not None:
            if w.engine.module.startswith("dynamo.") and w.engine.module != f"dynamo.{w.backend}":
                self.add(
                    f"{w.path}.extraPodSpec.mainContainer",
                    f"runs {w.engine.module}, but {w.name} is a dynamo.{w.backend} worker",
                )
        if svc.replicas is None:
            self.add(f"{w.path}.replicas", "required for a worker, but not given")
        else:
            self._replicas(f"{w.path}.replicas", svc.replicas)
        if w.engine is not None:
            self._engine_ranges(w)
        gpu_path = f"{w.path}.resources.limits.gpu"
        gpu = svc.resources.limits.gpu if svc.resources and svc.resources.limits else None
        if gpu is None:
            self.add(gpu_path, "required for a worker, but not given")
        elif not (gpu.isascii() and gpu.isdigit() and int(gpu) > 0):
            self.add(gpu_path, f"expected a positive whole number of GPUs, got {shown(gpu)}")
        elif w.backend is not None:
            self._gpu_matches_engine(w, int(gpu), gpu_path)
        if w.backend == "trtllm" and w.engine is not None:
            self._trtllm_config(w, role)

    def _replicas(self, path: str, replicas: int) -> None:
        """Replicas of a service: at least one, at most the workers a replay can hold."""
        if not 1 <= replicas <= LIMITS["max_workers"]:
            self.add(path, f"expected 1 to {LIMITS['max_workers']:,}, got {shown(replicas)}")

    def _engine_ranges(self, w: _Worker) -> None:
        """A block size and a context length a deployment can have (the candidate's rules)."""
        for key, problem in (
            ("block_size", block_size_problem),
            ("context_length", context_length_problem),
        ):
            setting = w.setting(key)
            if setting is None:
                continue
            value = _int_value(setting, human=key == "context_length" and w.backend == "vllm")
            if value is not None and (why := problem(value)):
                self.add(setting.path, f"{setting.name}: {why}")

    def _parallel(self, w: _Worker, key: str) -> int | None:
        setting = w.setting(key)
        if setting is None:
            return 1
        value = _int_value(setting)
        if value is None or value < 1:
            self.add(
                setting.path,
                f"{setting.name}: expected a positive integer, got {shown(setting.value)}",
            )
        return value

    def _gpu_matches_engine(self, w: _Worker, gpu: int, path: str) -> None:
        """GPUs = tensor x pipeline x data parallel size, as the worker's engine reads them."""
        keys = ("tp", "pp") if w.backend == "trtllm" else ("tp", "pp", "dp")
        # A TensorRT-LLM engine config outside the manifest (an image or PVC file) hides the
        # sizes; defaults would then be a guess, so the check needs at least one size seen.
        if w.engine is None or (w.backend == "trtllm" and not any(w.setting(k) for k in keys)):
            return
        sizes = [self._parallel(w, k) for k in keys]
        if None in sizes:
            return
        product = 1
        for size in sizes:
            product *= size  # type: ignore[operator]
        if product != gpu:
            how = " x ".join(
                f"{_SETTING_NAMES[k].split()[0]} {s}" for k, s in zip(keys, sizes, strict=True)
            )
            self.add(path, f'expected "{product}", got "{gpu}" ({how} from the engine arguments)')

    def _trtllm_config(self, w: _Worker, role: str | None) -> None:
        if w.config is None:
            return
        file, config, where = w.config
        if config is None:
            self.add(
                where,
                f"--extra-engine-args {file}: the engine config is not in the manifest as a "
                "YAML mapping (no heredoc writes it and no ConfigMap volume mounts it)",
            )
        elif role in ("prefill", "decode") and not config.get("cache_transceiver_config"):
            self.add(
                where,
                f"engine config {file}: no cache_transceiver_config; a TensorRT-LLM "
                f"{role} worker needs it to transfer KV between prefill and decode",
            )

    # --- against the simulated candidate ---

    def _candidate(self, cand: Candidate, workers: list[_Worker], kinds: Mapping[str, Any]) -> None:
        roles = cand.roles()
        expected = {worker_service_name(cand.backend, role): role for role in roles}
        actual = [n for n, k in kinds.items() if k == "worker"]
        if sorted(actual) != sorted(expected):
            self.add(
                "spec.services",
                f"expected worker services {', '.join(expected)} for a {cand.mode} "
                f"{cand.backend} candidate, got {listing(actual) or 'none'}",
            )
        by_name = {w.name: w for w in workers}
        for name, role in expected.items():
            if name in by_name:
                self._role(cand, role, roles[role], by_name[name])

    def _role(self, cand: Candidate, role: str, spec: WorkerRole, w: _Worker) -> None:
        svc = w.service
        if svc.replicas is not None and svc.replicas != spec.replicas:
            self.add(
                f"{w.path}.replicas",
                f"expected {spec.replicas} (candidate {role}.replicas), got {shown(svc.replicas)}",
            )
        gpu = svc.resources.limits.gpu if svc.resources and svc.resources.limits else None
        if gpu is not None and gpu != str(spec.gpus_per_worker):
            self.add(
                f"{w.path}.resources.limits.gpu",
                f'expected "{spec.gpus_per_worker}", got "{gpu}" (candidate {role}: tensor '
                f"{spec.tensor_parallel_size} x pipeline {spec.pipeline_parallel_size} x data "
                f"{spec.data_parallel_size})",
            )
        if w.engine is None:
            self.add(
                f"{w.path}.extraPodSpec.mainContainer",
                "required to check the engine settings of the candidate, but not given",
            )
            return
        wanted = {
            "tp": (spec.tensor_parallel_size, f"{role}.tensor_parallel_size"),
            "pp": (spec.pipeline_parallel_size, f"{role}.pipeline_parallel_size"),
            "block_size": (cand.block_size, "block_size"),
            "context_length": (cand.context_length, "context_length"),
            "max_batch_size": (spec.max_batch_size, f"{role}.max_batch_size"),
        }
        if cand.backend != "trtllm":  # TensorRT-LLM has no data parallel size of its own
            wanted["dp"] = (spec.data_parallel_size, f"{role}.data_parallel_size")
        if spec.max_num_tokens is not None:  # None: left to the engine
            wanted["max_num_tokens"] = (spec.max_num_tokens, f"{role}.max_num_tokens")
        if cand.backend == "vllm":
            self._vllm_expert_parallel(w, role, spec)
        else:
            wanted["ep"] = (spec.expert_parallel_size, f"{role}.expert_parallel_size")
        for key, (value, field) in wanted.items():
            self._engine_setting(w, key, value, field)
        self._prefix_caching(w)
        if cand.backend == "sglang":
            self._sglang_chunks(w, role, spec)
        elif spec.chunked_prefill is not None:
            self._chunked_prefill(w, role, spec.chunked_prefill)

    def _chunked_prefill(self, w: _Worker, role: str, want: bool) -> None:
        """Chunked prefill on or off as simulated: vLLM's flags (on unless
        --no-enable-chunked-prefill: vLLM's default), TensorRT-LLM's engine config key
        (off unless enable_chunked_prefill: true, TensorRT-LLM's default)."""
        assert w.engine is not None
        setting: _Setting | None
        if w.backend == "vllm":
            setting = w.engine.flag("--enable-chunked-prefill", "--no-enable-chunked-prefill")
            on = setting is None or setting.name == "--enable-chunked-prefill"
            default = "vLLM's default, on"
        else:
            if w.config is None or w.config[1] is None:
                return  # no engine config in the manifest: reported by the structural checks
            file, config, where = w.config
            found, value = _nested(config, "enable_chunked_prefill")
            setting = None
            if found:
                setting = _Setting(value, where, f"engine config {file}: enable_chunked_prefill")
                if not isinstance(value, bool):
                    self.add(where, f"{setting.name}: expected true or false, got {shown(value)}")
                    return
            on = bool(value)
            default = "TensorRT-LLM's default, off"
        if on == want:
            return
        states = ("off", "on") if want else ("on", "off")
        if setting is None:
            self.add(
                f"{w.path}.extraPodSpec.mainContainer",
                f"chunked prefill not set, so {default}; expected {states[1]} (candidate "
                f"{role}.chunked_prefill, simulated {states[1]})",
            )
            return
        self.add(
            setting.path,
            f"{setting.name} turns chunked prefill {states[0]}, but the candidate "
            f"{role}.chunked_prefill is {states[1]} (simulated {states[1]})",
        )

    def _sglang_chunks(self, w: _Worker, role: str, spec: WorkerRole) -> None:
        """SGLang's --chunked-prefill-size as simulated: the candidate's chunk size (-1 turns
        chunking off, which the simulation never does)."""
        if spec.chunk_size is None:
            return
        setting = w.setting("chunk_size")
        if setting is None:
            self.add(
                f"{w.path}.extraPodSpec.mainContainer",
                f"chunk size not set ({w.wanted('chunk_size')}); expected {spec.chunk_size} "
                f"(candidate {role}.chunk_size)",
            )
            return
        text = str(setting.value).strip()
        if text.startswith("-") and text[1:].isdigit():
            self.add(
                setting.path,
                f"{setting.name} {text} turns chunked prefill off, but the candidate was "
                f"simulated chunking prompts at {spec.chunk_size} tokens ({role}.chunk_size)",
            )
            return
        self._engine_setting(w, "chunk_size", spec.chunk_size, f"{role}.chunk_size")

    def _vllm_expert_parallel(self, w: _Worker, role: str, spec: WorkerRole) -> None:
        """vLLM splits experts over all of a worker's GPUs or not at all (a flag, no size)."""
        assert w.engine is not None
        on = w.engine.flag("--enable-expert-parallel", "-ep")
        split = spec.expert_parallel_size != 1
        if split and on is None:
            self.add(
                f"{w.path}.extraPodSpec.mainContainer",
                "expert parallelism not enabled (--enable-expert-parallel); expected on "
                f"(candidate {role}.expert_parallel_size {spec.expert_parallel_size})",
            )
        elif on is not None and not split:
            self.add(
                on.path,
                f"{on.name} splits the experts over the worker's "
                f"{spec.tensor_parallel_size * spec.data_parallel_size} GPUs, but candidate "
                f"{role}.expert_parallel_size is 1",
            )

    def _engine_setting(self, w: _Worker, key: str, want: int | None, field: str) -> None:
        setting = w.setting(key)
        where = f"{w.path}.extraPodSpec.mainContainer"
        if setting is None:
            if key in ("tp", "pp", "dp", "ep") and want == 1:
                return  # the engines' default is 1
            if w.backend == "trtllm" and w.config is not None and w.config[1] is None:
                return  # the engine config named is not in the manifest: reported once already
            if want is None:
                self.add(
                    where,
                    f"{_SETTING_NAMES[key]} not set ({w.wanted(key)}); the candidate leaves it "
                    "to the workload, so the manifest must carry one",
                )
            else:
                self.add(
                    where,
                    f"{_SETTING_NAMES[key]} not set ({w.wanted(key)}); expected {want} "
                    f"(candidate {field})",
                )
            return
        got = _int_value(setting, human=key == "context_length" and w.backend == "vllm")
        if got is None and key in ("tp", "pp", "dp"):
            return  # a parallel size that is not a number is reported by the GPU check
        if got is None:
            self.add(
                setting.path,
                f"{setting.name}: expected an integer, got {shown(setting.value)}",
            )
        elif want is not None and got != want:
            self.add(
                setting.path,
                f"{setting.name}: expected {want} (candidate {field}), got {shown(got)}",
            )

    def _prefix_caching(self, w: _Worker) -> None:
        """dynosim simulates a prefix-sharing KV cache, so the engine must share prefixes too."""
        assert w.engine is not None
        off = None
        if w.backend == "vllm":
            off = w.engine.flag("--no-enable-prefix-caching")
        elif w.backend == "sglang":
            off = w.engine.flag("--disable-radix-cache")
        elif w.backend == "trtllm" and w.config and w.config[1]:
            file, config, where = w.config
            found, reuse = _nested(config, "kv_cache_config.enable_block_reuse")
            if found and reuse is False:
                off = _Setting(
                    reuse, where, f"engine config {file}: kv_cache_config.enable_block_reuse: false"
                )
        if off is not None:
            self.add(
                off.path,
                f"{off.name} turns prefix caching off, but the candidate was simulated with a "
                "prefix-sharing KV cache",
            )


def _try(model: type[_Part], value: Any) -> Any:
    try:
        return model.model_validate(value)
    except ValidationError:
        return None


def _as_candidate(candidate: Candidate | Mapping[str, Any] | str | os.PathLike[str] | None):
    if candidate is None or isinstance(candidate, Candidate):
        return candidate
    if isinstance(candidate, Mapping):
        return Candidate.model_validate(dict(candidate))
    if isinstance(candidate, str | os.PathLike):
        return load_candidate(candidate)
    raise ConfigError(
        f"candidate: expected a Candidate, a mapping or a file path, got {type(candidate).__name__}"
    )


def validate_manifest(
    text_or_path: str | os.PathLike[str],
    candidate: Candidate | Mapping[str, Any] | str | os.PathLike[str] | None = None,
) -> list[Problem]:
    """Check a DGD manifest and return its problems (an empty list: no problem found).

    ``text_or_path`` is the manifest text (a ``str`` spanning lines, or a JSON object) or a path
    to it (a ``str`` of one line, or any ``os.PathLike``); an unreadable file raises
    :class:`~dynosim.errors.ManifestError`. The manifest is multi-document YAML; documents
    other than the DGD (ConfigMaps, ComputeDomains, ...) may accompany it.

    Structural checks, without a candidate:

    * the text is valid YAML and every document is a mapping with a ``kind``;
    * exactly one ``DynamoGraphDeployment`` document, ``apiVersion: nvidia.com/v1alpha1``;
    * ``metadata.name`` present and, like ``metadata.namespace`` when given, an RFC 1123
      label; ``spec.services`` a non-empty mapping of services, each with a ``componentType``;
    * field types of the parts checked: ``replicas`` an integer, ``resources.limits.gpu`` a
      string, container ``command``/``args`` lists of strings;
    * exactly one service with ``componentType: frontend``; at least one ``worker``;
    * workers: ``subComponentType`` absent (aggregated) or ``prefill``/``decode``; not both
      aggregated and disaggregated workers; a prefill worker has a decode worker and back;
    * worker names per backend and role (``VllmWorker``, ``VllmPrefillWorker``,
      ``VllmDecodeWorker``, and ``SGLang*``, ``TRTLLM*`` likewise), all of one backend, and
      the ``dynamo.<backend>`` module a worker runs matches its name;
    * ``replicas`` >= 1 (required on workers);
    * ``resources.limits.gpu`` on every worker: a string holding a positive integer equal to
      tensor x pipeline x data parallel size read from the worker's engine arguments (flags,
      or for TensorRT-LLM its engine config file, found in a heredoc or a mounted ConfigMap);
    * a TensorRT-LLM worker's ``--extra-engine-args`` file is in the manifest, and a
      disaggregated one carries ``cache_transceiver_config``.

    With ``candidate`` (a :class:`~dynosim.deploy.Candidate`, a mapping or a YAML/JSON file
    path), the manifest must deploy what was simulated: exactly the candidate's worker roles
    (by service name), and per role its replicas, GPUs per worker (``"tp*pp*dp"``), tensor /
    pipeline / data / expert parallel sizes (vLLM: ``--enable-expert-parallel`` exactly when
    the experts are split), block size, context length (set, and equal to the
    candidate's when it has one), max batch size, prefix caching left on, and the engine
    settings the candidate gives: the pass token budget (vLLM ``--max-num-batched-tokens``,
    TensorRT-LLM ``max_num_tokens``, SGLang ``--max-prefill-tokens``), chunked prefill on or
    off (vLLM's flags, on by default; TensorRT-LLM's ``enable_chunked_prefill``, off by
    default) and SGLang's ``--chunked-prefill-size`` (-1, chunking off, is an error).
    """
    cand = _as_candidate(candidate)
    docs, problems = _documents(_read(text_or_path))
    if problems:
        return problems
    return _Checker(docs).run(cand)
