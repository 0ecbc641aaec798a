"""What AIConfigurator knows of a model beyond its config file: its weights and its KV-cache dtype
as AIC infers them for a backend (an fp8 checkpoint caches KV in fp8, for example)."""

from __future__ import annotations

import functools
from typing import Any

from dynosim._dependencies import aic_core
from dynosim.aic.database import bundled_model_config
from dynosim.errors import ConfigError


@functools.lru_cache(maxsize=32)
def _aic_model(model_name: str, backend: str) -> Any:
    """AIC's model object for ``model_name`` at TP 1 (weights and KV dtype as AIC infers them)."""
    bundled_model_config(model_name)  # a clear error for an unknown model
    builders = aic_core("sdk.config_builders")
    models = aic_core("sdk.models")
    config = builders.build_model_config(
        tp_size=1, pp_size=1, attention_dp_size=1, moe_tp_size=1, moe_ep_size=1
    )
    try:
        return models.get_model(model_name, config, backend)
    except Exception as e:  # AIC raises bare errors for models a backend cannot build
        raise ConfigError(f"AIConfigurator cannot build {model_name} for {backend}: {e}") from None


def kv_dtype_bytes(model_name: str, backend: str) -> int:
    """Bytes per KV element of ``model_name`` served by ``backend``, as AIC infers them."""
    return int(_aic_model(model_name, backend).config.kvcache_quant_mode.value.memory)


def weight_bytes(model_name: str, backend: str) -> int:
    """The whole model's weight bytes (all ranks together) by AIC's own count: the sum of its
    operators' weights in the checkpoint's quantization, as AIC's memory model uses."""
    return int(sum(op.get_weights() for op in _aic_model(model_name, backend).context_ops))


def kv_memory(
    target: Any,
    *,
    gpu_memory_utilization: float,
    max_num_batched_tokens: int,
    max_num_seqs: int,
) -> dict[str, Any]:
    """AIC's memory model of one rank of ``target`` (an :class:`~dynosim.aic.AicTarget`), as its
    engine sizes the KV cache: vLLM and SGLang take ``gpu_memory_utilization`` x GPU memory,
    less the weights on one GPU, the activation peak of a ``max_num_batched_tokens`` pass, the
    runtime's own memory and the communication buffers; TensorRT-LLM takes the fraction of the
    memory those leave free (its ``free_gpu_memory_fraction``). Returns AIC's figures (bytes,
    tokens)."""
    memory = aic_core("sdk.memory")
    # AIC's own rule of which fraction each engine reads.
    kind = memory._BACKEND_FRACTION_KIND[target.backend]
    try:
        return memory.estimate_kv_cache(
            target.model_name,
            target.system,
            target.backend,
            target.backend_version,
            max_num_tokens=max_num_batched_tokens,
            max_batch_size=max_num_seqs,
            memory_fraction_kind=kind,
            memory_fraction_value=gpu_memory_utilization,
            systems_path=target.systems_path,
            **target.aic_layout(),
        )
    except Exception as e:  # AIC raises bare errors for what it cannot size
        raise ConfigError(
            f"AIConfigurator cannot size the KV cache of {target.model_name} on {target.system} "
            f"at {target.layout()}: {e}"
        ) from None


__all__ = ["kv_dtype_bytes", "kv_memory", "weight_bytes"]
