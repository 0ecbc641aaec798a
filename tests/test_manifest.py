"""DGD manifest validation: every structural and candidate rule, broken once each.

The manifests here are written by hand in the shape AIC renders (test_deploy.py checks AIC's
real output), so these tests run without the ``aic`` extra.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
import yaml

import dynosim
from dynosim import Candidate, ManifestError, Problem, validate_manifest
from dynosim.cli import EXIT_FAILED, main

MODEL = "Qwen/Qwen3-32B"


def frontend() -> dict[str, Any]:
    return {
        "componentType": "frontend",
        "replicas": 1,
        "extraPodSpec": {
            "mainContainer": {"command": ["python3", "-m", "dynamo.frontend"], "args": []}
        },
    }


def vllm_worker(
    role: str | None, replicas: int, tp: int = 1, pp: int = 1, dp: int = 1, **over: Any
) -> dict[str, Any]:
    args = ["--model", MODEL, "--served-model-name", MODEL]
    args += ["--tensor-parallel-size", str(tp), "--pipeline-parallel-size", str(pp)]
    args += ["--data-parallel-size", str(dp), "--block-size", str(over.get("block", 32))]
    args += ["--max-model-len", str(over.get("ctx", 4500))]
    args += ["--max-num-seqs", str(over.get("batch", 64)), *over.get("extra", [])]
    if role:
        args += ["--disaggregation-mode", role]
    svc: dict[str, Any] = {"componentType": "worker"}
    if role:
        svc["subComponentType"] = role
    svc |= {
        "replicas": replicas,
        "resources": {"limits": {"gpu": str(tp * pp * dp)}},
        "extraPodSpec": {
            "mainContainer": {
                "image": "nvcr.io/nvidia/ai-dynamo/vllm-runtime:1.2.0",
                "command": ["python3", "-m", "dynamo.vllm"],
                "args": args,
            }
        },
    }
    return svc


def sglang_worker(role: str | None, replicas: int, tp: int = 1) -> dict[str, Any]:
    script = (
        "set -euo pipefail\nargs=(\n"
        f'  --model-path "{MODEL}"\n'
        f'  --tensor-parallel-size "{tp}" --page-size "32" --context-length "4500"'
        ' --max-running-requests "64"\n)\n'
        + (f"args+=(--disaggregation-mode {role})\n" if role else "")
        + 'exec python3 -m dynamo.sglang "${args[@]}"\n'
    )
    svc: dict[str, Any] = {"componentType": "worker", "replicas": replicas}
    if role:
        svc["subComponentType"] = role
    svc["resources"] = {"limits": {"gpu": str(tp)}}
    svc["extraPodSpec"] = {
        "mainContainer": {"command": ["/bin/bash", "-c"], "args": [script]},
    }
    return svc


def trtllm_config(role: str | None, tp: int = 1, **over: Any) -> str:
    lines = [
        "backend: pytorch",
        f"tensor_parallel_size: {tp}",
        "pipeline_parallel_size: 1",
        "max_batch_size: 64",
        "max_seq_len: 4500",
        "kv_cache_config:",
        "  free_gpu_memory_fraction: 0.8",
        f"  tokens_per_block: {over.get('block', 32)}",
        f"  enable_block_reuse: {over.get('reuse', 'True')}",
    ]
    if role and over.get("transceiver", True):
        lines += ["cache_transceiver_config:", "  backend: DEFAULT", "  max_tokens_in_buffer: 4000"]
    return "\n".join(lines) + "\n"


def trtllm_worker(role: str | None, replicas: int, tp: int = 1, **over: Any) -> dict[str, Any]:
    file = f"/workspace/engine_configs/{role or 'agg'}_config.yaml"
    script = (
        "set -euo pipefail\nmkdir -p /workspace/engine_configs\n"
        f"cat > {file} <<'YAML'\n{trtllm_config(role, tp, **over)}YAML\n"
        f'args=(\n  --model-path "{MODEL}"\n  --extra-engine-args "{file}"\n)\n'
        + (f"args+=(--disaggregation-mode {role})\n" if role else "")
        + 'exec python3 -m dynamo.trtllm "${args[@]}"\n'
    )
    svc: dict[str, Any] = {"componentType": "worker", "replicas": replicas}
    if role:
        svc["subComponentType"] = role
    svc["resources"] = {"limits": {"gpu": str(tp)}}
    svc["extraPodSpec"] = {
        "volumes": [{"name": "engine-configs", "emptyDir": {}}],
        "mainContainer": {
            "command": ["/bin/bash", "-c"],
            "args": [script],
            "volumeMounts": [{"name": "engine-configs", "mountPath": "/workspace/engine_configs"}],
        },
    }
    return svc


def dgd(services: dict[str, Any], name: str = "dynosim-agg") -> dict[str, Any]:
    return {
        "apiVersion": "nvidia.com/v1alpha1",
        "kind": "DynamoGraphDeployment",
        "metadata": {"name": name},
        "spec": {"services": {"Frontend": frontend(), **services}},
    }


def vllm_agg() -> dict[str, Any]:
    return dgd({"VllmWorker": vllm_worker(None, 3, tp=2)})


def vllm_disagg() -> dict[str, Any]:
    return dgd(
        {
            "VllmPrefillWorker": vllm_worker("prefill", 2, tp=2, batch=8),
            "VllmDecodeWorker": vllm_worker("decode", 1, tp=2, pp=2, batch=128),
        },
        name="dynosim-disagg",
    )


def trtllm_disagg() -> dict[str, Any]:
    return dgd(
        {
            "TRTLLMPrefillWorker": trtllm_worker("prefill", 2, tp=2),
            "TRTLLMDecodeWorker": trtllm_worker("decode", 1, tp=2),
        },
        name="dynosim-disagg",
    )


def dump(*docs: Any) -> str:
    return yaml.safe_dump_all(docs, sort_keys=False)


def candidate(backend: str, mode: str, **over: Any) -> Candidate:
    versions = {"vllm": "0.20.1", "sglang": "0.5.11", "trtllm": "1.3.0rc14"}
    data: dict[str, Any] = {
        "mode": mode,
        "model": MODEL,
        "system": "h200_sxm",
        "backend": backend,
        "backend_version": versions[backend],
        "block_size": 32,
        "context_length": 4500,
    }
    if mode == "aggregated":
        data["aggregated"] = {"replicas": 3, "tensor_parallel_size": 2, "max_batch_size": 64}
    elif backend == "trtllm":
        data["prefill"] = {"replicas": 2, "tensor_parallel_size": 2, "max_batch_size": 64}
        data["decode"] = {"replicas": 1, "tensor_parallel_size": 2, "max_batch_size": 64}
    else:
        data["prefill"] = {"replicas": 2, "tensor_parallel_size": 2, "max_batch_size": 8}
        data["decode"] = {
            "replicas": 1,
            "tensor_parallel_size": 2,
            "pipeline_parallel_size": 2,
            "max_batch_size": 128,
        }
    return Candidate.model_validate({**data, **over})


def problems(text: str, cand: Candidate | None = None) -> list[str]:
    return [str(p) for p in validate_manifest(text, cand)]


# --- well-formed manifests ------------------------------------------------------------


@pytest.mark.parametrize(
    ("build", "backend", "mode"),
    [
        (vllm_agg, "vllm", "aggregated"),
        (vllm_disagg, "vllm", "disaggregated"),
        (trtllm_disagg, "trtllm", "disaggregated"),
        (
            lambda: dgd({"SGLangWorker": sglang_worker(None, 3, tp=2)}),
            "sglang",
            "aggregated",
        ),
    ],
)
def test_a_manifest_that_deploys_its_candidate_has_no_problem(build, backend, mode):
    text = dump(build())
    assert problems(text) == []
    assert problems(text, candidate(backend, mode)) == []


def test_problem_prints_path_then_message():
    problem = Problem("spec.services.VllmWorker.replicas", "expected 3, got 2")
    assert str(problem) == "spec.services.VllmWorker.replicas: expected 3, got 2"


def test_a_path_a_pathlike_and_json_text_are_all_read(tmp_path):
    broken = vllm_agg()
    broken["spec"]["services"]["VllmWorker"]["replicas"] = 0
    file = tmp_path / "deploy.yaml"
    file.write_text(dump(broken))
    expected = ["spec.services.VllmWorker.replicas: expected 1 to 16,384, got 0"]
    assert problems(str(file)) == expected
    assert [str(p) for p in validate_manifest(file)] == expected
    assert problems(json.dumps(broken)) == expected  # one line of JSON is text, not a path


def test_an_unreadable_manifest_file_raises(tmp_path):
    with pytest.raises(ManifestError, match=r"missing\.yaml: cannot read the manifest"):
        validate_manifest(tmp_path / "missing.yaml")


def test_validation_reads_and_never_rewrites(tmp_path):
    file = tmp_path / "deploy.yaml"
    file.write_text(dump(vllm_agg()))
    before = file.read_bytes()
    validate_manifest(file, candidate("vllm", "aggregated", context_length=9999))
    assert file.read_bytes() == before


def test_unknown_fields_are_allowed_because_the_crd_grows():
    doc = vllm_agg()
    doc["spec"]["futureField"] = {"x": 1}
    doc["spec"]["services"]["VllmWorker"]["newKnob"] = True
    doc["spec"]["services"]["VllmWorker"]["resources"]["limits"]["memory"] = "80Gi"
    assert problems(dump(doc), candidate("vllm", "aggregated")) == []


def test_other_documents_may_accompany_the_dgd():
    domain = {"apiVersion": "resource.nvidia.com/v1beta1", "kind": "ComputeDomain"}
    assert problems(dump(vllm_agg(), domain)) == []


def trtllm_in_a_config_map(model: str = "x", **over: Any) -> list[dict[str, Any]]:
    """A disaggregated TensorRT-LLM DGD whose engine configs (``over`` their settings) a
    mounted ConfigMap holds: the DGD, then the ConfigMap."""
    doc = trtllm_disagg()
    config_map: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "engine-configs"},
        "data": {},
    }
    for name, role in (("TRTLLMPrefillWorker", "prefill"), ("TRTLLMDecodeWorker", "decode")):
        pod = doc["spec"]["services"][name]["extraPodSpec"]
        file = f"/workspace/engine_configs/{role}_config.yaml"
        pod["volumes"] = [{"name": "engine-configs", "configMap": {"name": "engine-configs"}}]
        pod["mainContainer"]["args"] = [
            f'args=(--model-path "{model}" --extra-engine-args "{file}")\n'
            'exec python3 -m dynamo.trtllm "${args[@]}"\n'
        ]
        config_map["data"][f"{role}_config.yaml"] = trtllm_config(role, tp=2, **over)
    return [doc, config_map]


def test_trtllm_engine_config_in_a_mounted_configmap_is_read():
    doc, config_map = trtllm_in_a_config_map(MODEL, block=64)
    text = dump(config_map, doc)
    assert problems(text, candidate("trtllm", "disaggregated", block_size=64)) == []
    assert problems(text, candidate("trtllm", "disaggregated")) == [
        "ConfigMap/engine-configs.data.prefill_config.yaml: engine config "
        "/workspace/engine_configs/prefill_config.yaml: kv_cache_config.tokens_per_block: "
        "expected 32 (candidate block_size), got 64",
        "ConfigMap/engine-configs.data.decode_config.yaml: engine config "
        "/workspace/engine_configs/decode_config.yaml: kv_cache_config.tokens_per_block: "
        "expected 32 (candidate block_size), got 64",
    ]


# --- structural rules, each broken once -----------------------------------------------

W = "spec.services.VllmWorker"
D = "spec.services.VllmDecodeWorker"
MC = "extraPodSpec.mainContainer"


def _set(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def edit(doc: dict[str, Any]) -> None:
        *parents, last = path.split("/")
        node = doc
        for key in parents:
            node = node[int(key)] if isinstance(node, list) else node[key]
        if value is _DELETE:
            del node[last]
        elif isinstance(node, list):
            node[int(last)] = value
        else:
            node[last] = value

    return edit


_DELETE = object()
_VW = "spec/services/VllmWorker"


def _rename(old: str, new: str) -> Callable[[dict[str, Any]], None]:
    def edit(doc: dict[str, Any]) -> None:
        services = doc["spec"]["services"]
        services[new] = services.pop(old)

    return edit


def _add_service(name: str, svc: dict[str, Any]) -> Callable[[dict[str, Any]], None]:
    return lambda doc: doc["spec"]["services"].__setitem__(name, svc)


STRUCTURAL = {
    "api version": (
        _set("apiVersion", "nvidia.com/v1beta1"),
        ['apiVersion: expected nvidia.com/v1alpha1, got "nvidia.com/v1beta1"'],
    ),
    "name missing": (
        _set("metadata/name", _DELETE),
        ["metadata.name: required, but not given"],
    ),
    "name not RFC 1123": (
        _set("metadata/name", "Dynosim_Agg"),
        [
            "metadata.name: expected an RFC 1123 label (at most 63 characters: lowercase "
            "letters, digits and '-', starting and ending with a letter or digit), "
            'got "Dynosim_Agg"'
        ],
    ),
    "namespace not RFC 1123": (
        _set("metadata/namespace", "-team"),
        [
            "metadata.namespace: expected an RFC 1123 label (at most 63 characters: lowercase "
            "letters, digits and '-', starting and ending with a letter or digit), "
            'got "-team"'
        ],
    ),
    "services empty": (
        _set("spec/services", {}),
        ["spec.services: expected at least one entry, got none"],
    ),
    "component type missing": (
        _set(f"{_VW}/componentType", _DELETE),
        [
            f"{W}.componentType: required, but not given",
            "spec.services: no service with componentType worker",
        ],
    ),
    "replicas not an integer": (
        _set(f"{_VW}/replicas", "3"),
        [f'{W}.replicas: expected an integer, got "3"'],
    ),
    "gpu not a string": (
        _set(f"{_VW}/resources/limits/gpu", 2),
        [f"{W}.resources.limits.gpu: expected a string, got 2"],
    ),
    "arg not a string": (
        _set(f"{_VW}/extraPodSpec/mainContainer/args/11", 32),
        [f"{W}.{MC}.args[11]: expected a string, got 32"],
    ),
    "no frontend": (
        _set("spec/services/Frontend", _DELETE),
        ["spec.services: expected exactly one service with componentType frontend, got none"],
    ),
    "two frontends": (
        _add_service("Frontend2", frontend()),
        [
            "spec.services: expected exactly one service with componentType frontend, "
            "got Frontend, Frontend2"
        ],
    ),
    "no worker": (
        _set(_VW, _DELETE),
        ["spec.services: no service with componentType worker"],
    ),
    "unknown subComponentType": (
        _set(f"{_VW}/subComponentType", "router"),
        [f'{W}.subComponentType: expected prefill or decode, got "router"'],
    ),
    "worker name not per backend": (
        _rename("VllmWorker", "MyWorker"),
        [
            "spec.services.MyWorker: a worker with no subComponentType must be named "
            "VllmWorker / SGLangWorker / TRTLLMWorker"
        ],
    ),
    "name does not match role": (
        _set(f"{_VW}/subComponentType", "decode"),
        [
            "spec.services: a decode worker needs a prefill worker (subComponentType: "
            "prefill); got workers VllmWorker",
            f"{W}: a worker with subComponentType decode must be named VllmDecodeWorker / "
            "SGLangDecodeWorker / TRTLLMDecodeWorker",
        ],
    ),
    "aggregated mixed with disaggregated": (
        _add_service("VllmPrefillWorker", vllm_worker("prefill", 1)),
        [
            "spec.services: aggregated workers (no subComponentType) mixed with prefill/decode "
            "workers: VllmWorker, VllmPrefillWorker",
            "spec.services: a prefill worker needs a decode worker (subComponentType: "
            "decode); got workers VllmWorker, VllmPrefillWorker",
        ],
    ),
    "two backends": (
        _add_service("SGLangWorker", sglang_worker(None, 1)),
        ["spec.services: workers of different backends (sglang, vllm): VllmWorker, SGLangWorker"],
    ),
    "module does not match name": (
        _set(f"{_VW}/extraPodSpec/mainContainer/command", ["python3", "-m", "dynamo.sglang"]),
        [f"{W}.{MC}: runs dynamo.sglang, but VllmWorker is a dynamo.vllm worker"],
    ),
    "replicas missing on a worker": (
        _set(f"{_VW}/replicas", _DELETE),
        [f"{W}.replicas: required for a worker, but not given"],
    ),
    "replicas zero": (
        _set(f"{_VW}/replicas", 0),
        [f"{W}.replicas: expected 1 to 16,384, got 0"],
    ),
    "frontend replicas zero": (
        _set("spec/services/Frontend/replicas", 0),
        ["spec.services.Frontend.replicas: expected 1 to 16,384, got 0"],
    ),
    "gpu missing": (
        _set(f"{_VW}/resources", _DELETE),
        [f"{W}.resources.limits.gpu: required for a worker, but not given"],
    ),
    "gpu not a count": (
        _set(f"{_VW}/resources/limits/gpu", "two"),
        [f'{W}.resources.limits.gpu: expected a positive whole number of GPUs, got "two"'],
    ),
    "gpu not tp*pp*dp": (
        _set(f"{_VW}/resources/limits/gpu", "4"),
        [
            f'{W}.resources.limits.gpu: expected "2", got "4" (tensor 2 x pipeline 1 x data 1 '
            "from the engine arguments)"
        ],
    ),
    "parallel size not a number": (
        _set(f"{_VW}/extraPodSpec/mainContainer/args/5", "two"),
        [f'{W}.{MC}.args[5]: --tensor-parallel-size: expected a positive integer, got "two"'],
    ),
}


@pytest.mark.parametrize("rule", list(STRUCTURAL))
def test_structural_rule_broken_once(rule):
    edit, expected = STRUCTURAL[rule]
    doc = vllm_agg()
    edit(doc)
    assert problems(dump(doc)) == expected


def test_invalid_yaml_names_line_and_column():
    text = dump(vllm_agg()) + "oops: [unclosed\n"
    (problem,) = validate_manifest(text)
    assert problem.path.startswith("line ") and ", column " in problem.path
    assert problem.message.startswith("not valid YAML: ")


def test_documents_must_be_kubernetes_objects():
    text = dump(vllm_agg(), ["a", "list"], {"metadata": {"name": "x"}})
    assert problems(text) == [
        'document 2: expected a mapping, got ["a", "list"]',
        "document 3: has no kind",
    ]


def test_a_kind_that_is_not_a_string_is_a_problem_not_a_crash(tmp_path, capsys):
    text = dump(vllm_agg(), {"kind": ["a"], "metadata": {"name": "x"}})
    assert problems(text) == ['document 2.kind: expected a string, got ["a"]']
    # Without any DGD, the kinds found are listed without the malformed one.
    assert problems(dump({"kind": ["a"]}, {"kind": 1}, {"kind": "ConfigMap"})) == [
        'document 1.kind: expected a string, got ["a"]',
        "document 2.kind: expected a string, got 1",
        "document 3 (ConfigMap).metadata: required, but not given",
        "kind: no DynamoGraphDeployment document (found: ConfigMap)",
    ]
    file = tmp_path / "m.yaml"
    file.write_text("kind: [a]\n")
    assert main(["validate", str(file)]) == EXIT_FAILED
    captured = capsys.readouterr()
    assert 'document 1.kind: expected a string, got ["a"]' in captured.out
    assert "Traceback" not in captured.err


def _nodes(node: Any, path: tuple[Any, ...] = ()):
    """Every path into a YAML document, the document itself first."""
    yield path
    items = (
        node.items()
        if isinstance(node, dict)
        else enumerate(node)
        if isinstance(node, list)
        else ()
    )
    for key, child in items:
        yield from _nodes(child, (*path, key))


@pytest.mark.parametrize(
    ("docs", "cand"),
    [
        ([vllm_disagg()], ("vllm", "disaggregated")),
        (trtllm_in_a_config_map(), ("trtllm", "disaggregated")),
    ],
    ids=["vllm", "trtllm-configmap"],
)
def test_any_field_of_the_wrong_type_is_a_problem_not_a_crash(docs, cand):
    """Every node of the documents replaced by a value of each YAML type (or its key by a
    non-string one): validation returns problems, it never raises."""
    import copy
    import datetime

    wrong = [["a"], {"a": 1}, 7, 1.5, True, None, datetime.date(2020, 1, 1)]
    bad_keys = [1, None]
    the_candidate = candidate(*cand)
    for d, doc in enumerate(docs):
        for path in list(_nodes(doc)):
            for change in [("value", v) for v in wrong] + [("key", k) for k in bad_keys]:
                mutated = copy.deepcopy(docs)
                if not path:
                    if change[0] == "key":
                        continue
                    mutated[d] = change[1]
                else:
                    parent = mutated[d]
                    for part in path[:-1]:
                        parent = parent[part]
                    if change[0] == "value":
                        parent[path[-1]] = change[1]
                    elif isinstance(parent, dict):
                        parent[change[1]] = parent.pop(path[-1])
                    else:
                        continue
                found = validate_manifest(dump(*mutated), the_candidate)
                assert all(isinstance(p, Problem) for p in found), (path, change)


def test_exactly_one_dgd():
    config_map = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}}
    assert problems(dump(config_map)) == [
        "kind: no DynamoGraphDeployment document (found: ConfigMap)"
    ]
    assert problems(dump(vllm_agg(), vllm_agg())) == [
        "document 2: a second DynamoGraphDeployment (the first is document 1); expected one"
    ]


def test_trtllm_disaggregated_worker_needs_cache_transceiver_config():
    doc = trtllm_disagg()
    doc["spec"]["services"]["TRTLLMDecodeWorker"] = trtllm_worker(
        "decode", 1, tp=2, transceiver=False
    )
    assert problems(dump(doc)) == [
        "spec.services.TRTLLMDecodeWorker.extraPodSpec.mainContainer.args[0]: engine config "
        "/workspace/engine_configs/decode_config.yaml: no cache_transceiver_config; a "
        "TensorRT-LLM decode worker needs it to transfer KV between prefill and decode"
    ]


def test_trtllm_engine_config_must_be_in_the_manifest():
    doc = trtllm_disagg()
    svc = doc["spec"]["services"]["TRTLLMPrefillWorker"]
    svc["extraPodSpec"]["mainContainer"]["args"] = [
        '--model-path "x" --extra-engine-args /models/prefill.yaml\nexec python3 -m dynamo.trtllm\n'
    ]
    assert problems(dump(doc)) == [
        "spec.services.TRTLLMPrefillWorker.extraPodSpec.mainContainer.args[0]: "
        "--extra-engine-args /models/prefill.yaml: the engine config is not in the manifest "
        "as a YAML mapping (no heredoc writes it and no ConfigMap volume mounts it)"
    ]


def test_trtllm_gpu_is_tensor_times_pipeline_from_its_engine_config():
    doc = trtllm_disagg()
    doc["spec"]["services"]["TRTLLMPrefillWorker"]["resources"]["limits"]["gpu"] = "4"
    assert problems(dump(doc)) == [
        'spec.services.TRTLLMPrefillWorker.resources.limits.gpu: expected "2", got "4" '
        "(tensor 2 x pipeline 1 from the engine arguments)"
    ]


# --- candidate rules, each broken once ------------------------------------------------


def _args_edit(service: str, flag: str, value: str) -> Callable[[dict[str, Any]], None]:
    def edit(doc: dict[str, Any]) -> None:
        args = doc["spec"]["services"][service]["extraPodSpec"]["mainContainer"]["args"]
        args[args.index(flag) + 1] = value

    return edit


def _args_drop(service: str, flag: str) -> Callable[[dict[str, Any]], None]:
    def edit(doc: dict[str, Any]) -> None:
        args = doc["spec"]["services"][service]["extraPodSpec"]["mainContainer"]["args"]
        i = args.index(flag)
        del args[i : i + 2]

    return edit


CANDIDATE = {
    "roles": (
        vllm_agg,
        {"mode": "disaggregated"},
        None,
        [
            "spec.services: expected worker services VllmPrefillWorker, VllmDecodeWorker for "
            "a disaggregated vllm candidate, got VllmWorker"
        ],
    ),
    "replicas": (
        vllm_disagg,
        {},
        _set("spec/services/VllmDecodeWorker/replicas", 2),
        [f"{D}.replicas: expected 1 (candidate decode.replicas), got 2"],
    ),
    "gpus per worker": (
        vllm_disagg,
        {"decode": {"replicas": 1, "tensor_parallel_size": 2, "max_batch_size": 128}},
        None,
        [
            f'{D}.resources.limits.gpu: expected "2", got "4" (candidate decode: tensor 2 x '
            "pipeline 1 x data 1)",
            f"{D}.{MC}.args[7]: --pipeline-parallel-size: expected 1 (candidate "
            "decode.pipeline_parallel_size), got 2",
        ],
    ),
    "tensor parallel size": (
        vllm_agg,
        {
            "aggregated": {
                "replicas": 3,
                "tensor_parallel_size": 1,
                "data_parallel_size": 2,
                "max_batch_size": 64,
            }
        },
        None,
        [
            f"{W}.{MC}.args[5]: --tensor-parallel-size: expected 1 (candidate "
            "aggregated.tensor_parallel_size), got 2",
            f"{W}.{MC}.args[9]: --data-parallel-size: expected 2 (candidate "
            "aggregated.data_parallel_size), got 1",
        ],
    ),
    "block size": (
        vllm_agg,
        {"block_size": 64},
        None,
        [f"{W}.{MC}.args[11]: --block-size: expected 64 (candidate block_size), got 32"],
    ),
    "block size not set": (
        vllm_agg,
        {},
        _args_drop("VllmWorker", "--block-size"),
        [f"{W}.{MC}: block size not set (--block-size); expected 32 (candidate block_size)"],
    ),
    "context length": (
        vllm_agg,
        {"context_length": 10000},
        None,
        [
            f"{W}.{MC}.args[13]: --max-model-len: expected 10000 (candidate context_length), "
            "got 4500"
        ],
    ),
    "context length not set for a workload-sized candidate": (
        vllm_agg,
        {"context_length": None},
        _args_drop("VllmWorker", "--max-model-len"),
        [
            f"{W}.{MC}: context length not set (--max-model-len); the candidate leaves it to "
            "the workload, so the manifest must carry one"
        ],
    ),
    "context length not a number": (
        vllm_agg,
        {},
        _args_edit("VllmWorker", "--max-model-len", "long"),
        [f'{W}.{MC}.args[13]: --max-model-len: expected an integer, got "long"'],
    ),
    "max batch size": (
        vllm_disagg,
        {},
        _args_edit("VllmPrefillWorker", "--max-num-seqs", "16"),
        [
            "spec.services.VllmPrefillWorker.extraPodSpec.mainContainer.args[15]: "
            "--max-num-seqs: expected 8 (candidate prefill.max_batch_size), got 16"
        ],
    ),
    "engine command missing": (
        vllm_agg,
        {},
        _set(f"{_VW}/extraPodSpec", _DELETE),
        [f"{W}.{MC}: required to check the engine settings of the candidate, but not given"],
    ),
    "prefix caching off": (
        vllm_agg,
        {},
        lambda doc: doc["spec"]["services"]["VllmWorker"]["extraPodSpec"]["mainContainer"][
            "args"
        ].append("--no-enable-prefix-caching"),
        [
            f"{W}.{MC}.args[16]: --no-enable-prefix-caching turns prefix caching off, but the "
            "candidate was simulated with a prefix-sharing KV cache"
        ],
    ),
}


@pytest.mark.parametrize("rule", list(CANDIDATE))
def test_candidate_rule_broken_once(rule):
    build, changes, edit, expected = CANDIDATE[rule]
    doc = build()
    if edit is not None:
        edit(doc)
    mode = "disaggregated" if "VllmDecodeWorker" in doc["spec"]["services"] else "aggregated"
    cand = candidate("vllm", mode)
    if changes:
        data = cand.model_dump()
        if changes.get("mode") == "disaggregated":
            data |= {
                "aggregated": None,
                "prefill": {"replicas": 1, "max_batch_size": 8},
                "decode": {"replicas": 1, "max_batch_size": 8},
            }
        cand = Candidate.model_validate({**data, **changes})
    assert problems(dump(doc)) == []  # every one of these is structurally sound
    assert problems(dump(doc), cand) == expected


def test_vllm_context_length_reads_human_units():
    doc = vllm_agg()
    _args_edit("VllmWorker", "--max-model-len", "10k")(doc)
    assert problems(dump(doc), candidate("vllm", "aggregated", context_length=10000)) == []


def test_trtllm_candidate_settings_come_from_its_engine_config():
    doc = trtllm_disagg()
    doc["spec"]["services"]["TRTLLMDecodeWorker"] = trtllm_worker(
        "decode", 1, tp=2, block=64, reuse="False"
    )
    where = "spec.services.TRTLLMDecodeWorker.extraPodSpec.mainContainer.args[0]"
    file = "/workspace/engine_configs/decode_config.yaml"
    assert problems(dump(doc), candidate("trtllm", "disaggregated")) == [
        f"{where}: engine config {file}: kv_cache_config.tokens_per_block: expected 32 "
        "(candidate block_size), got 64",
        f"{where}: engine config {file}: kv_cache_config.enable_block_reuse: false turns "
        "prefix caching off, but the candidate was simulated with a prefix-sharing KV cache",
    ]


def test_sglang_settings_come_from_its_launch_script():
    doc = dgd({"SGLangWorker": sglang_worker(None, 3, tp=2)})
    where = "spec.services.SGLangWorker.extraPodSpec.mainContainer.args[0]"
    assert problems(dump(doc), candidate("sglang", "aggregated", context_length=8000)) == [
        f"{where}: --context-length: expected 8000 (candidate context_length), got 4500"
    ]


def test_a_candidate_may_be_a_mapping_or_a_file(tmp_path):
    cand = candidate("vllm", "aggregated", block_size=64)
    file = tmp_path / "candidate.yaml"
    file.write_text(yaml.safe_dump(cand.model_dump()))
    text = dump(vllm_agg())
    expected = [f"{W}.{MC}.args[11]: --block-size: expected 64 (candidate block_size), got 32"]
    assert problems(text, cand) == expected
    assert [str(p) for p in validate_manifest(text, cand.model_dump())] == expected
    assert [str(p) for p in validate_manifest(text, file)] == expected
    with pytest.raises(dynosim.ConfigError, match=r"candidate\.block_size"):
        validate_manifest(text, {**cand.model_dump(), "block_size": 0})


# --- the command line -----------------------------------------------------------------


def test_cli_validate_prints_one_line_per_problem_and_exits_1(tmp_path, capsys):
    doc = vllm_agg()
    doc["spec"]["services"]["VllmWorker"]["replicas"] = 0
    doc["apiVersion"] = "nvidia.com/v2"
    file = tmp_path / "deploy.yaml"
    file.write_text(dump(doc))
    assert main(["validate", str(file)]) == EXIT_FAILED
    out, err = capsys.readouterr()
    assert out.splitlines() == [
        'apiVersion: expected nvidia.com/v1alpha1, got "nvidia.com/v2"',
        f"{W}.replicas: expected 1 to 16,384, got 0",
    ]
    assert "2 problem(s)" in err


def test_cli_validate_against_a_candidate(tmp_path, capsys):
    file = tmp_path / "deploy.yaml"
    file.write_text(dump(vllm_agg()))
    cand = tmp_path / "candidate.json"
    data = candidate("vllm", "aggregated").model_dump()
    cand.write_text(json.dumps(data))
    assert main(["validate", str(file), "--candidate", str(cand)]) == 0
    assert capsys.readouterr().out == f"{file}: no problems\n"
    data["aggregated"]["replicas"] = 5
    cand.write_text(json.dumps(data))
    assert main(["validate", str(file), "--candidate", str(cand)]) == EXIT_FAILED
    assert capsys.readouterr().out.splitlines() == [
        f"{W}.replicas: expected 5 (candidate aggregated.replicas), got 3"
    ]


def test_cli_validate_bad_candidate_file_is_bad_input(tmp_path, capsys):
    file = tmp_path / "deploy.yaml"
    file.write_text(dump(vllm_agg()))
    cand = tmp_path / "candidate.yaml"
    cand.write_text("mode: aggregated\n")
    assert main(["validate", str(file), "--candidate", str(cand)]) == 2
    err = capsys.readouterr().err
    assert f"{cand}: candidate.model: required, but not given" in err
