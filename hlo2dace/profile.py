"""Where the time of a compiled program goes: ``hlo2dace.profile(f, *args)`` and
``hlo2dace profile``.

The module's SDFG is built once more, outside the cache, with DaCe's timers on every
state, every map and every library call outside a map (``InstrumentationType.Timer``), and
run until a time budget is spent; DaCe writes one report per call, which is read and
summed. Each map's time is attributed to the StableHLO ops its tasklets compute and
recompute inline, and to the user's source lines they came from (comments in the
tasklets' code name them, ``emitter.OP_COMMENT``), split evenly between those ops.
Beside them: the program's own time without timers and XLA's for the same module, both
medians.

DaCe's timers read the clock in whole microseconds: an execution of less than one reads
as 0 or 1, as often as its length says. Times per call are medians over the profiled calls,
element by element, except where the median is under 10 us: there the median of the means
of five groups of calls, which estimates a fraction of a microsecond without bias and stays
robust to a burst of load (``per_call``); the table says how often each element ran. Each
timed execution also costs about 0.1-0.2 us of the timer's own bookkeeping, counted in the
state around it: in a loop of thousands of short iterations the states' sum exceeds the
program's own time by that much, and the excess shows as time between maps.

``Profile.write_html`` writes one self-contained page: bars (SVG) of the time per op and
per source line, the SDFG in DaCe's viewer with every script inlined, and the tables."""


from __future__ import annotations

import base64
import html
import json
import linecache
import math
import re
import shutil
import statistics
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from . import folders
from .compare import checked_placement, median_pair, median_seconds, place
from .translate import library
from .translate.emitter import OP_COMMENT


@dataclass
class Item:
    """One timed element of the SDFG: a state, a map or a library call."""

    kind: str
    name: str
    #: the loops around it, outermost first
    loops: tuple[str, ...]
    #: executions per program call
    count: float
    #: seconds per program call (the median over the profiled calls)
    seconds: float
    #: StableHLO op -> how many of the element's tasklets compute it
    ops: dict[str, int] = field(default_factory=dict)
    #: source locations ``file:line`` of its tasklets, in order
    lines: tuple[str, ...] = ()
    #: for a map: "parallel" (OpenMP) or "sequential"
    schedule: str = ""


@dataclass
class Profile:
    """A profile of one program at one set of arguments."""

    name: str
    #: the program's median call time without timers, and XLA's (None: not measured)
    seconds: float
    xla_seconds: float | None
    #: program calls whose reports were summed
    runs: int
    items: list[Item]
    #: the instrumented SDFG, its states' and maps' labels given their times
    sdfg: Any = None

    @property
    def measured_seconds(self) -> float:
        """The time of all states per call (timers included): states never overlap."""
        return sum(i.seconds for i in self.items if i.kind == "state")

    def by(self, key: Callable[[Item, str, str], str]) -> list[tuple[str, float]]:
        """Map and call time summed by ``key(item, op, line)`` of each of their tasklets
        (an even share each; a call that computes no op, such as hlo2dace's switch of the
        floating-point mode, counts as ``OWN_CODE``), largest first, none that took no
        measurable time; states' time outside their maps and calls goes to
        ``BETWEEN_MAPS``."""
        totals: dict[str, float] = defaultdict(float)
        for item in self.items:
            if item.kind == "state":
                continue
            pairs = list(zip(_expand(item.ops), item.lines)) or [(OWN_CODE, OWN_CODE)]
            for op, line in pairs:
                totals[key(item, op, line)] += item.seconds / len(pairs)
        outside = self.measured_seconds - sum(i.seconds for i in self.items
                                              if i.kind != "state")
        if outside > 0:
            totals[BETWEEN_MAPS] += outside
        return sorted(((k, v) for k, v in totals.items() if v > 0), key=lambda kv: -kv[1])

    def by_op(self) -> list[tuple[str, float]]:
        return self.by(lambda item, op, line: op)

    def by_line(self) -> list[tuple[str, float]]:
        return self.by(lambda item, op, line: line if line == OWN_CODE else _source(line))

    def table(self, top: int = 25) -> str:
        """The text report: totals, the slowest maps and calls, and time by op and by
        source line. Elements that took no measurable time are left out (and counted)."""
        total = self.measured_seconds

        def share(seconds: float) -> str:
            return f"{100 * seconds / total:.1f}" if total > 0 else "-"

        lines = [f"profile of {self.name}: {self.runs} calls",
                 f"hlo2dace {_time(self.seconds)} per call"
                 + (f", XLA {_time(self.xla_seconds)} (hlo2dace/XLA "
                    f"{self.seconds / self.xla_seconds:.2f})" if self.xla_seconds else "")
                 + f"; with timers, its states {_time(total)}", ""]
        elements = [i for i in self.items if i.kind != "state"]
        work = sorted((i for i in elements if i.seconds > 0), key=lambda i: -i.seconds)
        rows = [("time/call", "%", "runs/call", "kind", "name", "ops", "source")]
        for item in work[:top]:
            rows.append((_time(item.seconds), share(item.seconds),
                         _count(item.count), f"{item.kind} {item.schedule}".strip(),
                         item.name + (f" (in {' > '.join(item.loops)})" if item.loops else ""),
                         _ops(item.ops), _lines(item.lines)))
        lines += _columns(rows)
        if len(work) > top:
            lines.append(f"... {len(work) - top} more, {_time(sum(i.seconds for i in work[top:]))}")
        unmeasured = len(elements) - len(work)
        if unmeasured:
            lines.append(f"({unmeasured} more took no measurable time: under the timers' "
                         "microsecond in every call)")
        if any(not item.ops for item in work):
            lines.append(f"ops and source -: {OWN_CODE}, no StableHLO op (fp_mode switches "
                         "the CPU to the floating-point mode XLA computes in, and back)")
        for title, entries in (("by StableHLO op", self.by_op()),
                               ("by source line", self.by_line())):
            lines += ["", title]
            lines += _columns([("time/call", "%", title.split()[-1])] + [
                (_time(seconds), share(seconds), k) for k, seconds in entries[:top]])
        return "\n".join(lines)

    __str__ = table

    def write_html(self, path: str | Path) -> Path:
        """The report as one self-contained HTML file at ``path``: bars of the time per op
        and per source line, the SDFG in DaCe's viewer (its scripts inlined; states and
        maps labelled with their times) where DaCe ships the viewer, and the tables."""
        path = Path(path)
        total = self.measured_seconds
        body = [f"<h1>Profile of {html.escape(self.name)}</h1>",
                "<p>" + html.escape(self.table().splitlines()[1]) + "</p>",
                "<h2>Where the time goes</h2>",
                _bars("Time per StableHLO op", self.by_op(), total),
                _bars("Time per source line", self.by_line(), total)]
        page = _viewer_page(self.sdfg) if self.sdfg is not None else None
        if page is not None:
            body += ["<h2>The SDFG</h2>",
                     '<p id="sdfg-status" data-state="loading">The SDFG, states and maps '
                     "labelled with their time per call, is loading in DaCe's viewer "
                     "(drag to move, scroll to zoom)...</p>",
                     f'<iframe id="sdfg" title="The SDFG" srcdoc="{html.escape(page)}" '
                     'style="width:100%;height:85vh;border:1px solid #ccc"></iframe>']
        else:
            body.append("<p>DaCe's viewer was not found beside DaCe: the SDFG is not shown."
                        "</p>")
        body += ["<h2>Tables</h2>", f"<pre>{html.escape(self.table(top=200))}</pre>"]
        path.write_text("<!DOCTYPE html>\n<html><head><meta charset='utf-8'><title>"
                        f"hlo2dace profile: {html.escape(self.name)}</title><style>"
                        "body{font-family:sans-serif;margin:1em 2em}pre{font-size:12px}"
                        "</style></head><body>" + "\n".join(body) + "</body></html>\n")
        return path


#: the attribution of calls that compute no StableHLO op
OWN_CODE = "(hlo2dace's own code)"
#: a state's time outside its maps and calls
BETWEEN_MAPS = "(between maps: copies, loop control, timers)"


def _bars(title: str, entries: list[tuple[str, float]], total: float, top: int = 15) -> str:
    """An SVG picture of ``entries`` (label, seconds) as horizontal bars, the largest
    ``top``, each labelled with its time and share of ``total``."""
    shown = entries[:top]
    if not shown:
        return f"<h3>{html.escape(title)}</h3><p>No element took measurable time.</p>"
    label_width, bar_width, row, largest = 430, 380, 22, shown[0][1]
    height, width = row * len(shown) + 8, label_width + bar_width + 140
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" class="bars" width="{width}" '
             f'height="{height}" font-family="sans-serif" font-size="12">']
    for k, (label, seconds) in enumerate(shown):
        y = 4 + k * row
        width = max(1.0, bar_width * seconds / largest)
        text = label if len(label) <= 62 else label[:60] + "..."
        share = f" ({100 * seconds / total:.1f}%)" if total > 0 else ""
        parts.append(f"<g><title>{html.escape(label)}: {_time(seconds)} per call{share}"
                     f'</title><text x="{label_width - 6}" y="{y + 14}" text-anchor="end">'
                     f'{html.escape(text)}</text><rect x="{label_width}" y="{y + 2}" '
                     f'width="{width:.1f}" height="{row - 6}" fill="#4a7fb5"></rect>'
                     f'<text x="{label_width + width + 6:.1f}" y="{y + 14}">'
                     f"{_time(seconds)}{share}</text></g>")
    parts.append("</svg>")
    more = len(entries) - len(shown)
    tail = f"<p>... {more} more, {_time(sum(s for _, s in entries[top:]))}</p>" if more else ""
    return f"<h3>{html.escape(title)}</h3>" + "".join(parts) + tail


def _expand(ops: dict[str, int]) -> list[str]:
    return [op for op, n in ops.items() for _ in range(n)]


def _time(seconds: float | None) -> str:
    if seconds is None or not math.isfinite(seconds):
        return "-"
    for unit, scale in (("s", 1), ("ms", 1e-3), ("us", 1e-6)):
        if seconds >= scale:
            return f"{seconds / scale:.3g} {unit}"
    return f"{seconds * 1e9:.3g} ns"


def _count(count: float) -> str:
    return f"{count:.0f}" if count >= 10 or count == int(count) else f"{count:.2g}"


def _ops(ops: dict[str, int]) -> str:
    if not ops:
        return "-"
    names = [f"{op.split('.', 1)[-1]}" + (f" x{n}" if n > 1 else "") for op, n in
             sorted(ops.items(), key=lambda kv: -kv[1])]
    text = ", ".join(names[:4])
    return text + (f", +{len(names) - 4}" if len(names) > 4 else "")


def _lines(lines: Sequence[str]) -> str:
    if not lines:
        return "-"
    unique = list(dict.fromkeys(line for line in lines if line != "?"))
    if not unique:
        return "?"
    file = unique[0].rsplit(":", 1)[0]
    numbers = [u.rsplit(":", 1)[1] for u in unique if u.rsplit(":", 1)[0] == file]
    text = f"{Path(file).name}:{','.join(numbers[:6])}" + ("..." if len(numbers) > 6 else "")
    return text + (" +others" if len(numbers) < len(unique) else "")


def _source(line: str) -> str:
    """``file:line`` and the line's text, where the file can be read."""
    file, _, number = line.rpartition(":")
    if not number.isdigit():
        return line
    text = linecache.getline(file, int(number)).strip()
    return f"{Path(file).name}:{number}  {text[:70]}" if text else f"{Path(file).name}:{number}"


def _columns(rows: list[tuple[str, ...]]) -> list[str]:
    widths = [max(len(r[c]) for r in rows) for c in range(len(rows[0]))]
    out = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows]
    out.insert(1, "  ".join("-" * w for w in widths))
    return out


# --------------------------------------------------------------------------- measuring


def instrument(sdfg) -> None:
    """Put DaCe's timer on every state, map and library call (a tasklet outside a map,
    library nodes expanded first) of ``sdfg``, its report written at every call."""
    import dace

    timer = dace.InstrumentationType.Timer
    dace.Config.set("instrumentation", "report_each_invocation", value=True)
    library.expand(sdfg)  # a product's BLAS call is timed as the op it computes
    for node, parent in sdfg.all_nodes_recursive():
        if isinstance(node, dace.SDFGState):
            node.instrument = timer
        elif isinstance(node, dace.nodes.MapEntry) and parent.entry_node(node) is None:
            node.map.instrument = timer
        elif isinstance(node, dace.nodes.Tasklet) and parent.entry_node(node) is None:
            node.instrument = timer


#: what ``Emitter.origin`` writes: the op and, where known, its ``file:line``
_ORIGIN = re.compile(re.escape(OP_COMMENT) + r"(\S+)(?: @ (.+?:\d+))?$", re.M)


def _origins(tasklet) -> list[tuple[str, str]]:
    """The ops a tasklet computes, its own first, and their ``file:line`` ("?" where
    unknown); none for hlo2dace's own code (the floating-point mode switch)."""
    return [(m.group(1), m.group(2) or "?") for m in _ORIGIN.finditer(tasklet.code.as_string)]


def _describe(sdfg, totals: dict, counts: dict, runs: int) -> list[Item]:
    """The timed elements, with their ops, lines, loops, executions and seconds per call
    (``totals``: per call already)."""
    import dace

    items = []
    for (cfg_id, state_id, node_id), seconds in totals.items():
        region = sdfg.cfg_list[cfg_id]
        state = region.node(state_id)
        loops, parent = [], state.parent_graph
        while parent is not None and not isinstance(parent, dace.SDFG):
            loops.append(parent.label)
            parent = parent.parent_graph
        loops = tuple(reversed(loops))
        count, per_call = counts[(cfg_id, state_id, node_id)] / runs, seconds
        if node_id < 0:
            items.append(Item("state", state.label, loops, count, per_call))
            continue
        node = state.node(node_id)
        if isinstance(node, dace.nodes.MapEntry):
            tasklets = [n for n in state.scope_subgraph(node).nodes()
                        if isinstance(n, dace.nodes.Tasklet)]
            kind, name = "map", node.map.label
            schedule = "sequential" if node.map.schedule == dace.ScheduleType.Sequential \
                else "parallel"
        else:
            tasklets, kind, name, schedule = [node], "call", node.label, ""
        origins = [origin for t in tasklets for origin in _origins(t)]
        ops: dict[str, int] = defaultdict(int)
        for op, _ in origins:
            ops[op] += 1
        items.append(Item(kind, name, loops, count, per_call, dict(ops),
                          tuple(line for _, line in origins), schedule))
    return items


#: below this median an element's time is estimated from means (``per_call``)
FINE_SECONDS = 10e-6


def per_call(samples: Sequence[float]) -> float:
    """An element's seconds per call from its ``samples`` (one per profiled call): the
    median (robust to bursts of load from other processes, as the program's own median
    time is), except where that is under ``FINE_SECONDS``: DaCe's timers read whole
    microseconds, so such a median is a coarse count of them (0 for an element of 0.4 us),
    while their mean estimates the time without bias; the median of the means of five
    groups of calls keeps that and stays robust to a burst."""
    median = statistics.median(samples)
    if median >= FINE_SECONDS or len(samples) < 5:
        return median
    groups = [samples[k::5] for k in range(5)]
    return statistics.median(statistics.fmean(group) for group in groups)


def _read_reports(folder: Path) -> tuple[dict, dict, int]:
    """The reports of DaCe's timers in ``folder``, one per call: per element, its seconds
    per call (``per_call``) and its total executions; and the number of calls."""
    calls: list[dict] = []
    counts: dict = defaultdict(int)
    for report in sorted(folder.glob("report-*.json")):
        seconds: dict = defaultdict(float)
        for event in json.loads(report.read_text())["traceEvents"]:
            if event.get("ph") != "X":
                continue
            args = event["args"]
            key = (args["cfg_id"], args.get("state_id", -1), args.get("id", -1))
            if key[1] < 0:
                continue  # the whole SDFG
            seconds[key] += event["dur"] * 1e-6
            counts[key] += 1
        calls.append(seconds)
    runs = len(calls)
    times = {key: per_call([call.get(key, 0.0) for call in calls]) for key in counts}
    return times, counts, runs


def profile_lowered(lowered, arrays: Sequence[np.ndarray], name: str = "program",
                    budget: float = 1.0, xla: Callable[[], Any] | None = None) -> Profile:
    """Profile the module of ``lowered`` (an ``api.Lowered`` whose sizes are known) on
    ``arrays``, its arguments in order; ``xla``: a call of XLA's program on arguments
    already on its device, timed in turn with the program's own calls (``median_pair``)."""
    program = lowered.compile()
    if xla is not None:
        seconds, xla_seconds = median_pair(lambda: program.call_flat(arrays),
                                           checked_placement(xla), budget / 2)
    else:
        seconds, xla_seconds = median_seconds(lambda: program.call_flat(arrays),
                                              budget / 2), None
    folder = folders.fresh_private_folder("hlo2dace-profile-")
    try:
        instrumented = []

        def adjust(sdfg) -> None:
            instrument(sdfg)
            instrumented.append(sdfg)

        timed = lowered.compile_uncached(folder, adjust)
        perf = folder / "build" / "perf"
        timed.call_flat(arrays)  # the first call allocates and initialises
        for report in perf.glob("report-*.json"):
            report.unlink()
        # calls back to back, as the program's own time is measured; a report is named
        # by the millisecond it was written in, so calls shorter than that leave one
        # report per millisecond: a sample of whole calls, each report one call's events
        calls, deadline = 0, time.perf_counter() + budget
        while calls < 3 or time.perf_counter() < deadline and calls < 1000:
            timed.call_flat(arrays)
            calls += 1
        totals, counts, runs = _read_reports(perf)
        sdfg = instrumented[0]
        items = _describe(sdfg, totals, counts, runs)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    _label_with_times(sdfg, totals)
    return Profile(name, seconds, xla_seconds, runs, items, sdfg)


def _label_with_times(sdfg, totals: dict) -> None:
    """Append each timed state's and map's time per call to its label (the SDFG is the
    instrumented copy, shown in the viewer; it is not compiled again)."""
    import dace

    for (cfg_id, state_id, node_id), seconds in totals.items():
        state = sdfg.cfg_list[cfg_id].node(state_id)
        note = f" [{_time(seconds)}]"
        if node_id < 0:
            state.label += note
        else:
            node = state.node(node_id)
            if isinstance(node, dace.nodes.MapEntry):
                node.map.label += note
            else:
                node.label += note


def profile(fun: Callable, *args: Any, budget: float = 1.0, static_argnums=(),
            static_argnames=(), optimize: str | None = None, **kwargs: Any) -> Profile:
    """Profile ``hlo2dace.jit(fun)`` on ``args`` (as ``jax.jit`` would take them), beside
    ``jax.jit(fun)``. ``print(hlo2dace.profile(f, x))`` shows where the time goes;
    ``.write_html("profile.html")`` writes a report with the SDFG to open in a browser."""
    import jax

    from .api import jit, unwrap_jit
    from .arguments import as_array

    fun, static_argnums, static_argnames, optimize = unwrap_jit(
        fun, static_argnums, static_argnames, optimize)
    ours = jit(fun, static_argnums=static_argnums, static_argnames=static_argnames,
               optimize=optimize)
    reference = jax.jit(fun, static_argnums=static_argnums, static_argnames=static_argnames)
    lowered = ours.lower(*args, **kwargs)
    dynamic_args, dynamic_kwargs, _ = ours.split_static(args, kwargs)
    leaves = jax.tree_util.tree_leaves((dynamic_args, dynamic_kwargs))
    program = lowered.compile().program
    arrays = [as_array(leaf, spec) for leaf, spec in zip(leaves, program.arguments)]
    placed_args, placed_kwargs = place(args, kwargs, ours.static_argnums, ours.static_argnames)
    return profile_lowered(lowered, arrays, getattr(fun, "__name__", "program"), budget,
                           lambda: jax.block_until_ready(reference(*placed_args,
                                                                   **placed_kwargs)))


# --------------------------------------------------------------------------- the viewer


def _viewer_page(sdfg) -> str | None:
    """DaCe's SDFG viewer page showing ``sdfg``, with every script it runs inlined (the
    viewer's code, its lazily loaded chunks, the graph), so that the page needs nothing
    beside it; None where DaCe does not ship the viewer. The main script is a ``data:``
    URL: webpack finds its chunks relative to its script's address, which an inline
    script lacks. When the graph is drawn, the page that holds it in an iframe learns it
    (``#sdfg-status``)."""
    import dace

    viewer = Path(dace.__file__).resolve().parent / "viewer"
    template = viewer / "templates" / "sdfv_base.html"
    dist = viewer / "webclient" / "dist"
    if not (template.is_file() and (dist / "sdfv.js").is_file()):
        return None
    page = template.read_text()
    # DaCe renders the page with Jinja; its tags here are plain blocks, and the scripts
    # it names (the viewer, and the libraries of its PDF export) are inlined or left out
    page = re.sub(r"{%[^%]*%}", "", page)
    page = re.sub(r"\s*<script[^>]*src=\"[^\"]*\"></script>", "", page)
    chunks = "".join(f"<script>{_inline(chunk.read_text())}</script>\n"
                     for chunk in sorted(dist.glob("[0-9]*.js")))
    main = base64.b64encode((dist / "sdfv.js").read_bytes()).decode()
    graph = json.dumps(dace.serialize.dumps(sdfg.to_json())).replace("</", "<\\/")
    script = (chunks + f'<script defer src="data:text/javascript;base64,{main}"></script>\n'
              "<script>\nvar sdfg_string = " + graph + ";\n"
              "document.addEventListener('DOMContentLoaded', function () {\n"
              "  const sdfv = WebSDFV.getInstance();\n"
              "  const show = () => {\n"
              "    sdfv.setSDFG(checkCompatLoad(parse_sdfg(sdfg_string)), null, false);\n"
              "    const drawn = document.querySelector('#contents canvas') !== null;\n"
              "    const status = window.parent.document.getElementById('sdfg-status');\n"
              "    // drawn at the iframe's size once it has one: a resize redraws\n"
              "    window.addEventListener('load',\n"
              "                            () => window.dispatchEvent(new Event('resize')));\n"
              "    if (status) {\n"
              "      status.dataset.state = drawn ? 'shown' : 'failed';\n"
              "      status.textContent = drawn ? 'The SDFG, states and maps labelled with '\n"
              "        + 'their time per call (drag to move, scroll to zoom):'\n"
              "        : 'DaCe\\'s viewer could not draw the SDFG in this browser.';\n"
              "    }\n"
              "  };\n"
              "  if (sdfv.initialized) show(); else sdfv.on('initialized', show);\n"
              "});\n</script>\n")
    return page.replace("</body>", script + "</body>")


def _inline(code: str) -> str:
    """JavaScript made safe inside a ``<script>`` element (where ``</script`` ends it)."""
    return code.replace("</script", "<\\/script")
