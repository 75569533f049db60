"""The run page's charts, drawn on the server as SVG with leather.

leather (MIT, pure Python, no dependencies, about 80 kB installed) writes plain SVG elements:
no script, no stylesheet, nothing fetched, so the page stays whole offline and the console
serves no third-party file. Its ElementTree output is annotated here before it is written:
each chart gets ``<title>``/``<desc>`` (read by screen readers; its axes are named) and each
mark a stable ``data-*`` attribute (``data-checkpoint``, ``data-attempt``, ``data-notice``,
``data-row``, ``data-state``, ``data-bound``), which tests and users' scripts can rely on.
ElementTree escapes every name it writes, so a machine's or checkpoint's name is text, never
markup.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Iterator
from typing import Any

import leather  # type: ignore[import-untyped]

from portal.console.chartdata import JobFacts
from portal.core import units

__all__ = ["CHART_IDS", "render_charts"]

#: The charts, in page order (each one's ``id`` and ``data-chart``).
CHART_IDS = ("checkpoint-size", "upload-time", "attempts", "state-bound")

_WIDTH, _HEIGHT = 520, 250
_SVG = "http://www.w3.org/2000/svg"
_NOTICE_COLOR, _BOUND_COLOR, _STATE_COLOR = "#d92d20", "#f79009", "#1570ef"
#: Bars of figures (sizes, seconds): not red, which the page keeps for notices and failures.
_BAR_COLOR = "#1570ef"
_ROW_COLORS = ("#1570ef", "#079455", "#7a5af8", "#dd2590", "#0e9384", "#667085")


def render_charts(facts: JobFacts) -> list[dict[str, Any]]:
    """Every chart as ``{id, title, svg, note}``: ``svg`` is None (and ``note`` says why) when
    the job has nothing to draw yet."""
    return [
        _checkpoint_size(facts),
        _upload_time(facts),
        _attempts(facts),
        _state_bound(facts),
    ]


def _entry(chart_id: str, title: str, svg: str | None, note: str | None) -> dict[str, Any]:
    return {"id": chart_id, "title": title, "svg": svg, "note": note}


def _checkpoint_size(facts: JobFacts) -> dict[str, Any]:
    title = "Checkpoint size"
    points = facts.checkpoints
    if not points:
        return _entry("checkpoint-size", title, None, "No checkpoint stored yet.")
    chart = leather.Chart()  # the title is the figure's caption (and the SVG's <title>)
    chart.add_columns(
        [(str(i), p.bytes) for i, p in enumerate(points, start=1)],
        name="size",
        fill_color=_BAR_COLOR,
    )
    chart.add_x_axis(name="checkpoint, oldest first")
    chart.add_y_axis(tick_formatter=_sizes, name="size as stored")
    desc = "; ".join(
        f"checkpoint {i} ({p.id}): {units.size(p.bytes)}" for i, p in enumerate(points, start=1)
    )
    root = _render(chart, "checkpoint-size", title, desc)
    for rect, point in zip(_marks(root, "columns", "rect"), points, strict=True):
        rect.set("data-checkpoint", point.id)
        rect.set("data-bytes", str(point.bytes))
    return _entry("checkpoint-size", title, _text(root), None)


def _upload_time(facts: JobFacts) -> dict[str, Any]:
    title = "Upload time"
    timed = [(i, p) for i, p in enumerate(facts.checkpoints, start=1) if p.upload_s is not None]
    if not timed:
        note = "No upload timed yet." if facts.checkpoints else "No checkpoint stored yet."
        return _entry("upload-time", title, None, note)
    chart = leather.Chart()  # the title is the figure's caption (and the SVG's <title>)
    chart.add_columns(
        [(str(i), p.upload_s) for i, p in timed], name="seconds", fill_color=_BAR_COLOR
    )
    chart.add_x_axis(name="checkpoint, oldest first")
    chart.add_y_axis(tick_formatter=_seconds, name="upload, seconds")
    desc = "; ".join(f"checkpoint {i} ({p.id}): {p.upload_s:.2f} s" for i, p in timed)
    root = _render(chart, "upload-time", title, desc)
    for rect, (_, point) in zip(_marks(root, "columns", "rect"), timed, strict=True):
        rect.set("data-checkpoint", point.id)
        rect.set("data-seconds", f"{point.upload_s:.3f}")
    return _entry("upload-time", title, _text(root), None)


def _attempts(facts: JobFacts) -> dict[str, Any]:
    """One row per machine; each attempt a thick stroke from its start to its end; each notice
    a red dot on the row of the machine it reached."""
    title = "Attempts per machine"
    if not facts.attempts:
        return _entry("attempts", title, None, "No attempt started yet.")
    rows = facts.machines
    chart = leather.Chart()  # the title is the figure's caption (and the SVG's <title>)
    chart.add_x_scale(0, max(1.0, _since(facts, facts.now)))
    chart.add_y_scale(-0.5, len(rows) - 0.5)
    for index, machine in enumerate(rows):
        data: list[tuple[float | None, float | None]] = []
        for span in facts.attempts:
            if span.machine == machine:
                data += [(_since(facts, span.start), index), (_since(facts, span.end), index)]
                data.append((None, None))  # each attempt its own stroke
        color = _ROW_COLORS[index % len(_ROW_COLORS)]
        chart.add_line(data, name=machine, stroke_color=color, width=12)
    if facts.notices:
        marks = [(_since(facts, n.at), rows.index(n.machine)) for n in facts.notices]
        chart.add_dots(marks, name="notice", fill_color=_NOTICE_COLOR, radius=6)
    chart.add_x_axis(tick_formatter=_seconds, name="time since submitted")
    chart.add_y_axis(
        ticks=list(range(len(rows))),
        tick_formatter=lambda value, *_: _short(rows[int(value)]),
        name="machine",
    )
    desc = (
        "; ".join(
            f"attempt {s.number} on {s.machine} ({s.state}), {_since(facts, s.start):.0f} s to "
            f"{_since(facts, s.end):.0f} s"
            for s in facts.attempts
        )
        + "; "
        + f"{len(facts.notices)} notice(s)"
    )
    root = _render(chart, "attempts", title, desc)
    series = [g for g in root.iter("g") if g.get("class") == "series lines"]
    for group, machine in zip(series, rows, strict=True):
        group.set("data-row", machine)
        spans = [s for s in facts.attempts if s.machine == machine]
        for path, span in zip(group.iter("path"), spans, strict=True):
            path.set("data-attempt", str(span.number))
            path.set("data-state", span.state)
            ET.SubElement(path, "title").text = f"attempt {span.number} on {machine}: {span.state}"
    for dot, notice in zip(_marks(root, "dots", "circle"), facts.notices, strict=True):
        dot.set("data-notice", units.clock(notice.at))
        dot.set("data-machine", notice.machine)
        ET.SubElement(dot, "title").text = f"notice at {units.clock(notice.at)}"
    return _entry("attempts", title, _text(root), None)


def _state_bound(facts: JobFacts) -> dict[str, Any]:
    """The state's size as each figure measured it, against the spot bound wherever a placement
    decision recorded one."""
    title = "State size and spot bound"
    if not facts.states:
        return _entry("state-bound", title, None, "No state size measured yet.")
    chart = leather.Chart()  # the title is the figure's caption (and the SVG's <title>)
    top = max([s.bytes for s in facts.states] + [b.bytes for b in facts.bounds])
    chart.add_x_scale(0, max(1.0, _since(facts, facts.now)))
    chart.add_y_scale(0, max(1, top) * 1.15)
    chart.add_dots(
        [(_since(facts, s.at), s.bytes) for s in facts.states],
        name="state size",
        fill_color=_STATE_COLOR,
        radius=4,
    )
    for bound in facts.bounds:
        end = _since(facts, facts.now)
        chart.add_line(
            [(_since(facts, bound.at), bound.bytes), (end, bound.bytes)],
            name="spot bound",
            stroke_color=_BOUND_COLOR,
            width=2,
            stroke_dasharray="6 4",
        )
    chart.add_x_axis(tick_formatter=_seconds, name="time since submitted")
    chart.add_y_axis(tick_formatter=_sizes, name="bytes")
    note = None
    if not facts.bounds:
        note = (
            "No spot bound in this job's events: a placement decision records one when it "
            "weighs the job's state against a spot machine's notice."
        )
    desc = "; ".join(f"{units.size(s.bytes)} ({s.figure})" for s in facts.states)
    desc += "; " + (
        "; ".join(f"spot bound {units.size(b.bytes)} ({b.kind})" for b in facts.bounds)
        if facts.bounds
        else "no spot bound recorded"
    )
    root = _render(chart, "state-bound", title, desc)
    for dot, sample in zip(_marks(root, "dots", "circle"), facts.states, strict=True):
        dot.set("data-state-bytes", str(sample.bytes))
        dot.set("data-figure", sample.figure)
    lines = [g for g in root.iter("g") if g.get("class") == "series lines"]
    for group, bound in zip(lines, facts.bounds, strict=True):
        group.set("data-bound", str(bound.bytes))
    return _entry("state-bound", title, _text(root), note)


# --- rendering ----------------------------------------------------------------------------------


def _render(chart: Any, chart_id: str, title: str, desc: str) -> ET.Element:
    """leather's drawing inside an ``<svg role="img">`` that names itself (title, desc)."""
    root = ET.Element(
        "svg",
        {
            "xmlns": _SVG,
            "viewBox": f"0 0 {_WIDTH} {_HEIGHT}",
            "width": str(_WIDTH),
            "height": str(_HEIGHT),
            "role": "img",
            "aria-labelledby": f"{chart_id}-title {chart_id}-desc",
            "data-chart": chart_id,
        },
    )
    ET.SubElement(root, "title", id=f"{chart_id}-title").text = title
    ET.SubElement(root, "desc", id=f"{chart_id}-desc").text = desc
    root.append(chart.to_svg_group(_WIDTH, _HEIGHT))
    return root


def _marks(root: ET.Element, shape: str, tag: str) -> Iterator[ET.Element]:
    """The marks (``rect``, ``circle``) of every ``series SHAPE`` group, in the data's order."""
    for group in root.iter("g"):
        if group.get("class") == f"series {shape}":
            yield from group.iter(tag)


def _text(root: ET.Element) -> str:
    return ET.tostring(root, encoding="unicode")


def _since(facts: JobFacts, at: float) -> float:
    return max(0.0, at - facts.origin)


def _sizes(value: float, *_: int) -> str:
    return units.size(value)


def _seconds(value: float, *_: int) -> str:
    return f"{value:g} s"


def _short(machine: str, limit: int = 22) -> str:
    """A row's label: the machine's name, cut to fit beside the chart (its title says it whole)."""
    return machine if len(machine) <= limit else machine[: limit - 1] + "…"
