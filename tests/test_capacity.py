"""KV capacity: KV bytes per token from a model's geometry, and ``num_gpu_blocks`` from memory."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from conftest import needs_aic

from dynosim.capacity import (
    estimate_kv_capacity,
    estimate_num_gpu_blocks,
    kv_bytes_per_token,
    kv_geometry,
    model_weight_bytes,
)
from dynosim.config import KvShape
from dynosim.errors import ConfigError, MissingExtraError

#: Qwen3-32B's shape (its Hugging Face config.json, trimmed to what capacity reads).
QWEN3_32B = {
    "architectures": ["Qwen3ForCausalLM"],
    "hidden_size": 5120,
    "intermediate_size": 25600,
    "num_attention_heads": 64,
    "num_hidden_layers": 64,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "vocab_size": 151936,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "sliding_window": None,
    "use_sliding_window": False,
}

# Weights by hand (matrices only):
#   embedding + output head  2 x 151,936 x 5,120             =  1,555,824,640
#   per layer: q, o          2 x 5,120 x 64 x 128           =     83,886,080
#              k, v          2 x 5,120 x 8 x 128            =     10,485,760
#              gated MLP     3 x 5,120 x 25,600             =    393,216,000
#   64 layers x 487,587,840                                 = 31,205,621,760
#   parameters 32,761,446,400 x 2 bytes (bf16)              = 65,522,892,800
QWEN3_32B_WEIGHTS = 65_522_892_800


def write_config(tmp_path: Path, **changes) -> Path:
    config = {**QWEN3_32B, **changes}
    path = tmp_path / "config.json"
    path.write_text(json.dumps({k: v for k, v in config.items() if v is not ...}))
    return path


# ---- KV bytes per token -----------------------------------------------------------------------


def test_hf_config_kv_bytes_per_token(tmp_path):
    path = write_config(tmp_path)
    # 64 layers x 2 (K, V) x 8 heads x 128 x 2 bytes
    assert kv_bytes_per_token(path) == 262_144
    assert kv_bytes_per_token(str(path)) == 262_144
    assert kv_bytes_per_token(tmp_path) == 262_144  # a checkpoint directory
    assert kv_bytes_per_token(path, tp=2) == 131_072
    assert kv_bytes_per_token(path, tp=8) == 32_768
    # 8 KV heads on 16 GPUs: each GPU keeps one whole (replicated) head, as with tp=8.
    assert kv_bytes_per_token(path, tp=16) == 32_768
    assert kv_bytes_per_token(path, dtype_bytes=1) == 131_072  # an fp8 KV cache


def test_hf_config_fallbacks(tmp_path):
    # No num_key_value_heads: multi-head attention, 64 KV heads.
    path = write_config(tmp_path, num_key_value_heads=...)
    assert kv_geometry(path) == KvShape(num_layers=64, num_kv_heads=64, head_dim=128, dtype_bytes=2)
    # No head_dim: hidden_size / num_attention_heads = 80.
    path = write_config(tmp_path, head_dim=...)
    assert kv_bytes_per_token(path) == 64 * 2 * 8 * 80 * 2
    path = write_config(tmp_path, torch_dtype="float32")
    assert kv_bytes_per_token(path) == 524_288


def test_mla_latent_is_not_split_by_tp(tmp_path):
    path = write_config(tmp_path, num_hidden_layers=61, kv_lora_rank=512, qk_rope_head_dim=64)
    assert kv_geometry(path) == KvShape(
        num_layers=61, num_kv_heads=1, head_dim=576, dtype_bytes=2, latent=True
    )
    assert kv_bytes_per_token(path) == kv_bytes_per_token(path, tp=8) == 61 * 576 * 2


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"num_hidden_layers": ...}, r"config.json: missing num_hidden_layers"),
        ({"num_key_value_heads": 0}, r"num_key_value_heads must be a positive integer, got 0"),
        ({"torch_dtype": ...}, r"no torch_dtype; give dtype_bytes"),
        ({"torch_dtype": "int3"}, r"unknown torch_dtype 'int3'"),
        ({"head_dim": ..., "hidden_size": 5000}, r"hidden_size 5000 is not a multiple of"),
        (
            {"layer_types": ["full_attention", "sliding_attention"]},
            r"layer_types has sliding_attention layers besides full attention",
        ),
        ({"sliding_window": 4096, "use_sliding_window": ...}, r"sliding_window=4096 bounds"),
        ({"hybrid_override_pattern": "M-M*"}, r"hybrid_override_pattern means KV bytes"),
    ],
)
def test_unusable_configs_are_refused(tmp_path, changes, message):
    with pytest.raises(ConfigError, match=message):
        kv_bytes_per_token(write_config(tmp_path, **changes))


def test_unreadable_config_files(tmp_path):
    with pytest.raises(ConfigError, match=r"nope.json: no such model config file"):
        kv_bytes_per_token(tmp_path / "nope.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(ConfigError, match=r"bad.json: cannot read the model config"):
        kv_bytes_per_token(bad)
    bad.write_text("[1, 2]")
    with pytest.raises(ConfigError, match=r"a model config must be a JSON object"):
        kv_bytes_per_token(bad)
    with pytest.raises(ConfigError, match=r"tp must be an integer >= 1, got 0"):
        kv_bytes_per_token(write_config(tmp_path), tp=0)


def test_config_files_need_no_aic(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "aiconfigurator_core", None)
    path = write_config(tmp_path)
    assert kv_bytes_per_token(path) == 262_144
    assert model_weight_bytes(path) == QWEN3_32B_WEIGHTS
    with pytest.raises(MissingExtraError, match=r"pip install 'dynosim\[aic\]'"):
        kv_bytes_per_token("Qwen/Qwen3-32B")


@needs_aic
def test_aic_models_match_aic_own_kv_size():
    from aiconfigurator_core.sdk.config_builders import build_model_config
    from aiconfigurator_core.sdk.models import get_model

    for name, tp, expected in [
        ("Qwen/Qwen3-32B", 1, 262_144),
        ("Qwen/Qwen3-32B", 2, 131_072),
        ("Qwen/Qwen3-32B-FP8", 1, 131_072),  # AIC infers an fp8 KV cache for it
        ("meta-llama/Meta-Llama-3.1-8B", 8, 16_384),  # no head_dim: 4096 / 32
        ("deepseek-ai/DeepSeek-V3", 8, 35_136),  # MLA: 61 x (512 + 64) x 1 byte (fp8)
    ]:
        assert kv_bytes_per_token(name, tp=tp) == expected
        config = build_model_config(
            tp_size=tp, pp_size=1, attention_dp_size=1, moe_tp_size=1, moe_ep_size=tp
        )
        aic_bytes = get_model(name, config, "trtllm").get_kvcache_bytes_per_sequence(1)
        assert expected == aic_bytes, name


@needs_aic
def test_aic_model_errors():
    with pytest.raises(ConfigError, match=r'no model "Foo/Bar"; supported models: .*Qwen/Qwen3-8B'):
        kv_bytes_per_token("Foo/Bar")
    with pytest.raises(ConfigError, match=r"Qwen/Qwen3.5-27B: layer_types has linear_attention"):
        kv_bytes_per_token("Qwen/Qwen3.5-27B")


# ---- weights ----------------------------------------------------------------------------------


def test_dense_weights_from_a_config_file(tmp_path):
    assert model_weight_bytes(write_config(tmp_path)) == QWEN3_32B_WEIGHTS
    # Tied embeddings drop the output head: 151,936 x 5,120 parameters, 2 bytes each.
    tied = model_weight_bytes(write_config(tmp_path, tie_word_embeddings=True))
    assert tied == QWEN3_32B_WEIGHTS - 151_936 * 5_120 * 2


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"num_experts": 128}, r"num_experts is set; only dense decoders .* give weights_bytes"),
        ({"kv_lora_rank": 512, "qk_rope_head_dim": 64}, r"kv_lora_rank is set"),
        ({"quantization_config": {"quant_method": "fp8"}}, r"quantized checkpoint"),
        ({"vocab_size": ...}, r"missing vocab_size"),
    ],
)
def test_weights_that_a_config_cannot_give(tmp_path, changes, message):
    with pytest.raises(ConfigError, match=message):
        model_weight_bytes(write_config(tmp_path, **changes))


@needs_aic
def test_aic_weights_agree_with_the_hand_count(tmp_path):
    # AIC's own weight count (its memory model) is the same matrices-only count.
    assert model_weight_bytes("Qwen/Qwen3-32B") == QWEN3_32B_WEIGHTS
    assert model_weight_bytes("Qwen/Qwen3-32B-FP8") < QWEN3_32B_WEIGHTS * 0.55  # 1-byte GEMMs


# ---- blocks -----------------------------------------------------------------------------------


def test_num_gpu_blocks_by_hand():
    # 80 GB x 0.9 = 72e9; minus 16e9 of weights = 56e9; / (131,072 B x 16) = 26,702.88
    assert estimate_num_gpu_blocks(80, 0.9, 16e9, 131_072, 16) == 26_702
    # tp=2: 72e9 - 8e9 = 64e9 per GPU; / (65,536 B x 16) = 61,035.16
    assert estimate_num_gpu_blocks(80, 0.9, 16e9, 65_536, 16, tp=2) == 61_035
    # Exactly one block of room: (1e9 x 0.5 - 0.5e9 + 1,024) / 1,024 = 1
    assert estimate_num_gpu_blocks(1, 0.5, 0.5e9 - 1024, 64, 16) == 1


def test_a_model_that_does_not_fit_names_the_numbers():
    with pytest.raises(ConfigError) as e:
        estimate_num_gpu_blocks(24, 0.9, 70e9, 262_144, 64)
    assert str(e.value) == (
        "the model does not fit: 70.000 GB of weights per GPU (70.000 GB over tp=1) against "
        "21.600 GB usable (0.9 of 24 GB) leave -48.400 GB for KV, less than one block of "
        "16.777 MB (64 tokens x 262144 B); raise tp or memory_fraction"
    )
    with pytest.raises(ConfigError, match=r"leave 0.000 GB for KV"):
        estimate_num_gpu_blocks(1, 0.5, 0.5e9, 64, 16)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((0, 0.9, 1e9, 1024, 16), r"gpu_memory_gb must be finite and > 0, got 0"),
        ((80, 1.5, 1e9, 1024, 16), r"memory_fraction must be in \(0, 1\], got 1.5"),
        ((80, 0.9, -1.0, 1024, 16), r"weights_bytes must be finite and >= 0, got -1.0"),
        ((80, 0.9, 1e9, float("nan"), 16), r"kv_bytes_per_token must be finite and > 0"),
        ((80, 0.9, 1e9, 1024, 0), r"block_size must be an integer >= 1, got 0"),
        ((80, 0.9, 1e9, 1024, 16, 0), r"tp must be an integer >= 1, got 0"),
    ],
)
def test_block_inputs_are_checked(args, message):
    with pytest.raises(ConfigError, match=message):
        estimate_num_gpu_blocks(*args)


@needs_aic
def test_kv_capacity_on_an_aic_system(tmp_path):
    # h200_sxm: 151,397,597,184 B (141 GiB). 0.9 of it = 136,257,837,465.6; minus the weights
    # 65,522,892,800 = 70,734,944,665.6; / (262,144 B x 64) = 4,216.1 blocks.
    cap = estimate_kv_capacity("Qwen/Qwen3-32B", "h200_sxm", tp=1)
    assert cap.gpu_memory_bytes == 151_397_597_184
    assert cap.weights_bytes == QWEN3_32B_WEIGHTS
    assert cap.kv_bytes_per_token_per_gpu == cap.kv_bytes_per_token == 262_144
    assert cap.num_gpu_blocks == 4_216 and cap.kv_tokens == 4_216 * 64
    assert cap.kv_memory_bytes_per_gpu == pytest.approx(70_734_944_665.6)
    # The same from a config.json, and at tp=2: (136,257,837,465.6 - 32,761,446,400) /
    # (131,072 x 64) = 12,337.6.
    from_file = estimate_kv_capacity(write_config(tmp_path), "h200_sxm", tp=1)
    assert from_file.num_gpu_blocks == 4_216
    tp2 = estimate_kv_capacity("Qwen/Qwen3-32B", "h200_sxm", tp=2)
    assert (tp2.num_gpu_blocks, tp2.kv_bytes_per_token_per_gpu) == (12_337, 131_072)
    assert tp2.to_dict()["kv_tokens"] == 12_337 * 64
    given = estimate_kv_capacity("Qwen/Qwen3-32B", "h200_sxm", weights_bytes=0, block_size=16)
    assert given.num_gpu_blocks == int(151_397_597_184 * 0.9 // (262_144 * 16))


@needs_aic
def test_kv_capacity_errors():
    with pytest.raises(ConfigError, match=r'AIC has no system "h999"; systems: .*h200_sxm'):
        estimate_kv_capacity("Qwen/Qwen3-32B", "h999")
    # DeepSeek-V3 (fp8, 705.8 GB of weights) on one H200.
    with pytest.raises(ConfigError, match=r"does not fit: 705.762 GB of weights per GPU"):
        estimate_kv_capacity("deepseek-ai/DeepSeek-V3", "h200_sxm", tp=1)
