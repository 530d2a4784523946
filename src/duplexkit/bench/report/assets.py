"""The report page's stylesheet and script, embedded whole in every report (no network, no CDN).

The script only moves each timeline's playhead with its audio player and seeks the audio when the timeline is
clicked; the page reads fine without it.
"""

from __future__ import annotations

SERIES_COLOURS = ("#2563eb", "#ea580c", "#059669", "#9333ea", "#db2777", "#0891b2")
"""Colour slot `s<i>` of run i (cycled): the run's CDF lines, dots and legend swatches."""

_SERIES_CSS = "".join(
    f".s{i}{{stroke:{c}}}circle.s{i}{{fill:{c}}}.sw.s{i}{{background:{c};border-color:{c}}}"
    for i, c in enumerate(SERIES_COLOURS)
)

CSS = (
    """
:root{--ink:#0f172a;--muted:#64748b;--line:#e2e8f0;--soft:#f8fafc;--accent:#2563eb;--good:#047857;
--bad:#b91c1c;--warn:#92400e;--warn-bg:#fffbeb;--speech:#a78bfa;--speak:#2563eb;--listen:#94a3b8;
--sentence:#0f766e;--reminder:#dc2626}
*{box-sizing:border-box}
body{margin:0;font:14px/1.5 system-ui,-apple-system,"Segoe UI","Liberation Sans","DejaVu Sans",sans-serif;
color:var(--ink);background:#f1f5f9}
main{max-width:1180px;margin:0 auto;padding:0 20px 48px}
header.top{background:var(--ink);color:#fff;padding:22px 0 18px;margin-bottom:20px}
header.top .inner{max-width:1180px;margin:0 auto;padding:0 20px}
header.top h1{margin:0;font-size:22px;font-weight:650;letter-spacing:-.01em}
header.top p{margin:4px 0 0;color:#cbd5e1}
header.top nav{margin-top:12px;display:flex;gap:16px;flex-wrap:wrap}
header.top nav a{color:#93c5fd;text-decoration:none;font-weight:500}
header.top nav a:hover{text-decoration:underline}
section{background:#fff;border:1px solid var(--line);border-radius:10px;padding:18px 20px;margin:0 0 18px}
h2{font-size:17px;margin:0 0 12px;font-weight:650}
h3{font-size:14px;margin:0 0 6px;font-weight:650}
table+h3,p+h3,.note+h3{margin-top:18px}
p.lead,.muted{color:var(--muted)}
p.lead{margin:-6px 0 14px}
code,.mono{font-family:ui-monospace,"DejaVu Sans Mono","Liberation Mono",monospace;font-size:12.5px}
a{color:var(--accent)}
table{border-collapse:collapse;width:100%;font-variant-numeric:tabular-nums}
th,td{text-align:left;padding:5px 10px;border-bottom:1px solid var(--line);vertical-align:top}
th{font-weight:600;color:var(--muted);font-size:12px;text-transform:uppercase;letter-spacing:.03em}
td.num,th.num{text-align:right;white-space:nowrap}
tr.differs td{background:var(--warn-bg)}
table.compare{width:auto;min-width:55%}
table.compare td:first-child{padding-right:28px}
th.group-head{text-align:center;border-bottom:2px solid var(--line)}
.nowrap{white-space:nowrap}
table.kv th{text-transform:none;font-size:13px;letter-spacing:0;width:170px;color:var(--ink)}
td.group{font-weight:600}
tr.family td{background:var(--soft);font-weight:600}
.small{font-size:12px}.small.bad{color:var(--bad)}
.delta{font-size:12px;font-weight:600;white-space:nowrap}
.delta.up{color:var(--good)}.delta.down{color:var(--bad)}.delta.same,.delta.na{color:var(--muted)}
.badge{display:inline-block;padding:1px 8px;border-radius:999px;font-size:12px;font-weight:600;
background:var(--soft);border:1px solid var(--line);white-space:nowrap}
.badge.published{background:#ecfdf5;border-color:#a7f3d0;color:var(--good)}
.badge.failed{background:#fef2f2;border-color:#fecaca;color:var(--bad)}
.badge.retried{background:var(--warn-bg);border-color:#fde68a;color:var(--warn)}
.note{background:var(--warn-bg);border:1px solid #fde68a;color:var(--warn);border-radius:8px;padding:8px 12px;
margin:10px 0}
.note.error{background:#fef2f2;border-color:#fecaca;color:var(--bad)}
.note ul{margin:4px 0 0;padding-left:18px}
.cards{display:grid;grid-template-columns:repeat(auto-fill,minmax(520px,1fr));gap:16px}
.card{border:1px solid var(--line);border-radius:8px;padding:12px 14px}
.legend{display:flex;flex-wrap:wrap;gap:6px 16px;margin:6px 0;font-size:12px;color:var(--muted)}
.legend span{display:inline-flex;align-items:center;gap:6px}
.sw{display:inline-block;width:18px;height:0;border-top:3px solid}
.sw.dashed{border-top-style:dashed}
.key{display:inline-block;width:14px;height:10px;border-radius:2px}
.key.speech{background:var(--speech)}.key.speak{background:var(--speak)}.key.listen{background:var(--listen)}
.key.sentence{background:var(--sentence)}.key.reminder{background:var(--reminder);width:3px}
details.sample{border:1px solid var(--line);border-radius:8px;margin:10px 0;background:#fff}
details.sample>summary{cursor:pointer;padding:9px 14px;display:flex;gap:10px;align-items:center;
flex-wrap:wrap;list-style:none}
details.sample>summary::-webkit-details-marker{display:none}
details.sample>summary::before{content:"\\25B8";color:var(--muted);width:10px}
details.sample[open]>summary::before{content:"\\25BE"}
details.sample[open]>summary{border-bottom:1px solid var(--line)}
.sample-body{padding:10px 14px 14px}
.run-block+.run-block{border-top:1px dashed var(--line);margin-top:12px;padding-top:12px}
.run-name{font-weight:650;margin-bottom:4px}
.question{margin:0 0 8px}
.error-line{color:var(--bad)}
.row{display:grid;grid-template-columns:1fr 1fr;gap:14px;margin-top:8px}
@media (max-width:820px){.row{grid-template-columns:1fr}.cards{grid-template-columns:1fr}}
audio{width:100%;height:34px;margin:4px 0}
svg{display:block;width:100%;height:auto}
svg text{font-family:system-ui,"Liberation Sans","DejaVu Sans",sans-serif;fill:#475569}
svg .lane{fill:var(--soft);stroke:var(--line)}
svg .lane-label{font-size:12px;text-anchor:end;fill:var(--ink)}
svg .grid{stroke:#eef2f7}
svg .axis{stroke:#94a3b8}
svg .tick{font-size:11px;text-anchor:middle}
svg .tick.unit{text-anchor:end}
svg .tick.y{text-anchor:end}
svg .speech{fill:var(--speech)}
svg .speak{fill:var(--speak)}
svg .listen{fill:var(--listen)}
svg .sentence rect{fill:var(--sentence)}
svg .sentence text{font-size:10px;fill:#fff;font-weight:600}
svg .padding{fill:#e2e8f0;opacity:.45}
svg .clip-end{stroke:#475569;stroke-width:1.2}
svg .reminder{stroke:var(--reminder);stroke-width:1.5;stroke-dasharray:4 3}
svg .mark-label{font-size:11px;fill:#475569}
svg .reminder-label{fill:var(--reminder);font-weight:600}
svg .playhead{stroke:#f59e0b;stroke-width:2;visibility:hidden}
svg .playhead.on{visibility:visible}
svg.timeline{cursor:crosshair;margin:4px 0}
svg .plot{fill:#fff;stroke:var(--line)}
svg .ref{stroke:#cbd5e1;stroke-dasharray:3 3}
svg .ref-label{font-size:10px;fill:var(--muted)}
svg .axis-label{font-size:11px;text-anchor:middle;fill:var(--muted)}
svg .series{fill:none;stroke-width:2}
svg .series.dashed{stroke-dasharray:6 4}
svg .dot{stroke:#fff;stroke-width:1.5}
svg .empty{font-size:13px;text-anchor:middle;fill:var(--muted)}
svg .phase-early{fill:#fde68a}
svg .phase-core{fill:#bbf7d0}
svg .phase-miss{fill:#fecaca}
svg .chunk{fill:var(--sentence)}
svg .answer-mark{stroke:#15803d;stroke-width:1.5}
footer{color:var(--muted);font-size:12px;text-align:center;margin-top:24px}
"""
    + _SERIES_CSS
    + "\n"
)

JS = """
(function () {
  "use strict";
  function place(svg, seconds) {
    var head = svg.querySelector(".playhead");
    var x = Number(svg.dataset.x0) + seconds * Number(svg.dataset.pxPerS);
    head.setAttribute("x1", String(x));
    head.setAttribute("x2", String(x));
    head.classList.add("on");
  }
  document.querySelectorAll("audio[data-timeline]").forEach(function (audio) {
    var svg = document.getElementById(audio.dataset.timeline);
    if (!svg) { return; }
    var frame = 0;
    function follow() {
      place(svg, audio.currentTime);
      if (!audio.paused) { frame = window.requestAnimationFrame(follow); }
    }
    audio.addEventListener("error", function () {
      var note = document.createElement("p");
      note.className = "small bad";
      note.textContent = "This clip is not where the page expects it: open report.html in its run folder.";
      audio.replaceWith(note);
    });
    audio.addEventListener("play", follow);
    audio.addEventListener("seeked", follow);
    audio.addEventListener("pause", function () { window.cancelAnimationFrame(frame); });
    svg.addEventListener("click", function (event) {
      var box = svg.getBoundingClientRect();
      var x = (event.clientX - box.left) * svg.viewBox.baseVal.width / box.width;
      var seconds = (x - Number(svg.dataset.x0)) / Number(svg.dataset.pxPerS);
      if (seconds >= 0) { audio.currentTime = seconds; place(svg, seconds); }
    });
  });
})();
"""
