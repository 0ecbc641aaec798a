"""KV-cache capacity: KV bytes per token from a model's geometry, and ``num_gpu_blocks`` from GPU
memory, a memory fraction, the model weights and the KV bytes per token.

A model is named either by an AIConfigurator model name (``Qwen/Qwen3-32B``: its bundled
Hugging Face ``config.json``, needs the ``aic`` extra) or by the path of a Hugging Face
``config.json`` (or of a directory holding one). Sizes are bytes; ``GB`` is 1e9 bytes, as
everywhere in dynosim.

With tensor parallelism (TP) each GPU holds ``ceil(kv_heads / tp)`` KV heads: when a model has
fewer KV heads than GPUs, engines replicate a head on several GPUs rather than split it, so a GPU
still holds one whole head (vLLM and TensorRT-LLM do this; AIC models it the same way). An MLA
model (DeepSeek-style latent KV) stores one latent of ``kv_lora_rank + qk_rope_head_dim`` values
per layer and token that every TP rank keeps whole. Models whose KV per token is not one constant
(sliding-window or linear-attention layers, hybrid Mamba stacks, compressed attention, layers of
different shapes) are refused: give their KV bytes per token yourself.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from dynosim._defaults import DEFAULT_GPU_MEMORY_UTILIZATION
from dynosim.config import KvShape
from dynosim.errors import ConfigError

#: Hugging Face ``torch_dtype`` names -> bytes per element.
_DTYPE_BYTES = {
    "float32": 4,
    "fp32": 4,
    "bfloat16": 2,
    "float16": 2,
    "bf16": 2,
    "fp16": 2,
    "half": 2,
    "float8_e4m3fn": 1,
    "float8_e5m2": 1,
    "fp8": 1,
}

#: Config keys that mean the KV per token is not one constant (see the module doc).
_NON_UNIFORM_KEYS = (
    "hybrid_override_pattern",
    "compress_ratios",
    "block_configs",
    "linear_attn_config",
)


@dataclass(frozen=True)
class KvCapacity:
    """The KV capacity of one rank (``tp`` GPUs); bytes unless noted.

    ``kv_memory_bytes_per_gpu`` = gpu_memory_bytes x memory_fraction - (weights_bytes_per_gpu +
    activation_bytes + runtime_bytes + comm_bytes), and ``num_gpu_blocks`` = floor(that /
    (kv_bytes_per_token_per_gpu x block_size)). ``source`` says how the memory was counted:
    ``aic`` (AIConfigurator's memory model of the engine, as vLLM sizes its cache: weights, the
    activation peak of a ``max_num_batched_tokens`` pass, the runtime's own memory and the
    communication buffers), or ``weights`` (weights only; the other terms are 0).
    """

    model: str
    system: str
    tp: int
    gpu_memory_bytes: int
    memory_fraction: float
    weights_bytes: int
    weights_bytes_per_gpu: float
    kv_bytes_per_token: int
    kv_bytes_per_token_per_gpu: int
    kv_memory_bytes_per_gpu: float
    block_size: int
    num_gpu_blocks: int
    dp: int = 1
    ep: int = 1
    activation_bytes: float = 0.0
    runtime_bytes: float = 0.0
    comm_bytes: float = 0.0
    source: str = "weights"

    @property
    def kv_tokens(self) -> int:
        """Tokens the cache holds (``num_gpu_blocks * block_size``)."""
        return self.num_gpu_blocks * self.block_size

    def to_dict(self) -> dict[str, Any]:
        """All fields plus ``kv_tokens``, as plain values."""
        return {**asdict(self), "kv_tokens": self.kv_tokens}


def _check_int(name: str, value: Any, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ConfigError(f"{name} must be an integer >= {minimum}, got {value!r}")


def _check_positive(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(f"{name} must be a number, got {value!r}")
    if not math.isfinite(value) or value <= 0:
        raise ConfigError(f"{name} must be finite and > 0, got {value!r}")
    return float(value)


def is_model_file(model: str | os.PathLike[str]) -> bool:
    """Whether ``model`` names a config file (or directory) rather than an AIC model."""
    return isinstance(model, os.PathLike) or str(model).endswith(".json") or Path(model).exists()


def load_model_config(model: str | os.PathLike[str]) -> tuple[dict[str, Any], str]:
    """A model's Hugging Face config and a label naming where it came from.

    ``model`` is a ``config.json`` path, a directory holding one, or an AIConfigurator model name.
    Vision-language configs are flattened so the language model's fields (``text_config``) are
    at the top.

    Raises:
        ConfigError: the file cannot be read or parsed, or the name is not an AIC model.
        MissingExtraError: ``model`` is not a file and AIConfigurator is not installed.
    """
    path = Path(model)
    if path.is_dir():
        path = path / "config.json"
    if path.is_file():
        try:
            config = json.loads(path.read_text())
        except (OSError, ValueError) as e:
            raise ConfigError(f"{path}: cannot read the model config: {e}") from None
        label = str(path)
    elif is_model_file(model):
        raise ConfigError(f"{path}: no such model config file")
    else:
        from dynosim.aic import bundled_model_config

        config = bundled_model_config(str(model))
        label = f"AIC model {model}"
    if not isinstance(config, dict):
        raise ConfigError(f"{label}: a model config must be a JSON object")
    text = config.get("text_config")
    return ({**text, **config} if isinstance(text, dict) else config), label


def _field(config: dict[str, Any], label: str, *keys: str) -> int | None:
    """The first of ``keys`` holding a positive integer; a non-integer value is an error."""
    for key in keys:
        value = config.get(key)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise ConfigError(f"{label}: {key} must be a positive integer, got {value!r}")
        return value
    return None


def _require(config: dict[str, Any], label: str, *keys: str) -> int:
    value = _field(config, label, *keys)
    if value is None:
        raise ConfigError(f"{label}: missing {' / '.join(keys)}")
    return value


def config_dtype_bytes(config: dict[str, Any], label: str) -> int:
    """Bytes per element of the config's ``torch_dtype`` (or ``dtype``)."""
    name = config.get("torch_dtype") or config.get("dtype")
    if name is None:
        raise ConfigError(f"{label}: no torch_dtype; give dtype_bytes")
    key = str(name).lower().removeprefix("torch.")
    if key not in _DTYPE_BYTES:
        raise ConfigError(f"{label}: unknown torch_dtype {name!r}; give dtype_bytes")
    return _DTYPE_BYTES[key]


def _check_uniform(config: dict[str, Any], label: str) -> None:
    """Refuse configs whose KV per token is not one constant (module doc)."""
    for key in _NON_UNIFORM_KEYS:
        if config.get(key):
            raise ConfigError(
                f"{label}: {key} means KV bytes per token differ between layers or grow "
                "non-linearly; give the KV bytes per token instead"
            )
    layer_types = config.get("layer_types")
    if isinstance(layer_types, list):
        other = sorted({str(t) for t in layer_types} - {"full_attention", "attention"})
        if other:
            raise ConfigError(
                f"{label}: layer_types has {', '.join(other)} layers besides full attention; "
                "their KV is not per token; give the KV bytes per token instead"
            )
    if config.get("sliding_window") and config.get("use_sliding_window") is not False:
        raise ConfigError(
            f"{label}: sliding_window={config['sliding_window']} bounds the KV per sequence; "
            "give the KV bytes per token instead"
        )


def kv_geometry(
    model: str | os.PathLike[str], *, dtype_bytes: int | None = None, backend: str = "trtllm"
) -> KvShape:
    """The KV layout of ``model`` (an AIC model name or a ``config.json`` path).

    Reads ``num_hidden_layers``, ``num_key_value_heads`` (else ``num_attention_heads``) and
    ``head_dim`` (else ``hidden_size / num_attention_heads``); an MLA config (``kv_lora_rank``)
    gives a latent of ``kv_lora_rank + qk_rope_head_dim``.

    Args:
        model: AIC model name, or path of a Hugging Face ``config.json`` (or its directory).
        dtype_bytes: bytes per KV element; None: for an AIC model the KV cache dtype AIC infers
            for ``backend`` (fp8 for an fp8 checkpoint), else the config's ``torch_dtype``.
        backend: the AIC backend whose KV dtype inference applies (AIC models only).
    """
    config, label = load_model_config(model)
    _check_uniform(config, label)
    if dtype_bytes is None:
        if is_model_file(model):
            dtype_bytes = config_dtype_bytes(config, label)
        else:
            from dynosim.aic.models import kv_dtype_bytes

            dtype_bytes = kv_dtype_bytes(str(model), backend)
    _check_int("dtype_bytes", dtype_bytes, 1)
    layers = _require(config, label, "num_hidden_layers")
    if config.get("kv_lora_rank"):
        latent = _require(config, label, "kv_lora_rank") + _require(
            config, label, "qk_rope_head_dim"
        )
        return KvShape(
            num_layers=layers, num_kv_heads=1, head_dim=latent, dtype_bytes=dtype_bytes, latent=True
        )
    heads = _require(config, label, "num_attention_heads")
    kv_heads = _field(config, label, "num_key_value_heads") or heads
    head_dim = _field(config, label, "head_dim")
    if head_dim is None:
        hidden = _require(config, label, "hidden_size")
        if hidden % heads:
            raise ConfigError(
                f"{label}: no head_dim, and hidden_size {hidden} is not a multiple of "
                f"num_attention_heads {heads}"
            )
        head_dim = hidden // heads
    return KvShape(
        num_layers=layers, num_kv_heads=kv_heads, head_dim=head_dim, dtype_bytes=dtype_bytes
    )


def kv_bytes_per_token(
    model: str | os.PathLike[str],
    *,
    tp: int = 1,
    dtype_bytes: int | None = None,
    backend: str = "trtllm",
) -> int:
    """KV bytes of one token on one GPU: layers x 2 x ceil(kv heads / tp) x head dim x dtype
    bytes (MLA: layers x latent width x dtype bytes). ``tp=1`` gives the whole model's KV per
    token, what a prefill-to-decode transfer moves. Arguments as :func:`kv_geometry`."""
    _check_int("tp", tp, 1)
    return kv_geometry(model, dtype_bytes=dtype_bytes, backend=backend).bytes_per_token(tp)


def model_weight_bytes(
    model: str | os.PathLike[str], *, backend: str = "trtllm", dtype_bytes: int | None = None
) -> int:
    """The whole model's weight bytes (all TP ranks together).

    An AIC model: AIC's own count (the sum of its operators' weights, in the checkpoint's
    quantization, as AIC's memory model uses). A ``config.json``: the matrices of a dense
    decoder (embedding, untied output head, q/k/v/o projections and a gated MLP of
    3 x hidden x intermediate per layer; norms and biases, well under 0.01 %, are left out as AIC
    does) times ``dtype_bytes`` (default: the config's ``torch_dtype``). Mixture-of-experts, MLA
    or quantized checkpoints given as a file are refused: give their weights instead.
    """
    if not is_model_file(model):
        from dynosim.aic.models import weight_bytes

        return weight_bytes(str(model), backend)
    config, label = load_model_config(model)
    for key in ("num_experts", "num_local_experts", "n_routed_experts", "kv_lora_rank"):
        if config.get(key):
            raise ConfigError(
                f"{label}: {key} is set; only dense decoders are counted from a config file; "
                "give weights_bytes"
            )
    if config.get("quantization_config"):
        raise ConfigError(
            f"{label}: a quantized checkpoint's weights are not torch_dtype wide; "
            "give weights_bytes"
        )
    _check_uniform(config, label)
    if dtype_bytes is None:
        dtype_bytes = config_dtype_bytes(config, label)
    _check_int("dtype_bytes", dtype_bytes, 1)
    hidden = _require(config, label, "hidden_size")
    layers = _require(config, label, "num_hidden_layers")
    vocab = _require(config, label, "vocab_size")
    inter = _require(config, label, "intermediate_size")
    heads = _require(config, label, "num_attention_heads")
    kv_heads = _field(config, label, "num_key_value_heads") or heads
    head_dim = _field(config, label, "head_dim") or hidden // heads
    attention = 2 * hidden * heads * head_dim + 2 * hidden * kv_heads * head_dim
    mlp = 3 * hidden * inter
    embeddings = vocab * hidden * (1 if config.get("tie_word_embeddings") else 2)
    return (embeddings + layers * (attention + mlp)) * dtype_bytes


def estimate_num_gpu_blocks(
    gpu_memory_gb: float,
    memory_fraction: float,
    weights_bytes: float,
    kv_bytes_per_token: float,
    block_size: int,
    tp: int = 1,
) -> int:
    """KV blocks one worker's cache holds: floor((GPU memory x fraction - weights / tp) /
    (KV bytes per token per GPU x block size)).

    Args:
        gpu_memory_gb: memory of one GPU (GB = 1e9 bytes).
        memory_fraction: share of it the engine may use for weights and KV cache, like vLLM's
            ``gpu_memory_utilization`` (a fraction of the total, not of what is left).
        weights_bytes: the whole model's weights, split evenly over the ``tp`` GPUs.
        kv_bytes_per_token: KV bytes of one token on ONE GPU
            (:func:`kv_bytes_per_token` with the same ``tp``).
        block_size: tokens per KV block.
        tp: tensor-parallel GPUs of the worker; a block spans all of them.

    Raises:
        ConfigError: an input is out of range, or the weights leave no room for one block
            (the message gives the figures).
    """
    gpu_memory_gb = _check_positive("gpu_memory_gb", gpu_memory_gb)
    memory_fraction = _check_positive("memory_fraction", memory_fraction)
    if memory_fraction > 1:
        raise ConfigError(f"memory_fraction must be in (0, 1], got {memory_fraction}")
    if isinstance(weights_bytes, bool) or not isinstance(weights_bytes, int | float):
        raise ConfigError(f"weights_bytes must be a number, got {weights_bytes!r}")
    if not math.isfinite(weights_bytes) or weights_bytes < 0:
        raise ConfigError(f"weights_bytes must be finite and >= 0, got {weights_bytes!r}")
    kv_bytes_per_token = _check_positive("kv_bytes_per_token", kv_bytes_per_token)
    _check_int("block_size", block_size, 1)
    _check_int("tp", tp, 1)
    budget = gpu_memory_gb * 1e9 * memory_fraction
    weights_per_gpu = weights_bytes / tp
    kv_memory = budget - weights_per_gpu
    block_bytes = kv_bytes_per_token * block_size
    blocks = math.floor(kv_memory / block_bytes) if kv_memory > 0 else 0
    if blocks < 1:
        raise ConfigError(
            f"the model does not fit: {weights_per_gpu / 1e9:.3f} GB of weights per GPU "
            f"({weights_bytes / 1e9:.3f} GB over tp={tp}) against {budget / 1e9:.3f} GB usable "
            f"({memory_fraction} of {gpu_memory_gb:g} GB) leave {kv_memory / 1e9:.3f} GB for "
            f"KV, less than one block of {block_bytes / 1e6:.3f} MB ({block_size} tokens x "
            f"{kv_bytes_per_token:g} B); raise tp or memory_fraction"
        )
    return blocks


def estimate_kv_capacity(
    model: str | os.PathLike[str],
    system: str,
    tp: int = 1,
    memory_fraction: float = DEFAULT_GPU_MEMORY_UTILIZATION,
    block_size: int = 64,
    dtype_bytes: int | None = None,
    *,
    backend: str = "trtllm",
    weights_bytes: int | None = None,
) -> KvCapacity:
    """The KV capacity of one ``tp``-GPU worker of ``model`` on the AIC ``system``.

    GPU memory comes from AIC's system spec (``gpu.mem_capacity``), the KV geometry from the
    model's config, the weights from :func:`model_weight_bytes` unless given.

    Args:
        model: AIC model name, or path of a Hugging Face ``config.json``.
        system: AIC system name (``h200_sxm``, ...); needs the ``aic`` extra.
        tp: tensor-parallel GPUs of one worker.
        memory_fraction: share of GPU memory for weights and KV (vLLM's
            ``gpu_memory_utilization``).
        block_size: tokens per KV block.
        dtype_bytes: bytes per KV element (None: see :func:`kv_geometry`).
        backend: AIC backend for AIC's KV dtype and weight inference.
        weights_bytes: the whole model's weights, overriding :func:`model_weight_bytes`.
    """
    from dynosim.aic import system_spec

    _check_int("tp", tp, 1)
    gpu_memory = int(system_spec(system)["gpu"]["mem_capacity"])
    geometry = kv_geometry(model, dtype_bytes=dtype_bytes, backend=backend)
    if weights_bytes is None:
        weights_bytes = model_weight_bytes(model, backend=backend)
    per_gpu = geometry.bytes_per_token(tp)
    blocks = estimate_num_gpu_blocks(
        gpu_memory / 1e9, memory_fraction, weights_bytes, per_gpu, block_size, tp
    )
    return KvCapacity(
        model=str(model),
        system=system,
        tp=tp,
        gpu_memory_bytes=gpu_memory,
        memory_fraction=memory_fraction,
        weights_bytes=int(weights_bytes),
        weights_bytes_per_gpu=weights_bytes / tp,
        kv_bytes_per_token=geometry.bytes_per_token(1),
        kv_bytes_per_token_per_gpu=per_gpu,
        kv_memory_bytes_per_gpu=gpu_memory * memory_fraction - weights_bytes / tp,
        block_size=block_size,
        num_gpu_blocks=blocks,
    )


def aic_kv_capacity(
    spec: Any,
    *,
    block_size: int,
    max_num_batched_tokens: int,
    max_num_seqs: int,
    gpu_memory_utilization: float = DEFAULT_GPU_MEMORY_UTILIZATION,
    cache_dir: Path | None = None,
) -> KvCapacity:
    """The KV capacity of one rank of the engine an ``aic`` timing section describes (model,
    system, backend, version and tp/dp/ep layout), as vLLM sizes its cache:
    ``gpu_memory_utilization`` (vLLM's default 0.9) of the GPU's memory, less the weights on
    one GPU, the activation peak of a ``max_num_batched_tokens`` pass of ``max_num_seqs``
    requests, the runtime's own memory and the communication buffers, all from
    AIConfigurator's memory model; the KV bytes per token per GPU follow the model's geometry.

    Raises:
        ConfigError: the fraction is not in (0, 1], the section is not one AIC supports, or the
            rank has no room for a block (the message gives the figures).
    """
    from dynosim._cache import default_cache_dir
    from dynosim.aic.models import kv_memory
    from dynosim.aic.target import resolve_aic_timing

    fraction = _check_positive("gpu_memory_utilization", gpu_memory_utilization)
    if fraction > 1:
        raise ConfigError(f"gpu_memory_utilization must be in (0, 1], got {fraction}")
    _check_int("block_size", block_size, 1)
    target = resolve_aic_timing(spec, Path(cache_dir or default_cache_dir()) / "aic")
    memory = kv_memory(
        target,
        gpu_memory_utilization=fraction,
        max_num_batched_tokens=max_num_batched_tokens,
        max_num_seqs=max_num_seqs,
    )
    parts = memory["memory_breakdown"]
    geometry = kv_geometry(spec.model_name, backend=spec.backend)
    per_gpu = geometry.bytes_per_token(spec.tp)
    kv_bytes = float(memory["total_kv_size_bytes"])
    blocks = math.floor(kv_bytes / (per_gpu * block_size)) if kv_bytes > 0 else 0
    # vLLM keeps one block of its pool as the null block no request ever holds.
    blocks -= target.backend == "vllm"
    if blocks < 1:
        raise ConfigError(
            f"{spec.model_name} at {target.layout()} does not fit {spec.system}: "
            f"{fraction} of {memory['total_gpu_capacity_bytes'] / 1e9:.3f} GB less "
            f"{parts['weights_bytes'] / 1e9:.3f} GB of weights, "
            f"{parts['activations_bytes'] / 1e9:.3f} GB of activations, "
            f"{parts['runtime_overhead_bytes'] / 1e9:.3f} GB for the runtime and "
            f"{parts['comm_overhead_bytes'] / 1e9:.3f} GB of communication buffers leaves no "
            f"block of {block_size} tokens x {per_gpu} B; raise tp or gpu_memory_utilization"
        )
    weights_per_gpu = float(parts["weights_bytes"])
    return KvCapacity(
        model=spec.model_name,
        system=spec.system,
        tp=spec.tp,
        dp=spec.dp,
        ep=spec.ep,
        gpu_memory_bytes=int(memory["total_gpu_capacity_bytes"]),
        memory_fraction=fraction,
        weights_bytes=model_weight_bytes(spec.model_name, backend=spec.backend),
        weights_bytes_per_gpu=weights_per_gpu,
        activation_bytes=float(parts["activations_bytes"]),
        runtime_bytes=float(parts["runtime_overhead_bytes"]),
        comm_bytes=float(parts["comm_overhead_bytes"]),
        kv_bytes_per_token=geometry.bytes_per_token(1),
        kv_bytes_per_token_per_gpu=per_gpu,
        kv_memory_bytes_per_gpu=kv_bytes,
        block_size=block_size,
        num_gpu_blocks=blocks,
        source="aic",
    )


__all__ = [
    "KvCapacity",
    "aic_kv_capacity",
    "config_dtype_bytes",
    "estimate_kv_capacity",
    "estimate_num_gpu_blocks",
    "is_model_file",
    "kv_bytes_per_token",
    "kv_geometry",
    "load_model_config",
    "model_weight_bytes",
]
