"""The report of a small real run, rendered by headless Chromium: no console error, no network request, and
figures that have content. Skipped only when no Chromium-family browser is on PATH."""

from __future__ import annotations

import asyncio
import os
import struct
import sys
from pathlib import Path
from typing import Any

import pytest

from duplexkit.bench.report import write_report
from tests.report.devtools import HeadlessChromium, find_chromium

BROWSER = find_chromium()
pytestmark = pytest.mark.skipif(
    BROWSER is None,
    reason="no Chromium on PATH (chromium, chromium-browser, google-chrome): `apt-get install chromium`",
)

FIGURES = """(() => {
  const box = (el) => { const r = el.getBoundingClientRect(); return [r.width, r.height]; };
  const timelines = [...document.querySelectorAll("svg.timeline")];
  const cdfs = [...document.querySelectorAll(".card.latency")];
  return {
    timelines: timelines.map((svg) => ({
      marks: svg.querySelectorAll(".speech, .listen, .speak, .sentence rect").length,
      size: box(svg),
    })),
    cdfs: cdfs.map((card) => ({
      metric: card.dataset.metric,
      lines: card.querySelectorAll("svg.cdf path.series").length,
      dots: card.querySelectorAll("svg.cdf circle.dot").length,
      size: box(card.querySelector("svg.cdf")),
    })),
    deltas: document.querySelectorAll(".delta").length,
  };
})()"""

SEEK = """new Promise((resolve, reject) => {
  const audio = document.querySelector("audio[data-timeline]");
  const head = document.getElementById(audio.dataset.timeline).querySelector(".playhead");
  audio.addEventListener("error", () => reject(new Error("audio did not load")), { once: true });
  audio.addEventListener("loadedmetadata", () => { audio.currentTime = 1.0; }, { once: true });
  audio.addEventListener("seeked", () => setTimeout(() => resolve({
    x: Number(head.getAttribute("x1")),
    on: head.classList.contains("on"),
    expected: Number(head.ownerSVGElement.dataset.x0) + Number(head.ownerSVGElement.dataset.pxPerS),
  }), 50), { once: true });
  audio.preload = "auto";
  audio.load();
})"""


async def _bench(run_dir: Path) -> None:
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        *("-m", "duplexkit", "bench", "--dataset", "builtin", "--limit", "2", "--settle", "0.5"),
        *("--pace", "as-fast-as-possible", "--model", "scripted", "--out", str(run_dir)),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode == 0, (out + err).decode(errors="replace")


def _png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR"
    width, height = struct.unpack(">II", data[16:24])
    return width, height


def _network(requests: list[str]) -> list[str]:
    """Requests that left the machine: anything but the page's files and the browser's own data: icons."""
    return [url for url in requests if not url.startswith(("file:", "data:"))]


def _assert_figures(figures: dict[str, Any], timelines: int) -> None:
    assert len(figures["timelines"]) == timelines
    for timeline in figures["timelines"]:
        assert timeline["marks"] > 0 and timeline["size"][0] > 300 and timeline["size"][1] > 20
    assert [c["metric"] for c in figures["cdfs"]] == [
        "ttft_ms",
        "ttfp_ms",
        "tpot_ms",
        "rtf",
        "stream_ttft_ms",
        "stream_ttfp_ms",
    ]
    for card in figures["cdfs"]:
        assert card["lines"] >= 1 and card["dots"] >= 2 and card["size"][0] > 200, card


async def test_the_report_renders_in_headless_chromium(tmp_path: Path) -> None:
    assert BROWSER is not None
    run_dir = tmp_path / "run"
    await _bench(run_dir)
    report = write_report(run_dir)

    async with HeadlessChromium(BROWSER) as browser:
        await browser.open(report.resolve().as_uri())
        figures = await browser.evaluate(FIGURES)
        png = await browser.screenshot()
        playhead = await browser.evaluate(SEEK)
        log = browser.log

        assert log.console_errors == []
        assert _network(log.requests) == []
        _assert_figures(figures, timelines=2)
        assert figures["deltas"] == 0
        (tmp_path / "report.png").write_bytes(png)
        assert _png_size(png) == (1280, 900) and len(png) > 20_000
        assert playhead["on"] and playhead["x"] == pytest.approx(playhead["expected"], abs=0.5)

        compared = write_report(run_dir, [run_dir])
        await browser.open(compared.resolve().as_uri())
        figures = await browser.evaluate(FIGURES)

        assert log.console_errors == []
        assert _network(log.requests) == []
        _assert_figures(figures, timelines=4)  # each sample of A and of B
        assert figures["deltas"] > 0


LANES = """(() => [...document.querySelectorAll("svg.lanes")].map((svg) => ({
  phases: svg.querySelectorAll(".phase-early, .phase-core, .phase-miss").length,
  chunks: svg.querySelectorAll(".chunk").length,
  width: svg.getBoundingClientRect().width,
})))()"""


async def test_an_omniinteract_report_renders_its_scenario_table_and_slot_figures(tmp_path: Path) -> None:
    assert BROWSER is not None
    run_dir = tmp_path / "run"
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        *("-m", "duplexkit", "bench", "--benchmark", "omniinteract", "--dataset", "builtin", "--limit", "2"),
        *("--settle", "0.5", "--pace", "as-fast-as-possible", "--model", "scripted", "--out", str(run_dir)),
        *("--score", "--allow-invalid-clock"),
        env={**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache")},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), 120)
    assert process.returncode == 0, (out + err).decode(errors="replace")
    report = write_report(run_dir)

    async with HeadlessChromium(BROWSER) as browser:
        await browser.open(report.resolve().as_uri())
        lanes = await browser.evaluate(LANES)
        text = await browser.evaluate("document.body.innerText")
        log = browser.log

        assert log.console_errors == []
        assert _network(log.requests) == []
        assert len(lanes) == 2 and all(f["phases"] >= 2 and f["width"] > 300 for f in lanes)
        assert sum(f["chunks"] for f in lanes) > 0
        assert "IA-QTF1 by scenario" in text and "All Global" in text and "not comparable" in text
