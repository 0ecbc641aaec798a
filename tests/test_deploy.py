"""Rendering candidates as DGD manifests with AIConfigurator's real generator, and the lowering."""

from __future__ import annotations

import itertools
import json
import logging
import os
import re
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

import dynosim
from dynosim import (
    Candidate,
    ConfigError,
    ManifestError,
    MissingExtraError,
    RenderOptions,
    SyntheticWorkload,
    TraceWorkload,
    WorkloadError,
    lower_workload,
    render_dgd,
    validate_manifest,
)
from dynosim.cli import EXIT_BAD_INPUT, main
from dynosim.deploy.candidate import ENGINE_SETTINGS
from dynosim.deploy.manifest import worker_service_name

#: Backend versions AIC 0.12's runtime matrix pairs with Dynamo 1.2.0; each has its own
#: config template in AIC (cli_args.0.20.1, cli_args.0.5.11, extra_engine_args.1.3.0rc14).
DYNAMO = "1.2.0"
VERSIONS = {"vllm": "0.20.1", "sglang": "0.5.11", "trtllm": "1.3.0rc14"}
OPTIONS = RenderOptions(dynamo_version=DYNAMO)
SYNTH = SyntheticWorkload(isl=4000, osl=500, count=100, rate=2.0)


@pytest.fixture
def aic() -> Any:
    """AIC's generator API; the render tests need the aic extra."""
    return pytest.importorskip("aiconfigurator.generator.api")


def candidate(backend: str, mode: str, **over: Any) -> Candidate:
    data: dict[str, Any] = {
        "mode": mode,
        "model": "Qwen/Qwen3-32B",
        "system": "h200_sxm",
        "backend": backend,
        "backend_version": VERSIONS[backend],
        "block_size": 32,
    }
    if mode == "aggregated":
        data["aggregated"] = {"replicas": 3, "tensor_parallel_size": 2, "max_batch_size": 64}
    else:
        data["prefill"] = {"replicas": 2, "tensor_parallel_size": 2, "max_batch_size": 4}
        data["decode"] = {
            "replicas": 1,
            "tensor_parallel_size": 2,
            "pipeline_parallel_size": 2,
            "max_batch_size": 128,
        }
    return Candidate.model_validate({**data, **over})


def replayed(cand: Candidate) -> Candidate:
    """``cand`` with each role's unset engine settings at its flavour's defaults, as
    ``Candidate.from_config`` reads them back from the replayed configuration."""
    defaults = dynosim.config.ENGINE_DEFAULTS[cand.backend]
    roles = {}
    for role, spec in cand.roles().items():
        unset = {
            field: defaults[key]
            for field, key in ENGINE_SETTINGS[cand.backend].items()
            if getattr(spec, field) is None
        }
        roles[role] = spec.model_copy(update=unset)
    return cand.model_copy(update=roles)


def dgd(text: str) -> dict[str, Any]:
    (doc,) = [d for d in yaml.safe_load_all(text) if d and d["kind"] == "DynamoGraphDeployment"]
    return doc


def launch(svc: dict[str, Any]) -> str:
    """A worker's command line as one string (for vLLM the argv, else the launch script)."""
    container = svc["extraPodSpec"]["mainContainer"]
    return " ".join(container.get("command", []) + container.get("args", []))


def expect_engine(backend: str, text: str, block: int, ctx: int, batch: int) -> None:
    """Check a launch command carries the settings, read without dynosim's validator."""
    forms = {
        "vllm": ("--block-size {}", "--max-model-len {}", "--max-num-seqs {}"),
        "sglang": ('--page-size "{}"', '--context-length "{}"', '--max-running-requests "{}"'),
        "trtllm": ("tokens_per_block: {}", "max_seq_len: {}", "max_batch_size: {}"),
    }[backend]
    for form, value in zip(forms, (block, ctx, batch), strict=True):
        assert form.format(value) in text, (form, value)


# --- the 24 real renders ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("backend", "mode", "block", "ctx"),
    list(itertools.product(VERSIONS, ["aggregated", "disaggregated"], [32, 64], [None, 10000])),
)
def test_real_render_validates_against_its_candidate(aic, backend, mode, block, ctx):
    cand = candidate(backend, mode, block_size=block, context_length=ctx)
    rendered = render_dgd(cand, SYNTH, OPTIONS)
    want_ctx = ctx if ctx is not None else SYNTH.isl + SYNTH.osl
    assert rendered.deployed.context_length == want_ctx
    assert rendered.deployed.model_dump() == {**cand.model_dump(), "context_length": want_ctx}
    assert rendered.validate() == []
    assert validate_manifest(rendered.text, rendered.deployed) == []
    # Read the manifest directly too, so a lenient validator cannot hide a wrong render.
    doc = dgd(rendered.text)
    # AIC names the graph with its own spelling of the mode.
    assert doc["metadata"]["name"] == f"dynosim-{ {'aggregated': 'agg'}.get(mode, 'disagg') }"
    assert "namespace" not in doc["metadata"]
    services = doc["spec"]["services"]
    prefix = {"vllm": "Vllm", "sglang": "SGLang", "trtllm": "TRTLLM"}[backend]
    suffix = {"aggregated": "Worker", "prefill": "PrefillWorker", "decode": "DecodeWorker"}
    names = {role: prefix + suffix[role] for role in cand.roles()}
    assert sorted(services) == sorted(["Frontend", *names.values()])
    for role, spec in cand.roles().items():
        svc = services[names[role]]
        assert svc["replicas"] == spec.replicas
        assert svc["resources"]["limits"]["gpu"] == str(spec.gpus_per_worker)
        assert f"runtime:{DYNAMO}" in svc["extraPodSpec"]["mainContainer"]["image"]
        expect_engine(backend, launch(svc), block, want_ctx, spec.max_batch_size)
        if backend == "trtllm":  # dynosim simulates prefix sharing; AIC's default is off
            assert "enable_block_reuse: True" in launch(svc)


def test_render_returns_exactly_what_aic_returned(aic, monkeypatch):
    seen: dict[str, Any] = {}
    real = aic.generate_backend_artifacts

    def spy(params, backend, **kwargs):
        seen.update(params=params, backend=backend, kwargs=kwargs)
        seen["artifacts"] = real(params, backend, **kwargs)
        return seen["artifacts"]

    monkeypatch.setattr(aic, "generate_backend_artifacts", spy)
    rendered = render_dgd(candidate("trtllm", "disaggregated", context_length=6000), SYNTH, OPTIONS)
    assert rendered.text is seen["artifacts"]["k8s_deploy.yaml"]
    assert rendered.artifacts == seen["artifacts"]
    assert seen["kwargs"] == {"backend_version": "1.3.0rc14"}
    params = seen["params"]
    assert params["preserve_engine_limits"] is True
    assert params["SlaConfig"] == {"isl": 4000, "osl": 500}
    for role, replicas, batch in (("prefill", 2, 4), ("decode", 1, 128)):
        role_params = params["params"][role]
        assert role_params["max_seq_len"] == 6000
        assert role_params["max_batch_size"] == batch
        assert role_params["tokens_per_block"] == 32
        assert role_params["pipeline_parallel_size"] == (1 if role == "prefill" else 2)
        assert params["WorkerConfig"][f"{role}_workers"] == replicas


def test_trtllm_transfer_buffer_holds_the_longest_prompt_in_whole_blocks(aic):
    for block, buffer in ((32, 4000), (64, 4032)):  # 4000 tokens: 125 or 62.5 -> 63 blocks
        rendered = render_dgd(
            candidate("trtllm", "disaggregated", block_size=block), SYNTH, OPTIONS
        )
        engine = rendered.artifacts["extra_engine_args_prefill.yaml"]
        assert f"max_tokens_in_buffer: {buffer}" in engine
        assert "cache_transceiver_config" in launch(
            dgd(rendered.text)["spec"]["services"]["TRTLLMDecodeWorker"]
        )


#: Engine settings of a role, per backend: what the candidate says and how AIC renders it.
SETTINGS = {
    "trtllm": (
        {"chunked_prefill": True, "max_num_tokens": 16384},
        ("enable_chunked_prefill: True", "max_num_tokens: 16384"),
    ),
    "vllm": ({"chunked_prefill": True, "max_num_tokens": 4096}, ("--max-num-batched-tokens 4096",)),
    "sglang": (
        {"chunk_size": 4096, "max_num_tokens": 16384},
        ('--chunked-prefill-size "4096"', '--max-prefill-tokens "16384"'),
    ),
}


def _changed(backend: str, text: str) -> str:
    """``text`` with the worker's engine told to stop chunking prompts (one edit per worker)."""
    if backend == "trtllm":
        return text.replace("enable_chunked_prefill: True", "enable_chunked_prefill: False")
    if backend == "vllm":
        return text.replace(
            "- --max-num-seqs", "- --no-enable-chunked-prefill\n          - --max-num-seqs"
        )
    return text.replace('--chunked-prefill-size \\"4096\\"', '--chunked-prefill-size \\"-1\\"')


@pytest.mark.parametrize(
    ("backend", "mode"), list(itertools.product(VERSIONS, ["aggregated", "disaggregated"]))
)
def test_engine_settings_render_and_a_changed_flag_fails_validation(aic, backend, mode):
    given, forms = SETTINGS[backend]
    base = candidate(backend, mode)
    roles = {
        r: {**s.model_dump(), **given, "pipeline_parallel_size": 1} for r, s in base.roles().items()
    }
    cand = candidate(backend, mode, **roles)
    rendered = render_dgd(cand, SYNTH, OPTIONS)
    assert rendered.validate() == []
    for role in cand.roles():
        svc = dgd(rendered.text)["spec"]["services"][worker_service_name(backend, role)]
        for form in forms:
            assert form in launch(svc), (role, form)
    changed = _changed(backend, rendered.text)
    problems = validate_manifest(changed, rendered.deployed)
    assert len(problems) == len(cand.roles()), problems
    flag = {
        "trtllm": "enable_chunked_prefill turns chunked prefill off",
        "vllm": "--no-enable-chunked-prefill turns chunked prefill off",
        "sglang": "--chunked-prefill-size -1 turns chunked prefill off",
    }[backend]
    for problem, role in zip(problems, cand.roles(), strict=True):
        assert flag in problem.message and role in problem.message, problem


def test_a_budget_changed_in_the_manifest_fails_validation(aic):
    cand = candidate(
        "vllm",
        "aggregated",
        aggregated={"replicas": 1, "max_batch_size": 8, "max_num_tokens": 4096},
    )
    rendered = render_dgd(cand, SYNTH, OPTIONS)
    changed = rendered.text.replace("- '4096'", "- '8192'")
    (problem,) = validate_manifest(changed, rendered.deployed)
    assert problem.message == (
        "--max-num-batched-tokens: expected 4096 (candidate aggregated.max_num_tokens), got 8192"
    )


def test_vllm_with_chunked_prefill_off_cannot_be_rendered(aic):
    cand = candidate(
        "vllm",
        "aggregated",
        aggregated={"replicas": 1, "max_batch_size": 8, "chunked_prefill": False},
    )
    with pytest.raises(ConfigError, match=r"candidate.aggregated.chunked_prefill: AIC's generator"):
        render_dgd(cand, SYNTH, OPTIONS)


# --- trace and synthetic agree ----------------------------------------------------------------


def _without_transfer_buffer(text: str) -> tuple[list[Any], int]:
    """The manifest's documents with TensorRT-LLM's max_tokens_in_buffer lines removed."""
    removed = 0

    def scrub(node: Any) -> Any:
        nonlocal removed
        if isinstance(node, dict):
            return {k: scrub(v) for k, v in node.items()}
        if isinstance(node, list):
            return [scrub(v) for v in node]
        if isinstance(node, str):
            node, n = re.subn(r"\n[ \t]*max_tokens_in_buffer:[^\n]*", "", node)
            removed += n
        return node

    return [scrub(d) for d in yaml.safe_load_all(text)], removed


@pytest.mark.parametrize(
    ("backend", "mode"), list(itertools.product(VERSIONS, ["aggregated", "disaggregated"]))
)
def test_uniform_trace_renders_the_same_dgd_as_synthetic(aic, columns, backend, mode):
    isl, osl = 3000, 700
    rows = [(t * 250.0, isl, osl, list(range(t * 6, t * 6 + 6))) for t in range(40)]
    trace = TraceWorkload.from_columns(columns(rows))
    synth = SyntheticWorkload(isl=isl, osl=osl, count=40, rate=4.0)
    cand = candidate(backend, mode)
    from_trace = render_dgd(cand, trace, OPTIONS)
    from_synth = render_dgd(cand, synth, OPTIONS)
    assert from_trace.lowered.context_length == isl + osl
    assert from_trace.validate() == [] and from_synth.validate() == []
    if backend != "trtllm":
        assert from_trace.text == from_synth.text
        return
    trace_docs, removed = _without_transfer_buffer(from_trace.text)
    synth_docs, _ = _without_transfer_buffer(from_synth.text)
    assert trace_docs == synth_docs
    assert removed == (2 if mode == "disaggregated" else 0)  # the scrub really ran on disagg


def test_trace_file_and_synthetic_agree_through_the_cli(aic, tmp_path, capsys):
    trace = tmp_path / "t.jsonl"
    trace.write_text(
        "".join(
            json.dumps(
                {
                    "timestamp": t * 100,
                    "input_length": 900,
                    "output_length": 90,
                    "hash_ids": [t, t + 1],
                }
            )
            + "\n"
            for t in range(5)
        )
    )
    cand = tmp_path / "candidate.yaml"
    cand.write_text(
        yaml.safe_dump(candidate("vllm", "disaggregated").model_dump(exclude_none=True))
    )
    common = ["render", "--candidate", str(cand), "--dynamo-version", DYNAMO]
    assert main([*common, "--trace", str(trace), "-o", str(tmp_path / "a")]) == 0
    assert main([*common, "--isl", "900", "--osl", "90", "-o", str(tmp_path / "b")]) == 0
    a = (tmp_path / "a" / "k8s_deploy.yaml").read_bytes()
    assert a == (tmp_path / "b" / "k8s_deploy.yaml").read_bytes()
    assert "--max-model-len 990" in launch(dgd(a.decode())["spec"]["services"]["VllmDecodeWorker"])
    out = capsys.readouterr().out
    assert "k8s_deploy.yaml is valid and deploys the disaggregated vllm candidate" in out


# --- lowering ---------------------------------------------------------------------------------


def test_lowering_a_synthetic_workload_uses_its_lengths():
    lowered = lower_workload(SYNTH)
    assert (lowered.kind, lowered.isl, lowered.osl) == ("synthetic", 4000, 500)
    assert (lowered.context_length, lowered.longest_prompt, lowered.requests) == (4500, 4000, 100)
    assert lower_workload(SYNTH, context_length=8192).context_length == 8192


def test_lowering_a_trace_uses_mean_lengths_and_its_longest_request(columns):
    rows = [(0.0, 100, 10, [1]), (5.0, 300, 50, [2]), (9.0, 1000, 41, [3, 4])]
    lowered = lower_workload(TraceWorkload.from_columns(columns(rows, 512)))
    # Means 466.67 and 33.67 round to 467 and 34; the longest request is 1000 + 41 tokens.
    assert (lowered.kind, lowered.isl, lowered.osl) == ("trace", 467, 34)
    assert (lowered.context_length, lowered.longest_request) == (1041, 1041)
    assert (lowered.longest_prompt, lowered.requests) == (1000, 3)
    halves = [(0.0, 1, 1, [1]), (1.0, 2, 2, [2])]  # means 1.5: rounded half up, to 2
    assert lower_workload(TraceWorkload.from_columns(columns(halves))).isl == 2


def test_lowering_the_real_trace_matches_its_rows(real_trace):
    path = real_trace("mooncake_conversation.jsonl")
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    prompts = np.array([r["input_length"] for r in rows])
    outputs = np.array([r["output_length"] for r in rows])
    lowered = lower_workload(dynosim.load_trace(path))
    assert lowered.context_length == int((prompts + outputs).max())
    assert lowered.isl == int(np.floor(prompts.mean() + 0.5))
    assert lowered.osl == int(np.floor(outputs.mean() + 0.5))
    assert lowered.requests == len(rows)


def test_real_trace_renders_with_context_length_from_its_longest_request(aic, real_trace):
    trace = dynosim.load_trace(real_trace("mooncake_conversation.jsonl"))
    rendered = render_dgd(candidate("sglang", "aggregated"), trace, OPTIONS)
    longest = rendered.lowered.longest_request
    assert f'--context-length "{longest}"' in launch(
        dgd(rendered.text)["spec"]["services"]["SGLangWorker"]
    )
    assert rendered.validate() == []
    with pytest.raises(ConfigError) as err:
        render_dgd(candidate("sglang", "aggregated", context_length=10000), trace, OPTIONS)
    over = int(
        (
            trace.columns().input_length.astype(np.int64) + trace.columns().output_length > 10000
        ).sum()
    )
    assert str(err.value) == (
        f"candidate.context_length 10000 is shorter than the longest request of the trace "
        f"workload ({longest} tokens, prompt plus output); the deployment would reject "
        f"{over} of {len(trace.columns())} requests that the simulation served"
    )


def test_a_trace_workload_with_isl_or_osl_is_refused_by_the_workload_rule(tmp_path):
    trace = tmp_path / "t.jsonl"
    trace.write_text('{"timestamp": 0, "input_length": 8, "output_length": 2, "hash_ids": [1]}\n')
    with pytest.raises(WorkloadError, match=r"remove workload\.isl, workload\.osl$"):
        render_dgd(
            candidate("vllm", "aggregated"),
            {"kind": "trace", "path": str(trace), "isl": 8, "osl": 2},
            OPTIONS,
        )
    with pytest.raises(WorkloadError, match=r"workload\.kind: expected 'trace' or 'synthetic'"):
        lower_workload({"isl": 8, "osl": 2})


def test_cli_refuses_a_trace_with_fixed_lengths_and_a_missing_workload(tmp_path, capsys):
    cand = tmp_path / "c.yaml"
    cand.write_text(yaml.safe_dump(candidate("vllm", "aggregated").model_dump(exclude_none=True)))
    out = ["-o", str(tmp_path / "out")]
    argv = ["render", "--candidate", str(cand), "--trace", "t.jsonl", "--osl", "5", *out]
    assert main(argv) == EXIT_BAD_INPUT
    assert "a trace workload has no fixed request length; remove --osl" in capsys.readouterr().err
    assert main(["render", "--candidate", str(cand), "--isl", "5", *out]) == EXIT_BAD_INPUT
    assert "--trace FILE, or both --isl N and --osl N" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


# --- failures AIC would only log, and input AIC cannot render ---------------------------------


def test_missing_manifest_artifact_fails_loudly(aic, monkeypatch):
    def stand_in(params, backend, **kwargs):
        logging.getLogger("aiconfigurator.generator.rendering.engine").warning(
            "Failed to build k8s_deploy.yaml: stand-in failure"
        )
        return {"cli_args_agg": "--block-size 32", "run_0.sh": "#!/bin/sh\n"}

    monkeypatch.setattr(aic, "generate_backend_artifacts", stand_in)
    with pytest.raises(ManifestError) as err:
        render_dgd(candidate("vllm", "aggregated"), SYNTH, OPTIONS)
    assert str(err.value) == (
        "AIC generator did not return k8s_deploy.yaml (AIC logged: warning: Failed to build "
        "k8s_deploy.yaml: stand-in failure)"
    )


def test_an_exception_inside_aic_is_named(aic, monkeypatch):
    def broken(params, backend, **kwargs):
        raise KeyError("tensor_parallel_size")

    monkeypatch.setattr(aic, "generate_backend_artifacts", broken)
    with pytest.raises(ManifestError) as err:
        render_dgd(candidate("sglang", "disaggregated"), SYNTH, OPTIONS)
    assert str(err.value) == (
        "AIC generator failed for the disaggregated sglang 0.5.11 candidate: "
        "KeyError: 'tensor_parallel_size'"
    )


def test_without_aic_the_error_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "aiconfigurator.generator.api", None)
    with pytest.raises(MissingExtraError, match=r"pip install 'dynosim\[aic\]'"):
        render_dgd(candidate("vllm", "aggregated"), SYNTH, OPTIONS)


def test_backend_version_must_be_what_the_dynamo_release_ships(aic):
    with pytest.raises(ConfigError) as err:
        render_dgd(candidate("vllm", "aggregated", backend_version="0.24.0"), SYNTH, OPTIONS)
    assert str(err.value).startswith(
        "candidate.backend_version 0.24.0 is not the vllm that Dynamo 1.2.0 ships (0.20.1)"
    )
    image = "registry.example.com/dynamo/vllm-runtime:custom"
    rendered = render_dgd(
        candidate("vllm", "aggregated", backend_version="0.24.0"),
        SYNTH,
        RenderOptions(dynamo_version=DYNAMO, image=image),
    )
    worker = dgd(rendered.text)["spec"]["services"]["VllmWorker"]
    assert worker["extraPodSpec"]["mainContainer"]["image"] == image


def test_unknown_system_and_dynamo_release_are_config_errors(aic):
    with pytest.raises(
        ConfigError, match=r'candidate\.system: AIC has no system "h999"; systems: '
    ):
        render_dgd(candidate("vllm", "aggregated", system="h999"), SYNTH, OPTIONS)
    with pytest.raises(ConfigError, match=r'options\.dynamo_version "0\.0\.1": .*Supported'):
        render_dgd(candidate("vllm", "aggregated"), SYNTH, {"dynamo_version": "0.0.1"})


def test_options_name_the_graph_and_namespace(aic):
    options = RenderOptions(dynamo_version=DYNAMO, name_prefix="team-a", namespace="serving")
    rendered = render_dgd(candidate("sglang", "disaggregated"), SYNTH, options)
    assert dgd(rendered.text)["metadata"] == {"name": "team-a-disagg", "namespace": "serving"}
    assert rendered.validate() == []


def test_a_worker_wider_than_a_node_spans_nodes(aic):
    cand = candidate(
        "vllm",
        "aggregated",
        aggregated={
            "replicas": 1,
            "tensor_parallel_size": 8,
            "pipeline_parallel_size": 2,
            "max_batch_size": 64,
        },
    )
    rendered = render_dgd(cand, SYNTH, OPTIONS)  # h200_sxm: 8 GPUs per node, from AIC
    worker = dgd(rendered.text)["spec"]["services"]["VllmWorker"]
    assert worker["multinode"] == {"nodeCount": 2}
    assert worker["resources"]["limits"]["gpu"] == "16"
    assert rendered.validate() == []


# --- writing ----------------------------------------------------------------------------------


def test_write_keeps_every_artifact_byte_for_byte(aic, tmp_path):
    rendered = render_dgd(candidate("trtllm", "disaggregated"), SYNTH, OPTIONS)
    written = rendered.write(tmp_path / "out")
    assert sorted(p.name for p in written) == sorted(rendered.artifacts)
    for path in written:
        assert path.read_text(encoding="utf-8") == rendered.artifacts[path.name]
    assert (tmp_path / "out" / "k8s_deploy.yaml").read_text() == rendered.text
    assert os.access(tmp_path / "out" / "run_0.sh", os.X_OK)
    assert validate_manifest(tmp_path / "out" / "k8s_deploy.yaml", rendered.deployed) == []


def test_cli_render_writes_and_validates(aic, tmp_path, capsys):
    cand = tmp_path / "c.json"
    cand.write_text(json.dumps(candidate("trtllm", "aggregated", context_length=8192).model_dump()))
    out = tmp_path / "deploy"
    argv = ["render", "--candidate", str(cand), "--isl", "2000", "--osl", "300", "-o", str(out)]
    assert main([*argv, "--dynamo-version", DYNAMO, "--namespace", "ns1"]) == 0
    captured = capsys.readouterr()
    assert (
        "deploys the aggregated trtllm candidate (context length 8192, Dynamo 1.2.0)"
        in captured.out
    )
    assert "dynosim: AIC warning:" in captured.err  # AIC's template notice is passed on
    doc = dgd((out / "k8s_deploy.yaml").read_text())
    assert doc["metadata"]["namespace"] == "ns1"
    assert main(["validate", str(out / "k8s_deploy.yaml"), "--candidate", str(cand)]) == 0


def test_cli_render_exits_1_when_what_it_wrote_does_not_deploy_the_candidate(
    aic, monkeypatch, tmp_path, capsys
):
    real = aic.generate_backend_artifacts

    def off_by_one(params, backend, **kwargs):  # a generator that miscounts the workers
        artifacts = real(params, backend, **kwargs)
        text = artifacts["k8s_deploy.yaml"].replace("replicas: 3", "replicas: 4")
        return {**artifacts, "k8s_deploy.yaml": text}

    monkeypatch.setattr(aic, "generate_backend_artifacts", off_by_one)
    cand = tmp_path / "c.yaml"
    cand.write_text(yaml.safe_dump(candidate("vllm", "aggregated").model_dump(exclude_none=True)))
    out = tmp_path / "out"
    argv = ["render", "--candidate", str(cand), "--isl", "100", "--osl", "10", "-o", str(out)]
    assert main([*argv, "--dynamo-version", DYNAMO]) == 1
    captured = capsys.readouterr()
    assert captured.out.splitlines() == [
        "spec.services.VllmWorker.replicas: expected 3 (candidate aggregated.replicas), got 4"
    ]
    assert "1 problem(s)" in captured.err
    assert "replicas: 4" in (out / "k8s_deploy.yaml").read_text()  # written as AIC gave it


def test_cli_render_reports_a_candidate_aic_cannot_render(aic, tmp_path, capsys):
    cand = tmp_path / "c.yaml"
    data = candidate("sglang", "aggregated", backend_version="0.5.14").model_dump(exclude_none=True)
    cand.write_text(yaml.safe_dump(data))
    argv = ["render", "--candidate", str(cand), "--isl", "10", "--osl", "5", "-o", str(tmp_path)]
    assert main([*argv, "--dynamo-version", DYNAMO]) == EXIT_BAD_INPUT
    assert "is not the sglang that Dynamo 1.2.0 ships (0.5.11)" in capsys.readouterr().err
    assert not (Path(tmp_path) / "k8s_deploy.yaml").exists()


# --- the typed inputs -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        (
            {"aggregated": None},
            "an aggregated candidate has an aggregated role: missing candidate.aggregated",
        ),
        (
            {"mode": "disaggregated"},
            "a disaggregated candidate has prefill and decode roles: missing candidate.prefill, "
            "candidate.decode; remove candidate.aggregated",
        ),
        (
            {
                "backend": "trtllm",
                "aggregated": {"replicas": 1, "data_parallel_size": 2, "max_batch_size": 8},
            },
            "candidate.aggregated.data_parallel_size: TensorRT-LLM has no separate data "
            "parallel size",
        ),
        (
            {
                "backend": "sglang",
                "aggregated": {"replicas": 1, "max_batch_size": 8, "chunked_prefill": False},
            },
            "candidate.aggregated.chunked_prefill: SGLang's engine is simulated chunking",
        ),
        (
            {"aggregated": {"replicas": 1, "max_batch_size": 8, "chunk_size": 4096}},
            "candidate.aggregated.chunk_size: an SGLang setting (chunked-prefill-size); vllm",
        ),
        ({"block_size": 0}, "candidate.block_size: expected 1 to 65,536 tokens, got 0"),
        (
            {"aggregated": {"replicas": "2", "max_batch_size": 8}},
            'candidate.aggregated.replicas: expected an integer, got "2"',
        ),
        ({"backend": "tgi"}, "candidate.backend: Input should be 'trtllm', 'vllm' or 'sglang'"),
        ({"gpus": 8}, "candidate.gpus: unknown field"),
        ({"model": ""}, "candidate.model: String should have at least 1 character"),
    ],
)
def test_candidate_refuses_what_it_cannot_describe(changes, message):
    data = {**candidate("vllm", "aggregated").model_dump(), **changes}
    with pytest.raises(ConfigError) as err:
        Candidate.model_validate(data)
    assert str(err.value).startswith(message)


def test_render_options_refuse_names_kubernetes_would_refuse():
    with pytest.raises(ConfigError, match=r"options\.name_prefix: expected at most 56 lowercase"):
        RenderOptions(name_prefix="My_Prefix")
    with pytest.raises(ConfigError, match=r"options\.namespace: expected at most 63 lowercase"):
        RenderOptions(namespace="x" * 70)
    with pytest.raises(ConfigError, match=r"options\.gpus_per_node: Input should be greater"):
        RenderOptions(gpus_per_node=0)


def test_load_candidate_names_the_file(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("- not\n- a mapping\n")
    with pytest.raises(ConfigError, match=r"c\.yaml: a candidate must be a mapping, got list"):
        dynosim.load_candidate(path)
    path.write_text(
        yaml.safe_dump({**candidate("vllm", "aggregated").model_dump(), "mode": "mixed"})
    )
    with pytest.raises(
        ConfigError, match=r"c\.yaml: candidate\.mode: Input should be 'aggregated'"
    ):
        dynosim.load_candidate(path)


def test_synthetic_with_drawn_lengths_lowers_from_its_rows():
    work = SyntheticWorkload(
        isl={"dist": "uniform", "low": 100, "high": 300},
        osl={"dist": "uniform", "low": 10, "high": 20},
        duration_s=100.0,
        rate=5.0,
        seed=4,
    )
    cols = work.columns()
    lowered = lower_workload(work)
    assert lowered.kind == "synthetic"
    assert lowered.requests == len(cols)
    assert lowered.longest_prompt == int(cols.input_length.max())
    totals = cols.input_length.astype(int) + cols.output_length.astype(int)
    assert lowered.context_length == int(totals.max())
    assert abs(lowered.isl - cols.input_length.mean()) <= 0.5


# --- the candidate <-> configuration mapping (no AIC call) ----------------------------------


def test_candidate_maps_to_the_configuration_it_simulates_and_back():
    cand = Candidate(
        mode="disaggregated",
        model="Qwen/Qwen3-32B",
        system="h200_sxm",
        backend="trtllm",
        backend_version="1.3.0rc14",
        block_size=32,
        prefill={
            "replicas": 3,
            "tensor_parallel_size": 2,
            "max_batch_size": 8,
            "chunked_prefill": True,
            "max_num_tokens": 16384,
        },
        decode={"replicas": 2, "tensor_parallel_size": 4, "max_batch_size": 128},
    )
    base = dynosim.SimConfig(kv_transfer={"bandwidth_gbps": 25.0, "kv_bytes_per_token": 1000})
    config = cand.to_config(base)
    assert config.cluster.mode == "disaggregated"
    assert (config.cluster.num_prefill_workers, config.cluster.num_decode_workers) == (3, 2)
    for role, tp, seqs in (("prefill", 2, 8), ("decode", 4, 128)):
        engine, timing = getattr(config, role).engine, getattr(config, role).timing
        assert (engine.block_size, engine.max_num_seqs, engine.tensor_parallel_size) == (
            32,
            seqs,
            tp,
        )
        assert (timing.model, timing.model_name, timing.backend, timing.tp) == (
            "aic",
            "Qwen/Qwen3-32B",
            "trtllm",
            tp,
        )
        assert timing.backend_version == "1.3.0rc14"
    assert config.kv_transfer == base.kv_transfer  # the rest of the base is kept
    # 3 x TP 2 + 2 x TP 4 GPUs, as the manifest would ask for.
    assert dynosim.config.resolve(config).num_gpus == 3 * 2 + 2 * 4
    # The engine settings given are the engine's; unset, the flavour's defaults are replayed.
    assert (config.prefill.engine.enable_chunked_context, config.prefill.engine.max_num_tokens) == (
        True,
        16384,
    )
    assert config.decode.engine.enable_chunked_context is None
    back = Candidate.from_config(config)
    assert back.prefill == cand.prefill and back == replayed(cand)
    trtllm = dynosim.config.ENGINE_DEFAULTS["trtllm"]
    assert (back.decode.chunked_prefill, back.decode.max_num_tokens) == (
        trtllm["enable_chunked_context"],
        trtllm["max_num_tokens"],
    )
    role = {"replicas": 3, "tensor_parallel_size": 2, "max_batch_size": 64}
    agg = candidate("vllm", "aggregated", aggregated={**role, "max_num_tokens": 2048})
    assert Candidate.from_config(agg.to_config()) == replayed(agg)
    sglang = candidate("sglang", "aggregated", aggregated={**role, "chunk_size": 4096})
    engine = sglang.to_config().engine
    assert (engine.chunked_prefill_size, engine.max_prefill_tokens) == (4096, None)


def test_the_mapping_refuses_what_one_side_cannot_hold():
    with pytest.raises(ConfigError, match=r"candidate.decode.pipeline_parallel_size: dynosim "):
        candidate("vllm", "disaggregated").to_config()  # its decode role has PP 2
    with pytest.raises(ConfigError, match=r"candidate.model: not given, and the roles' aic"):
        Candidate.from_config(dynosim.SimConfig())
    cand = Candidate.from_config(
        dynosim.SimConfig(engine={"max_num_seqs": 12, "data_parallel_size": 2}),
        model="m",
        system="h200_sxm",
        backend="vllm",
        backend_version="0.20.1",
    )
    vllm = dynosim.config.ENGINE_DEFAULTS["vllm"]
    assert cand.aggregated == dynosim.WorkerRole(
        replicas=4,
        data_parallel_size=2,
        max_batch_size=12,
        chunked_prefill=vllm["enable_chunked_prefill"],
        max_num_tokens=vllm["max_num_batched_tokens"],
    )
    split = dynosim.SimConfig(
        cluster={"mode": "disaggregated"}, decode={"engine": {"block_size": 16}}
    )
    with pytest.raises(ConfigError, match=r"engine.block_size=64, decode.engine.block_size=16"):
        Candidate.from_config(split, model="m", system="s", backend="vllm", backend_version="1")


MOE = "Qwen/Qwen3-30B-A3B"


def moe_candidate(backend: str, mode: str, tp: int, dp: int, ep: int) -> Candidate:
    role = {
        "replicas": 2,
        "tensor_parallel_size": tp,
        "data_parallel_size": dp,
        "expert_parallel_size": ep,
        "max_batch_size": 64,
    }
    roles = {"aggregated": role} if mode == "aggregated" else {"prefill": role, "decode": role}
    return Candidate(
        mode=mode,
        model=MOE,
        system="h200_sxm",
        backend=backend,
        backend_version=VERSIONS[backend],
        block_size=32,
        **roles,
    )


def test_data_and_expert_parallel_candidates_map_to_their_simulation_and_back():
    # TP 1 x DP 2 with the experts split 2 ways: each role is timed at that layout (DP 2 made
    # to_config fail before: the timing section kept DP 1).
    cand = moe_candidate("vllm", "disaggregated", tp=1, dp=2, ep=2)
    config = cand.to_config()
    for role in ("prefill", "decode"):
        engine, timing = getattr(config, role).engine, getattr(config, role).timing
        assert (engine.tensor_parallel_size, engine.data_parallel_size) == (1, 2)
        assert (timing.tp, timing.dp, timing.ep) == (1, 2, 2)
    assert dynosim.config.resolve(config).num_gpus == 2 * 2 + 2 * 2
    assert Candidate.from_config(config) == replayed(cand)
    # A configuration timed otherwise has no expert split.
    plain = dynosim.SimConfig(engine={"data_parallel_size": 2})
    back = Candidate.from_config(plain, model="m", system="s", backend="vllm", backend_version="1")
    assert back.aggregated.expert_parallel_size == 1


@pytest.mark.parametrize(
    ("backend", "tp", "dp", "ep", "message"),
    [
        # The simulation's own rule (the core's): EP divides the worker's TP x DP GPUs.
        ("sglang", 2, 1, 3, "candidate.aggregated.expert_parallel_size: timing.ep: must divide "),
        # vLLM splits over every GPU of a worker or not at all.
        ("vllm", 2, 2, 2, "vLLM's expert parallelism (--enable-expert-parallel) spans every "),
        ("trtllm", 1, 2, 2, "candidate.aggregated.data_parallel_size: TensorRT-LLM has no "),
    ],
)
def test_a_layout_the_engine_cannot_run_is_refused(backend, tp, dp, ep, message):
    with pytest.raises(ConfigError) as err:
        moe_candidate(backend, "aggregated", tp=tp, dp=dp, ep=ep)
    assert message in str(err.value)


def test_to_config_keeps_the_base_roles_own_engine_sections():
    # A base whose decode role has its own engine (a smaller pass budget, its own KV blocks
    # and memory share): the candidate's decode engine starts from it, not from the shared one.
    base = dynosim.SimConfig(
        cluster={"mode": "disaggregated"},
        engine={"max_num_batched_tokens": 4096},
        decode={
            "engine": {
                "max_num_batched_tokens": 512,
                "num_gpu_blocks": 1000,
                "gpu_memory_utilization": 0.8,
            }
        },
    )
    config = candidate(
        "vllm", "disaggregated", decode={"replicas": 1, "max_batch_size": 9}
    ).to_config(base)
    decode, prefill = config.decode.engine, config.prefill.engine
    assert (decode.max_num_batched_tokens, decode.num_gpu_blocks) == (512, 1000)
    assert decode.gpu_memory_utilization == 0.8 and decode.max_num_seqs == 9
    assert (prefill.max_num_batched_tokens, prefill.num_gpu_blocks) == (4096, None)


@pytest.mark.parametrize(
    ("backend", "tp", "dp", "ep", "split"),
    [
        ("vllm", 1, 2, 2, ["--data-parallel-size", "--enable-expert-parallel"]),
        ("vllm", 2, 1, 2, ["--enable-expert-parallel"]),
        ("sglang", 2, 1, 2, ["--expert-parallel-size"]),
        ("trtllm", 2, 1, 2, ["moe_expert_parallel_size: 2"]),
    ],
)
def test_expert_parallel_renders_and_validates(aic, backend, tp, dp, ep, split):
    cand = moe_candidate(backend, "disaggregated", tp=tp, dp=dp, ep=ep)
    rendered = render_dgd(cand, SYNTH, OPTIONS)
    assert rendered.validate() == []
    for service in dgd(rendered.text)["spec"]["services"].values():
        if service["componentType"] == "worker":
            assert service["resources"]["limits"]["gpu"] == str(tp * dp)
            assert all(word in launch(service) for word in split)
    # The same manifest does not deploy the candidate without the split: the check says where.
    plain = moe_candidate(backend, "disaggregated", tp=tp, dp=dp, ep=1)
    problems = validate_manifest(
        rendered.text,
        rendered.deployed.model_copy(update={"prefill": plain.prefill, "decode": plain.decode}),
    )
    assert len(problems) == 2, problems  # one per role
    assert all("expert" in p.message and "expert_parallel_size" in p.message for p in problems)


def test_render_refuses_splits_it_cannot_deploy(aic):
    dense = moe_candidate("vllm", "aggregated", tp=2, dp=1, ep=2).model_copy(
        update={"model": "Qwen/Qwen3-32B"}
    )
    with pytest.raises(
        ConfigError,
        match=r"candidate.aggregated.expert_parallel_size: expert "
        r"parallelism splits the experts of a mixture-of-experts model, but "
        r"Qwen/Qwen3-32B is dense; got ep=2",
    ):
        render_dgd(dense, SYNTH, OPTIONS)
    # SGLang runs a MoE model's DP ranks as attention DP on --tp-size GPUs; AIC's generator
    # would ask for tp-size x dp-size GPUs.
    with pytest.raises(ConfigError, match=r"candidate.aggregated.data_parallel_size: SGLang "):
        render_dgd(moe_candidate("sglang", "aggregated", tp=1, dp=2, ep=2), SYNTH, OPTIONS)
