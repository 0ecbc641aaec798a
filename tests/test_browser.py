"""The HTML pages in a real browser: headless Chromium opens each kind of page (a replay, two
replays compared, a sweep's Pareto front) offline, logs no console message, and draws a
screenshot that is not blank."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

import dynosim
from dynosim.views.pages import compare_page, pareto_page

pytest.importorskip("matplotlib")
image = pytest.importorskip("matplotlib.image")

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
if CHROMIUM is None and not os.environ.get("DYNOSIM_REQUIRE_BROWSER"):
    pytest.skip("needs Debian's chromium package", allow_module_level=True)


def open_in_chromium(page: Path, shot: Path, height: int = 2400) -> list[str]:
    """Load ``page`` in headless Chromium with the network off, save a screenshot to ``shot``
    and return the console messages the page logged."""
    assert CHROMIUM is not None, "DYNOSIM_REQUIRE_BROWSER is set but chromium is not installed"
    done = subprocess.run(
        [
            CHROMIUM,
            "--headless=new",
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
            # Any request leaving the machine fails: the page must not need one.
            "--proxy-server=127.0.0.1:9",
            "--enable-logging=stderr",
            "--v=0",
            f"--window-size=1280,{height}",
            f"--screenshot={shot}",
            page.resolve().as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert shot.exists(), done.stderr[-2000:]
    return [line for line in done.stderr.splitlines() if re.search(r":CONSOLE[:(]", line)]


def drawn_share(shot: Path) -> float:
    """Share of the screenshot's pixels that are not white."""
    pixels = image.imread(shot)[..., :3]
    return float((pixels < 0.97).any(axis=-1).mean())


def test_the_console_check_catches_an_error(tmp_path):
    # The check below can fail: a page that logs an error is caught.
    bad = tmp_path / "bad.html"
    bad.write_text("<!DOCTYPE html><p>x</p><script>console.error('boom')</script>")
    logged = open_in_chromium(bad, tmp_path / "bad.png", height=200)
    assert any("boom" in line for line in logged)
    blank = tmp_path / "blank.html"
    blank.write_text("<!DOCTYPE html><html><body></body></html>")
    open_in_chromium(blank, tmp_path / "blank.png", height=400)
    assert drawn_share(tmp_path / "blank.png") == 0.0


@pytest.fixture(scope="module")
def pages(tmp_path_factory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("pages")
    sample = dynosim.sample_trace_path()
    a = dynosim.replay(sample, {"cluster": {"num_workers": 2}, "sla": {"ttft_ms": 2000}})
    b = dynosim.replay(sample, {"cluster": {"num_workers": 4}, "sla": {"ttft_ms": 2000}})
    a.to_html(out / "replay.html")
    compare_page(a, b, ("2 workers", "4 workers"), out / "compare.html")
    space = dynosim.Space({"cluster.num_workers": [1, 2, 3]})
    work = dynosim.SyntheticWorkload(isl=512, osl=32, rate=4.0, count=60)
    result = dynosim.sweep(work, None, space, sla={"ttft_ms": 500.0, "tpot_ms": 20.0})
    pareto_page(result, result.best(), "sweep", out / "pareto.html")
    return {kind: out / f"{kind}.html" for kind in ("replay", "compare", "pareto")}


@pytest.mark.parametrize("kind", ["replay", "compare", "pareto"])
def test_each_page_opens_cleanly_and_draws(pages, kind, tmp_path):
    shot = tmp_path / f"{kind}.png"
    assert open_in_chromium(pages[kind], shot) == []
    # Text, tables and plots: well over a few percent of the page is drawn.
    assert drawn_share(shot) > 0.05
