"""``dynosim plan --executor ray --address``: a plan on an existing Ray cluster, a local head
started for the test in a subprocess (``ray start --head --block``) and stopped by its process
group when the module is done, gives the plan a thread pool gives."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time

import pytest
from conftest import needs_aic

import dynosim
from dynosim.cli import main

ray = pytest.importorskip("ray")

#: Ray's token authentication off on both sides: the head and this test's driver (a token
#: would have to be shared between them; the cluster is local and lives for this module).
NO_AUTH = {"RAY_AUTH_MODE": "disabled"}


@pytest.fixture(scope="module")
def ray_head(tmp_path_factory):
    """The address of a local Ray head started for this module (2 CPUs)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log = tmp_path_factory.mktemp("ray") / "head.log"
    # Ray's own temp dir, short (its socket paths are length-limited) and this run's alone.
    temp = f"/tmp/dynosim-ray-{os.getpid()}"
    # Ray's command line of this interpreter: its workers import this dynosim.
    argv = [sys.executable, "-m", "ray.scripts.scripts", "start", "--head", f"--port={port}"]
    argv += ["--num-cpus=2", "--block"]
    argv += ["--include-dashboard=false", "--disable-usage-stats", f"--temp-dir={temp}"]
    with open(log, "w") as out:
        head = subprocess.Popen(
            argv,
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, **NO_AUTH},
            start_new_session=True,  # its own process group: stopped as one below
        )
    previous = os.environ.get("RAY_AUTH_MODE")
    os.environ.update(NO_AUTH)
    try:
        deadline = time.monotonic() + 120
        while "Ray runtime started" not in log.read_text():
            if head.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"ray start --head did not start: {log.read_text()[-2000:]}")
            time.sleep(0.5)
        yield f"127.0.0.1:{port}"
    finally:
        if ray.is_initialized():
            ray.shutdown()
        os.killpg(head.pid, signal.SIGTERM)  # the head and every process it started
        try:
            head.wait(timeout=90)
        except subprocess.TimeoutExpired:
            os.killpg(head.pid, signal.SIGKILL)
            head.wait()
        if previous is None:
            os.environ.pop("RAY_AUTH_MODE", None)
        else:
            os.environ["RAY_AUTH_MODE"] = previous


@needs_aic
def test_a_plan_runs_on_an_existing_ray_cluster(ray_head, tmp_path, capsys, monkeypatch):
    workload = dynosim.SyntheticWorkload(isl=2000, osl=100, count=200, rate=4.0, seed=1)
    kwargs = dict(
        model="Qwen/Qwen3-32B",
        system="h200_sxm",
        backend="trtllm",
        sla={"ttft_ms": 600, "tpot_ms": 30},
        max_gpus=4,
        tp=(1, 2),
        progress=False,
    )
    puts = []
    real_put = ray.put
    monkeypatch.setattr(ray, "put", lambda value, **kw: puts.append(value) or real_put(value, **kw))
    on_ray = dynosim.plan(workload, executor="ray", address=ray_head, **kwargs)
    # The trace went to the object store once, whatever the replays (each node fetches it once).
    assert len(puts) == 1 and isinstance(puts[0], dynosim.TraceColumns)
    assert on_ray.replays_run > 1
    monkeypatch.setattr(ray, "put", real_put)
    assert ray.is_initialized() and ray.get_runtime_context().gcs_address.endswith(
        ray_head.split(":")[1]
    )
    local = dynosim.plan(workload, **kwargs)
    assert on_ray.replays.to_json() == local.replays.to_json()
    assert on_ray.pick == {**local.pick, "wall_ms": on_ray.pick["wall_ms"]}
    # The command line joins the same cluster.
    out = tmp_path / "o"
    argv = ["plan", "--synthetic", "--isl", "2000", "--osl", "100", "--rate", "4"]
    argv += ["--count", "200", "--seed", "1", "--model", "Qwen/Qwen3-32B", "--system", "h200_sxm"]
    argv += ["--sla-ttft-ms", "600", "--sla-tpot-ms", "30", "--max-gpus", "4", "--tp", "1", "2"]
    argv += ["--executor", "ray", "--address", ray_head, "--no-progress", "-o", str(out)]
    assert main(argv) == 0, capsys.readouterr()
    assert (out / "replays.csv").read_text() == local.replays.csv_text(wall=False)


def test_an_address_needs_the_ray_executor():
    with pytest.raises(dynosim.ConfigError, match=r"address: the Ray cluster to run on, for exe"):
        dynosim.sweep(
            dynosim.SyntheticWorkload(isl=10, osl=2, count=2, rate=1.0),
            None,
            {"cluster.num_workers": [1]},
            address="127.0.0.1:1",
            progress=False,
        )
