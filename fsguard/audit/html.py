"""``fsguard report --html OUT.html``: the audit as one self-contained page a person can look at.

One file, nothing fetched: inline CSS, an inline SVG timeline and the marks' records as inline JSON. A few lines of
JavaScript show a mark's record on hover or click. A Content-Security-Policy forbids every network request, so the page
opens the same from a laptop's disk or a CI artifact.

What it shows, in the order a person asks: what was read, and what could not be, with the reason. Then a summary band:
job span, ranks, hosts, records by decision. Then the hazards and conflicts, where data may have been lost. Then a
timeline: one lane per process (per host for large jobs), time along the axis. It has one mark per record or bin,
coloured by its worst decision, with the longest wait drawn before it. Last, the longest waits and the text report's
call-site table with its path patterns (``fsguard.audit.report``).

Memory stays bounded: records are streamed into the text report's groups and into ``timeline.Timeline``,
whose bins adapt; nothing holds the records themselves.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from collections.abc import Iterable
from html import escape
from typing import Any

from ..records import Record
from . import report, tables, timeline
from .timeline import Cell, Sample

COLOURS = {
    "conflict": "#e8590c",
    "hazard": "#c92a2a",
    "unserialized": "#f08c00",
    "waited": "#e6c200",
    "deferred": "#7048e8",
    "yielded": "#2b8a3e",
    "absorbed": "#1c7ed6",
    "shared": "#66a3d9",
}
OTHER_COLOUR = "#868e96"
LABEL_W = 190
PLOT_W = 1000
AXIS_H = 26
MARK_MAX_W = 10
TICKS = 8


class Collector(report.Collector):
    """The text report's collector, also feeding the timeline with every record counted (not duplicates)."""

    def __init__(self) -> None:
        super().__init__()
        self.timeline = timeline.Timeline()

    def add(self, record: Record, stderr: bool = False) -> bool:
        if not super().add(record, stderr):
            return False
        self.timeline.add(record)
        return True


def _e(value: object) -> str:
    return escape(str(value), quote=True)


def _plural(n: int, word: str, many: str | None = None) -> str:
    return f"{n:,} {word if n == 1 else (many or word + 's')}"


def _precise(epoch: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(epoch)) + f".{int(epoch % 1 * 1000):03d}"


def _clock(epoch: float, step: float) -> str:
    if step >= 21600:
        return time.strftime("%m-%d %H:%M", time.localtime(epoch))
    if step >= 1:
        return time.strftime("%H:%M:%S", time.localtime(epoch))
    return time.strftime("%H:%M:%S", time.localtime(epoch)) + f".{round(epoch % 1 * 1000) % 1000:03d}"


def _duration(seconds: float) -> str:
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    days, hours = divmod(hours, 24)
    if days:
        return f"{days} d {hours} h {minutes} min"
    if hours:
        return f"{hours} h {minutes} min"
    return f"{minutes} min {secs} s"


def _colour(decision: str) -> str:
    return COLOURS.get(decision, OTHER_COLOUR)


def _decisions(counts: dict[str, int]) -> list[tuple[str, int]]:
    return sorted(counts.items(), key=lambda kv: timeline.severity(kv[0]))


def _sample_json(sample: Sample) -> dict[str, Any]:
    detail = {
        k: (v[:10] if isinstance(v, list) else v)
        for k, v in sample.detail.items()
        if k in ("renamed_to", "removed", "removed_count", "not_moved_within_s", "src", "dst")
    }
    return {
        "when": _precise(sample.time),
        "host": sample.host,
        "rank": sample.rank,
        "pid": sample.pid,
        "op": sample.op,
        "decision": sample.decision,
        "site": sample.site,
        "args": list(sample.args),
        "evidence": sample.evidence,
        "waited": round(sample.waited_s, 3),
        "detail": detail,
    }


# --- sections ------------------------------------------------------------------------------------------


def _problems(problems: tables.Problems, collector: Collector, read: int, status: int) -> str:
    parts = []
    errors = [p for p in problems.items if p.error]
    notes = [p for p in problems.items if not p.error]
    if errors:
        items = "".join(f"<li>{_e(p.text())}</li>" for p in errors)
        parts.append(
            '<section id="problems" class="problems"><h2>Inputs that could not be read completely</h2>'
            f"<p>{_plural(len(errors), 'problem')}: what is shown below comes from what could be read "
            f"(exit status {status}).</p><ul>{items}</ul></section>"
        )
    if notes:
        items = "".join(f"<li>{_e(p.text())}</li>" for p in notes)
        parts.append(f'<section id="notes" class="notes"><h2>Notes</h2><ul>{items}</ul></section>')
    if not collector.records:
        parts.append(
            f'<section id="nothing" class="nothing"><h2>{_e(report.nothing_found(read).capitalize())}</h2>'
            "<p>No line of the inputs is an fsguard record: nothing was absorbed, or fsguard was not active "
            "(<code>FSGUARD=1</code>), or its records went elsewhere (<code>FSGUARD_LOG</code>).</p></section>"
        )
    return "".join(parts)


def _summary_band(collector: Collector, read: int) -> str:
    groups = collector.groups.values()
    first = min(g.first for g in groups)
    last = max(g.last for g in groups)
    ranks: set[int] = set()
    hosts: set[str] = set()
    decisions: dict[str, int] = {}
    for g in groups:
        ranks |= g.ranks
        hosts |= g.hosts
        for d, n in g.decisions.items():
            decisions[d] = decisions.get(d, 0) + n
    host_names = ", ".join(sorted(hosts)[:6]) + (f" and {len(hosts) - 6} more" if len(hosts) > 6 else "")
    chips = "".join(
        f'<span class="chip" data-decision="{_e(d)}"><i style="background:{_colour(d)}"></i>{_e(d)} <b>{n:,}</b></span>'
        for d, n in _decisions(decisions)
    )
    duplicates = f"<small>{_plural(collector.duplicates, 'duplicate')} ignored</small>" if collector.duplicates else ""
    cards = [
        ("Job span", _duration(last - first), f"{tables.stamp(first)} to {tables.stamp(last)}"),
        ("Ranks", f"{len(ranks):,}", tables.ranks_text(ranks)),
        ("Hosts", f"{len(hosts):,}", host_names or "?"),
        ("Records", f"{collector.records:,}", f"in {_plural(read, 'input')}"),
    ]
    html = "".join(
        f'<div class="card"><h3>{_e(title)}</h3><b>{_e(big)}</b><small>{_e(small)}</small></div>'
        for title, big, small in cards
    )
    return (
        f'<section id="summary" class="band">{html}<div class="card wide"><h3>By decision</h3>{chips}'
        f"{duplicates}</div></section>"
    )


def _removed(sample: Sample) -> str:
    detail = sample.detail
    if sample.decision == "conflict":
        return "nothing: the call failed and its error was raised"
    if "removed_count" in detail:
        count = int(detail.get("removed_count") or 0)
        names = [str(n) for n in detail.get("removed") or []]
        shown = ", ".join(names[:10]) + (" ..." if count > min(len(names), 10) else "")
        return f"{_plural(count, 'entry', 'entries')}" + (f": {shown}" if shown else "")
    if "not_moved_within_s" in detail:
        return "the whole tree (peers' fresh work nobody moved away in time)"
    return "see the evidence"


def _went(sample: Sample) -> str:
    detail = sample.detail
    if detail.get("renamed_to"):
        return str(detail["renamed_to"])
    if sample.decision == "conflict":
        return f"left in place: {detail.get('dst') or (sample.args[-1] if sample.args else '?')}"
    if "not_moved_within_s" in detail:
        return "nowhere: removed"
    return "not recorded (see the evidence)"


def _at_risk(collector: Collector) -> str:
    line = timeline_of(collector)
    if not line.attention_total:
        return (
            '<section id="at-risk" class="safe"><h2>No hazards or conflicts</h2>'
            "<p>No record says data was at risk: every race was absorbed as the same operation a peer had "
            "already done.</p></section>"
        )
    rows = []
    for s in sorted(line.attention, key=lambda s: (s.time, timeline.severity(s.decision))):
        who = f"rank {s.rank}" if s.rank is not None else f"pid {s.pid}"
        rows.append(
            f'<tr class="d-{_e(s.decision)}"><td class="when">{_e(_precise(s.time))}</td>'
            f'<td><span class="tag" style="background:{_colour(s.decision)}">{_e(s.decision)}</span> {_e(s.op)}</td>'
            f"<td>{_e(who)}<br><small>{_e(s.host or '?')}</small></td>"
            f"<td><code>{_e(' -> '.join(s.args))}</code></td>"
            f"<td>{_e(_removed(s))}</td><td><code>{_e(_went(s))}</code></td>"
            f'<td><code>{_e(s.site)}</code></td><td class="why">{_e(s.evidence)}</td></tr>'
        )
    more = ""
    if line.attention_total > len(line.attention):
        more = f"<p>The first {len(line.attention):,} of {line.attention_total:,} are listed.</p>"
    return (
        f'<section id="at-risk" class="risk"><h2>Data may have been lost: '
        f"{_plural(line.attention_total, 'hazard or conflict', 'hazards and conflicts')}</h2>"
        "<p>A <b>hazard</b> is a tree removed while a peer moved it (or a peer's fresh tree removed): data is "
        "gone. A <b>conflict</b> is two different results for one path: the error was raised.</p>"
        '<div class="rows"><table><thead><tr><th>When</th><th>Decision</th><th>Who</th><th>Path</th>'
        "<th>What was removed</th><th>Where the tree went</th><th>Call site</th><th>Evidence</th></tr></thead>"
        f"<tbody>{''.join(rows)}</tbody></table></div>{more}</section>"
    )


def timeline_of(collector: report.Collector) -> timeline.Timeline:
    line = getattr(collector, "timeline", None)
    if not isinstance(line, timeline.Timeline):
        raise TypeError("the HTML page needs fsguard.audit.html.Collector")
    return line


def _ticks(start: float, span: float) -> tuple[float, list[float]]:
    steps = [0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 15, 30, 60, 120, 300, 600]
    steps += [900, 1800, 3600, 7200, 10800, 21600, 43200, 86400, 172800, 604800]
    step = next((s for s in steps if span / s <= TICKS), steps[-1])
    offset = time.localtime(start).tm_gmtoff
    first = ((start + offset) // step + 1) * step - offset
    ticks = []
    t = first
    while t <= start + span + 1e-9:
        ticks.append(t)
        t += step
    return step, ticks


def _timeline(collector: Collector, rows: list[timeline.Lane], kind: str) -> tuple[list[str], list[str]]:
    """The SVG's pieces, and each mark's cell as JSON (index: the mark's ``data-i``)."""
    line = timeline_of(collector)
    bins = line.bins
    span = bins * line.width
    bin_px = PLOT_W / bins
    mark_w = max(min(bin_px, MARK_MAX_W), 2.0)
    lane_h = 16 if kind == "process" else max(4, min(16, 720 // max(len(rows), 1)))
    height = AXIS_H + lane_h * len(rows) + 4
    width = LABEL_W + PLOT_W + 12
    parts = [
        f'<svg id="timeline-svg" xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img" aria-label="timeline of {_e(collector.records)} records">'
    ]
    step, ticks = _ticks(line.start, span)
    for t in ticks:
        x = LABEL_W + (t - line.start) / span * PLOT_W
        parts.append(
            f'<line class="tick" x1="{x:.1f}" y1="{AXIS_H - 4}" x2="{x:.1f}" y2="{height}"/>'
            f'<text class="axis" x="{x:.1f}" y="{AXIS_H - 8}">{_e(_clock(t, step))}</text>'
        )
    cells: list[str] = []
    host_before = None
    band = False
    label_every = 1 if lane_h >= 10 else -(-10 // lane_h)
    for n, row in enumerate(rows):
        y = AXIS_H + n * lane_h
        if kind == "process" and row.host != host_before:
            band = not band if host_before is not None else band
            parts.append(f'<line class="host-sep" x1="0" y1="{y}" x2="{width}" y2="{y}"/>')
            parts.append(f'<text class="host" x="4" y="{y + lane_h - 4}">{_e(_fit(row.host, 16))}</text>')
            host_before = row.host
        elif kind != "process":
            band = n % 2 == 1
        cls = "lane alt" if band else "lane"
        parts.append(
            f'<g class="{cls}" data-lane="{_e(row.label)}" data-host="{_e(row.host)}">'
            f'<rect class="bg" x="{LABEL_W}" y="{y}" width="{PLOT_W}" height="{lane_h}"/>'
        )
        if kind == "process" or n % label_every == 0:
            size = "" if lane_h >= 10 else f' style="font-size:{max(lane_h * label_every - 1, 6)}px"'
            label = _fit(row.label, 14 if kind == "process" else 28)
            parts.append(f'<text class="label" x="{LABEL_W - 6}" y="{y + lane_h - 4}"{size}>{_e(label)}</text>')
        for k in sorted(row.cells, key=lambda k: (timeline.severity(row.cells[k].decision) * -1, k)):
            cell = row.cells[k]
            parts.append(_mark(cell, k, y, lane_h, bin_px, mark_w, line.width, len(cells)))
            cells.append(_json_for_script(_cell_json(cell, k, row, line, kind)))
        parts.append("</g>")
    parts.append("</svg>")
    return parts, cells


def _fit(text: str, width: int) -> str:
    """A lane's label in the label column. Long host names keep their start; the whole name is in the tip."""
    return text if len(text) <= width else text[: width - 1] + "…"


def _mark(cell: Cell, k: int, y: int, lane_h: int, bin_px: float, mark_w: float, width_s: float, index: int) -> str:
    x = LABEL_W + k * bin_px + (bin_px - mark_w) / 2
    wait = ""
    if cell.longest_wait > 0:
        wait_px = max(cell.longest_wait / width_s * bin_px, 2.0)
        left = max(x - wait_px, LABEL_W)
        wait = (
            f'<rect class="wait" x="{left:.1f}" y="{y + lane_h / 2 - 1:.1f}" width="{x - left:.1f}" height="2" '
            f'data-i="{index}"/>'
        )
    return (
        f'{wait}<rect class="m d-{_e(cell.decision)}" x="{x:.1f}" y="{y + 1}" width="{mark_w:.1f}" '
        f'height="{max(lane_h - 2, 2)}" data-i="{index}" data-n="{cell.total}"/>'
    )


def _cell_json(cell: Cell, k: int, row: timeline.Lane, line: timeline.Timeline, kind: str) -> dict[str, Any]:
    t0 = line.start + k * line.width
    return {
        "lane": row.label if kind == "process" else f"{kind} {row.label}",
        "host": row.host,
        "from": _precise(t0),
        "to": _precise(t0 + line.width),
        "n": dict(_decisions(cell.counts)),
        "total": cell.total,
        "wait": round(cell.longest_wait, 3),
        "ranks": tables.ranks_text(cell.ranks) if cell.ranks else "",
        "s": _sample_json(cell.sample) if cell.sample is not None else None,
    }


def _legend(decisions: Iterable[str]) -> str:
    return "".join(
        f'<span class="chip"><i style="background:{_colour(d)}"></i>{_e(d)}</span>'
        for d in sorted(decisions, key=timeline.severity)
    )


def _timeline_section(collector: Collector) -> tuple[list[str], list[str]]:
    line = timeline_of(collector)
    rows, kind = timeline.lanes(line)
    svg, cells = _timeline(collector, rows, kind)
    one = {"process": "process (rank)", "host": "host", "hosts": "run of hosts"}[kind]
    seen = {d for c in line.cells.values() for d in c.counts}
    waited = any(c.longest_wait > 0 for c in line.cells.values())
    wait_key = '<span class="chip"><i class="waitkey"></i>longest wait</span>' if waited else ""
    note = (
        f"One lane per {one} ({len(rows):,} lanes), time along the axis (bins of {_duration(line.width)}). "
        f"A mark is the records of one lane in one bin, coloured by the worst decision among them; a thin bar "
        f"before it is the longest wait. Hover over a mark to see its record, click to keep it shown."
    )
    head = (
        f'<section id="timeline"><h2>Timeline</h2><p class="note">{_e(note)}</p>'
        f'<div class="legend">{_legend(seen)}{wait_key}</div>'
        '<div class="scroll">'
    )
    return [head, *svg, "</div></section>"], cells


def _waits(collector: Collector) -> str:
    longest = timeline_of(collector).longest_waits()
    if not longest:
        return ""
    rows = "".join(
        f'<tr><td class="num">{s.waited_s:.2f} s</td><td>{_e(_precise(s.time))}</td>'
        f"<td>{_e(f'rank {s.rank}' if s.rank is not None else f'pid {s.pid}')} <small>{_e(s.host)}</small></td>"
        f"<td>{_e(s.decision)} {_e(s.op)}</td><td><code>{_e(s.site)}</code></td>"
        f'<td class="why">{_e(s.evidence)}</td></tr>'
        for s in longest
    )
    return (
        '<section id="waits"><h2>Longest waits</h2><table><thead><tr><th>Wait</th><th>When</th><th>Who</th>'
        f"<th>Record</th><th>Call site</th><th>Evidence</th></tr></thead><tbody>{rows}</tbody></table></section>"
    )


def _sites(collector: Collector) -> str:
    rows = []
    for g in collector.sorted_groups():
        shown, hidden = report.path_patterns(g)
        paths = "".join(f"<div><code>{_e(p)}</code></div>" for p in shown)
        if hidden > 0:
            paths += f"<div><small>{_e(report.more_patterns(hidden))}</small></div>"
        mix = f"<div><b>mix</b> {_e(report.mix(g))}</div>" if len(g.decisions) > 1 else ""
        why = f'<div class="why"><b>why</b> {_e(g.evidence)}</div>' if g.evidence else ""
        why += "".join(f'<div class="why"><b>deferred by</b> {_e(text)}</div>' for text in g.deferrals())
        rows.append(
            f'<tr class="{"attention" if g.attention else ""}"><td>{"!!" if g.attention else ""}</td>'
            f'<td><span class="tag" style="background:{_colour(g.decision)}">{_e(g.decision)}</span></td>'
            f'<td>{_e(g.op)}</td><td class="num">{g.count:,}</td><td>{_e(tables.ranks_text(g.ranks))}</td>'
            f'<td class="num" title="{_e(", ".join(sorted(g.hosts)))}">{len(g.hosts) or "?"}</td>'
            f'<td class="num">{g.longest_wait:.2f} s</td><td>{_e(tables.clock(g.first))}</td>'
            f"<td>{_e(tables.clock(g.last))}</td>"
            f"<td><div><code>{_e(g.site_text)}</code></div>{paths}{mix}{why}</td></tr>"
        )
    return (
        '<section id="sites"><h2>Call sites</h2><p class="note">The table of <code>fsguard report</code>: '
        "one row per operation and call site, paths folded into patterns; hazards and conflicts first.</p>"
        "<table><thead><tr><th></th><th>Decision</th><th>Op</th><th>N</th><th>Ranks</th><th>Hosts</th>"
        "<th>Longest wait</th><th>First</th><th>Last</th><th>Call site, paths, why</th></tr></thead>"
        f"<tbody>{''.join(rows)}</tbody></table></section>"
    )


STYLE = """
:root{font:14px/1.4 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;color:#212529;background:#fff}
body{margin:0 auto;padding:16px 24px;max-width:1400px}
h1{font-size:22px;margin:0 0 2px}h2{font-size:17px;margin:0 0 6px}h3{font-size:12px;margin:0;color:#495057;
text-transform:uppercase;letter-spacing:.04em}
header p{margin:0;color:#495057}section{margin:14px 0}code{font:12px/1.3 ui-monospace,Menlo,Consolas,monospace;
word-break:break-all}small{color:#6c757d}
.band{display:flex;flex-wrap:wrap;gap:10px}.card{border:1px solid #dee2e6;border-radius:6px;padding:8px 12px;
min-width:150px}.card b{display:block;font-size:20px}.card small{display:block;max-width:320px}
.card.wide{flex:1}.chip{display:inline-block;margin:4px 10px 0 0;white-space:nowrap}
.chip i{display:inline-block;width:11px;height:11px;border-radius:2px;margin-right:4px;vertical-align:-1px}
.chip b{display:inline;font-size:14px}.waitkey{background:#343a40;height:3px!important;vertical-align:3px!important}
.risk{border:2px solid #c92a2a;border-left-width:8px;border-radius:6px;padding:8px 12px;background:#fff5f5}
.risk h2{color:#c92a2a}.risk .rows{max-height:300px;overflow-y:auto}
.safe{border:1px solid #b2f2bb;border-left:8px solid #2b8a3e;border-radius:6px;
padding:8px 12px;background:#ebfbee}.safe h2{color:#2b8a3e}
.problems{border:2px solid #e8590c;border-left-width:8px;border-radius:6px;padding:8px 12px;background:#fff4e6}
.problems h2{color:#d9480f}.nothing{border:1px solid #adb5bd;border-radius:6px;padding:8px 12px;background:#f8f9fa}
.notes{color:#495057}
table{border-collapse:collapse;width:100%;margin-top:6px}th,td{border-bottom:1px solid #e9ecef;padding:4px 6px;
text-align:left;vertical-align:top}th{font-size:12px;color:#495057;background:#f8f9fa}td.num{text-align:right;
white-space:nowrap}td.when{white-space:nowrap}.why{color:#495057;max-width:420px}tr.attention{background:#fff5f5}
.tag{color:#fff;border-radius:3px;padding:0 5px;font-size:12px;white-space:nowrap}
.note{color:#495057;margin:2px 0 4px}.legend{margin-bottom:4px}.scroll{overflow-x:auto}
#timeline-svg text{font:11px system-ui,sans-serif;fill:#343a40}#timeline-svg .axis{fill:#6c757d;
text-anchor:middle}#timeline-svg .label{text-anchor:end}#timeline-svg .host{font-weight:600}
#timeline-svg .tick{stroke:#e9ecef}#timeline-svg .host-sep{stroke:#ced4da}
#timeline-svg .bg{fill:#fff}#timeline-svg .alt .bg{fill:#f8f9fa}#timeline-svg .wait{fill:#343a40}
#timeline-svg .m{cursor:pointer}#timeline-svg .m:hover,#timeline-svg .pinned{stroke:#000;stroke-width:1.5}
#tip{position:fixed;z-index:10;max-width:560px;background:#fff;border:1px solid #868e96;border-radius:6px;
padding:8px 10px;box-shadow:0 4px 14px rgba(0,0,0,.18);font-size:13px;pointer-events:none}#tip div{margin:1px 0}
#tip code{font-size:12px}footer{margin-top:18px;color:#6c757d;font-size:12px}
"""
STYLE += f"#timeline-svg .m{{fill:{OTHER_COLOUR}}}"
STYLE += "".join(f"#timeline-svg .d-{d}{{fill:{c}}}" for d, c in COLOURS.items())

SCRIPT = """
(function () {
  "use strict";
  var cells = JSON.parse(document.getElementById("cells").textContent);
  var svg = document.getElementById("timeline-svg"), tip = document.getElementById("tip"), pinned = null;
  function row(label, text, code) {
    var div = document.createElement("div"), b = document.createElement("b");
    b.textContent = label + " ";
    div.appendChild(b);
    var value = document.createElement(code ? "code" : "span");
    value.textContent = text;
    div.appendChild(value);
    return div;
  }
  function show(mark, x, y) {
    var c = cells[+mark.getAttribute("data-i")], s = c.s, counts = [];
    for (var d in c.n) counts.push(c.n[d] + " " + d);
    var lines = [row(c.total === 1 ? "1 record" : c.total + " records", c.lane + ", " + c.from + " to " + c.to)];
    lines.push(row("decisions", counts.join(", ")));
    if (c.ranks) lines.push(row("ranks", c.ranks));
    if (c.wait > 0) lines.push(row("longest wait", c.wait + " s"));
    if (s) {
      lines.push(row(c.total === 1 ? "record" : "first " + s.decision + " record",
        s.when + ", " + (s.rank === null ? "pid " + s.pid : "rank " + s.rank) + " on " + (s.host || "?")));
      lines.push(row(s.decision, s.op));
      lines.push(row("at", s.site, true));
      lines.push(row("paths", s.args.join(" -> "), true));
      lines.push(row("evidence", s.evidence));
      if (s.waited > 0) lines.push(row("waited", s.waited + " s"));
      if (s.detail.renamed_to) lines.push(row("tree went to", s.detail.renamed_to, true));
      if (s.detail.removed_count !== undefined) lines.push(row("removed", s.detail.removed_count + " entries"));
    }
    tip.replaceChildren.apply(tip, lines);
    tip.hidden = false;
    var left = Math.min(x + 14, window.innerWidth - tip.offsetWidth - 8);
    var top = y + 14 + tip.offsetHeight > window.innerHeight ? y - tip.offsetHeight - 10 : y + 14;
    tip.style.left = Math.max(left, 4) + "px";
    tip.style.top = Math.max(top, 4) + "px";
  }
  function markOf(target) { return target.closest ? target.closest("[data-i]") : null; }
  svg.addEventListener("mousemove", function (e) {
    if (pinned) return;
    var mark = markOf(e.target);
    if (mark) show(mark, e.clientX, e.clientY); else tip.hidden = true;
  });
  svg.addEventListener("mouseleave", function () { if (!pinned) tip.hidden = true; });
  svg.addEventListener("click", function (e) {
    var mark = markOf(e.target);
    if (pinned) pinned.classList.remove("pinned");
    pinned = mark;
    if (mark) { mark.classList.add("pinned"); show(mark, e.clientX, e.clientY); } else tip.hidden = true;
  });
  document.addEventListener("keydown", function (e) {
    if (e.key === "Escape" && pinned) { pinned.classList.remove("pinned"); pinned = null; tip.hidden = true; }
  });
})();
"""

POLICY = "default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:"


def _json_for_script(value: object) -> str:
    """JSON safe inside ``<script type="application/json">``: no ``</`` can end the element early."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).replace("</", "<\\/").replace("<!--", "<\\!--")


def render(
    collector: Collector, read: int, problems: tables.Problems, status: int, version: str, paths: list[str]
) -> list[str]:
    """The whole page, in pieces (``"".join`` them, or hand them to ``write``)."""
    title = "fsguard report"
    headline = report.summary(collector, read) if collector.records else report.nothing_found(read)
    zone = time.strftime("%z", time.localtime())
    parts = [
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">',
        f'<meta http-equiv="Content-Security-Policy" content="{POLICY}">',
        '<meta name="viewport" content="width=device-width,initial-scale=1">',
        f"<title>{_e(title)}: {_e(headline)}</title><style>{STYLE}</style></head><body>",
        f'<header><h1>{_e(title)}</h1><p id="headline">{_e(headline)}</p></header>',
        _problems(problems, collector, read, status),
    ]
    cells: list[str] = []
    if collector.records:
        section, cells = _timeline_section(collector)
        parts += [_summary_band(collector, read), _at_risk(collector), *section, _waits(collector), _sites(collector)]
    shown = ", ".join(paths[:10]) + (f" and {len(paths) - 10} more" if len(paths) > 10 else "")
    parts.append(
        f"<footer>Made by <code>fsguard report</code> (fsguard {_e(version)}) on "
        f"{_e(time.strftime('%Y-%m-%d %H:%M:%S'))}; times are local (UTC{_e(zone)}). Inputs: {_e(shown)}. "
        f"Exit status {status}.</footer>"
    )
    parts.append('<div id="tip" hidden></div>')
    parts += ['<script type="application/json" id="cells">[', ",".join(cells), "]</script>"]
    if collector.records:
        parts.append(f"<script>{SCRIPT}</script>")
    parts.append("</body></html>\n")
    return parts


def write(path: str, page: Iterable[str]) -> None:
    """Write the page whole or not at all; raises OSError. It writes a temporary file beside it, then renames it."""
    directory = os.path.dirname(os.path.abspath(path))
    fd, temporary = tempfile.mkstemp(prefix=".fsguard-report-", suffix=".html", dir=directory)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.writelines(page)
        os.chmod(temporary, 0o644 & ~_umask())
        os.replace(temporary, path)
    except BaseException:
        try:
            os.unlink(temporary)
        except OSError:
            pass
        raise


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
