"""The pictures and pages of replays and sweeps: every plot draws data, the numbers a page shows
are the report's own, pages need no network and are byte-identical for the same report."""

from __future__ import annotations

import html
import json
import re

import numpy as np
import pytest

import dynosim
from dynosim.views import figures
from dynosim.views.card import summary_card
from dynosim.views.pages import compare_page, pareto_page, replay_page
from dynosim.views.series import MAX_POINTS, cdf, link_names, rate, timeseries

pytest.importorskip("matplotlib")

#: Disaggregated, with links at a bandwidth, offload tiers and an SLA: every panel has data.
FULL = {
    "cluster": {"mode": "disaggregated", "num_prefill_workers": 2, "num_decode_workers": 2},
    "engine": {"num_gpu_blocks": 4096},
    "kv_transfer": {"kv_bytes_per_token": 160000, "bandwidth_gbps": 25},
    "offload": {"g2_blocks": 4096},
    "sla": {"ttft_ms": 2000.0, "itl_ms": 40.0},
}


@pytest.fixture(scope="module")
def full() -> dynosim.Report:
    return dynosim.replay(dynosim.sample_trace_path(), FULL)


@pytest.fixture(scope="module")
def plain_report() -> dynosim.Report:
    return dynosim.replay(dynosim.sample_trace_path(), {"cluster": {"num_workers": 2}})


def cells(page: str) -> list[tuple[str, str, object]]:
    """Every tagged number cell of a page: (report tag, dotted key, exact value)."""
    found = []
    for attrs in re.findall(r"<td ([^>]*data-key[^>]*)>", page):
        key = re.search(r'data-key="([^"]*)"', attrs).group(1)
        value = json.loads(html.unescape(re.search(r'data-value="([^"]*)"', attrs).group(1)))
        tag = re.search(r'data-report="([^"]*)"', attrs)
        found.append((tag.group(1) if tag else "", html.unescape(key), value))
    return found


def lookup(summary: dict, key: str) -> object:
    value = summary
    for part in key.split("."):
        value = value[part]
    return value


@pytest.mark.parametrize("kind", ["latency", "rates", "state", "load", "links"])
def test_every_plot_kind_draws_data(full, kind):
    fig = full.plot(kind)
    assert figures.plotted_points(fig) > 0
    # One series per worker (and link) shows up as its own line.
    if kind == "state":
        # Each panel's legend names a worker by its label alone: the axis says what it shows.
        legends = {
            ax.get_ylabel(): [t.get_text() for t in ax.get_legend().texts]
            for ax in fig.axes
            if ax.get_legend()
        }
        assert "P0" in legends["KV blocks in use"] and "D1" in legends["busy share"]


def test_an_unknown_plot_kind_names_the_kinds(full):
    with pytest.raises(ValueError, match="latency"):
        full.plot("pie")


def test_links_refuses_a_replay_without_links(plain_report):
    with pytest.raises(ValueError, match="no KV over links"):
        plain_report.plot("links")


def test_the_page_shows_the_reports_numbers_and_every_plot_has_data(full):
    page = replay_page(full)
    shown = cells(page)
    assert len(shown) > 30
    for _, key, value in shown:
        assert value == lookup(full.summary, key), key
    points = [int(p) for p in re.findall(r'class="plot" id="[^"]*" data-points="(\d+)"', page)]
    # latency, rates, state, load, links
    assert len(points) == 5 and min(points) > 0
    # Provenance: the version, the configuration's hash and the trace's name and hash.
    prov = full.provenance
    for text in (prov["dynosim_version"], prov["config_sha256"], prov["trace"]["sha256"]):
        assert text in page


def test_a_page_needs_no_network(full):
    page = replay_page(full)
    assert "<script" not in page and "<link" not in page and "@import" not in page
    # The only URLs are XML namespaces and matplotlib's generator credit, never fetched.
    urls = set(re.findall(r"""(?:src|href)\s*=\s*["']([^"']+)""", page))
    assert all(not u.startswith(("http:", "https:", "//")) for u in urls), urls


def test_pages_are_byte_identical_for_the_same_report(full):
    again = dynosim.replay(dynosim.sample_trace_path(), FULL)
    assert replay_page(full) == replay_page(again)


def test_the_compare_page_shows_both_reports_and_their_change(full, plain_report):
    page = compare_page(plain_report, full, ("two", "disagg"))
    shown = cells(page)
    by = {(tag, key): value for tag, key, value in shown}
    assert by[("a", "ttft_ms.mean")] == plain_report.summary["ttft_ms"]["mean"]
    assert by[("b", "ttft_ms.mean")] == full.summary["ttft_ms"]["mean"]
    # The settings that differ are listed, e.g. the serving mode.
    assert "cluster.mode" in page and "&quot;disaggregated&quot;" in page
    # B - A of the completed count: both complete the 3,000 sample rows.
    row = re.search(r"<th>completed</th>(.*?)</tr>", page).group(1)
    assert re.findall(r"<td class='num'>([^<]*)</td>", row)[0] == "0"


def test_the_pareto_page_marks_the_pick_and_plots_every_candidate():
    work = dynosim.SyntheticWorkload(isl=512, osl=32, rate=4.0, count=60)
    result = dynosim.sweep(
        work, None, dynosim.Space({"cluster.num_workers": [1, 2, 3]}), sla={"ttft_ms": 500.0}
    )
    pick = result.best()
    page = pareto_page(result, pick, "sweep")
    fig = figures.pareto(result.rows, result.pareto().rows, pick, None)
    scatter = sum(
        len(c.get_offsets()) for c in fig.axes[0].collections if c.get_gid() != figures.REFERENCE
    )
    assert scatter == len(result.rows) == 3
    assert "The pick (fewest GPUs meeting the SLA)" in page
    assert 'data-points="' in page


def test_the_summary_card_shows_the_headline(full):
    card = full._repr_html_()
    assert card == summary_card(full)
    for _, key, value in cells(card):
        assert value == lookup(full.summary, key)
    assert "3,000" in card  # requests


def test_timeseries_views_label_workers_and_links(full):
    series = timeseries(full)
    assert {"queued", "running", "g2_blocks_used", "onboarding"} <= set(series)
    assert [k for k in series if k.startswith("link_utilization[")] == [
        "link_utilization[P0 send]",
        "link_utilization[P1 send]",
        "link_utilization[D0 recv]",
        "link_utilization[D1 recv]",
    ]
    t, mean, lo, hi = series["running"]
    assert len(t) <= MAX_POINTS and np.all(lo <= mean + 1e-9) and np.all(mean <= hi + 1e-9)


def test_link_names_count_data_parallel_ranks():
    config = dynosim.SimConfig.model_validate(
        {
            "cluster": {"mode": "disaggregated", "num_prefill_workers": 1, "num_decode_workers": 1},
            "prefill": {"engine": {"data_parallel_size": 2}},
        }
    ).model_dump(mode="json")
    assert link_names(config) == ["P0.0 send", "P0.1 send", "D0 recv"]


def test_rate_counts_events_per_second():
    # Arrivals at 0, 0.5, 1.5 and 2.5 s over a 3 s replay: 2, 1, 1 per 1 s bucket.
    t, per_s, width = rate(np.array([0.0, 500.0, 1500.0, 2500.0, np.nan]), 3000.0)
    assert (t.tolist(), per_s.tolist(), width) == ([0.0, 1.0, 2.0], [2.0, 1.0, 1.0], 1.0)
    # 10,000 s in at most 2,048 buckets: 5 s wide, so one event is 0.2/s.
    t, per_s, width = rate(np.array([0.0]), 10_000_000.0)
    assert width == 5.0 and len(t) == 2000 and per_s[0] == 0.2


def test_cdf_thins_to_max_points_and_keeps_both_ends():
    values = np.arange(10_000, dtype=float)[::-1]
    x, y = cdf(values)
    assert len(x) <= MAX_POINTS
    assert (x[0], y[0], x[-1], y[-1]) == (0.0, 1e-4, 9999.0, 1.0)
    assert np.all(np.diff(x) > 0)


def test_the_pareto_page_leads_with_gpus_and_the_sla_and_lists_replayed_candidates():
    from dynosim.plan.result import SweepResult

    work = dynosim.SyntheticWorkload(isl=512, osl=32, rate=4.0, count=60)
    space = dynosim.Space({"cluster.num_workers": [2, 1]})
    swept = dynosim.sweep(work, None, space, sla={"ttft_ms": 500.0, "tpot_ms": 100.0})
    failed = {
        **{k: None for k in swept.rows[0]},
        "index": 2,
        "cluster.num_workers": 3,
        "sla_met": False,
        "error": "the replay failed: boom",
    }
    result = SweepResult([*swept.rows, failed], swept.settings, swept.sla)
    page = pareto_page(result, result.best(), "sweep")
    every = page[page.index("Every replayed candidate") :]
    header = re.findall(r"<th>([^<]*)</th>", every)
    assert header[:4] == ["GPUs", "TTFT p90 (ms)", "TPOT mean (ms)", "SLA"]
    table = every[: every.index("</table>")]
    gpus = [int(row[0]) for row in re.findall(r"<tr><td[^>]*>(\d+)</td>", table)]
    assert gpus == [1, 2]  # fewest GPUs first, the failed candidate not among them
    assert "2 candidates replayed" in page and "1 failed" in page
    assert "did not replay" in every and "boom" in every
