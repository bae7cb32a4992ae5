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

DaCe's timers read the clock in whole microseconds, so an element that runs for less
than a few microseconds per execution (a small map in a loop body) is rounded down on
every execution; the table says how often each ran. Each timed execution also costs
about 0.1-0.2 us of the timer's own bookkeeping, counted in the state around it: in a
loop of thousands of short iterations the states' sum exceeds the program's own time by
that much, and the excess shows as time between maps. Times per call are medians over
the profiled calls, element by element."""

from __future__ import annotations

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
        (an even share each), largest first; states' time outside their maps and calls
        goes to "(between maps: copies, loop control, timers)"."""
        totals: dict[str, float] = defaultdict(float)
        for item in self.items:
            if item.kind == "state":
                continue
            pairs = list(zip(_expand(item.ops), item.lines)) or [("?", "?")]
            for op, line in pairs:
                totals[key(item, op, line)] += item.seconds / len(pairs)
        outside = self.measured_seconds - sum(i.seconds for i in self.items
                                              if i.kind != "state")
        if outside > 0:
            totals["(between maps: copies, loop control, timers)"] += outside
        return sorted(totals.items(), key=lambda kv: -kv[1])

    def table(self, top: int = 25) -> str:
        """The text report: totals, the slowest maps and calls, and time by op and by
        source line."""
        total = self.measured_seconds or math.nan
        lines = [f"profile of {self.name}: {self.runs} calls",
                 f"hlo2dace {_time(self.seconds)} per call"
                 + (f", XLA {_time(self.xla_seconds)} (hlo2dace/XLA "
                    f"{self.seconds / self.xla_seconds:.2f})" if self.xla_seconds else "")
                 + f"; with timers, its states {_time(self.measured_seconds)}", ""]
        work = sorted((i for i in self.items if i.kind != "state"), key=lambda i: -i.seconds)
        rows = [("time/call", "%", "runs/call", "kind", "name", "ops", "source")]
        for item in work[:top]:
            rows.append((_time(item.seconds), f"{100 * item.seconds / total:.1f}",
                         _count(item.count), f"{item.kind} {item.schedule}".strip(),
                         item.name + (f" (in {' > '.join(item.loops)})" if item.loops else ""),
                         _ops(item.ops), _lines(item.lines)))
        lines += _columns(rows)
        if len(work) > top:
            lines.append(f"... {len(work) - top} more, {_time(sum(i.seconds for i in work[top:]))}")
        for title, key in (("by StableHLO op", lambda item, op, line: op),
                           ("by source line", lambda item, op, line: _source(line))):
            lines += ["", title]
            lines += _columns([("time/call", "%", title.split()[-1])] + [
                (_time(s), f"{100 * s / total:.1f}", k) for k, s in self.by(key)[:top]])
        return "\n".join(lines)

    __str__ = table

    def write_html(self, path: str | Path) -> Path:
        """The report as HTML at ``path``, with the SDFG (its labels carrying their
        times) in DaCe's viewer beside it (``<path stem>.sdfg.html``) where DaCe ships the
        viewer, and the SDFG as ``<path stem>.sdfgz`` for DaCe's other tools."""
        path = Path(path)
        stem = path.with_suffix("")
        graph = None
        if self.sdfg is not None:
            self.sdfg.save(str(stem) + ".sdfgz", compress=True)
            graph = _write_viewer(self.sdfg, Path(str(stem) + ".sdfg.html"))
        body = [f"<h1>Profile of {html.escape(self.name)}</h1>",
                f"<pre>{html.escape(self.table(top=200))}</pre>"]
        if graph is not None:
            body.append(f'<p>The SDFG, states and maps labelled with their time per call '
                        f'(<a href="{graph.name}">open alone</a>):</p>'
                        f'<iframe src="{graph.name}" style="width:100%;height:85vh;'
                        f'border:1px solid #ccc"></iframe>')
        else:
            body.append(f"<p>The SDFG: {html.escape(stem.name)}.sdfgz (DaCe's viewer was "
                        f"not found beside DaCe).</p>")
        path.write_text("<!DOCTYPE html>\n<html><head><meta charset='utf-8'><title>"
                        f"hlo2dace profile: {html.escape(self.name)}</title></head><body>"
                        + "\n".join(body) + "</body></html>\n")
        return path


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
    names = [f"{op.split('.', 1)[-1]}" + (f" x{n}" if n > 1 else "") for op, n in
             sorted(ops.items(), key=lambda kv: -kv[1])]
    text = ", ".join(names[:4])
    return text + (f", +{len(names) - 4}" if len(names) > 4 else "")


def _lines(lines: Sequence[str]) -> str:
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
    """Put DaCe's timer on every state, map and library call (a tasklet outside a map)
    of ``sdfg``, its report written at every call."""
    import dace

    timer = dace.InstrumentationType.Timer
    dace.Config.set("instrumentation", "report_each_invocation", value=True)
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
    unknown)."""
    found = [(m.group(1), m.group(2) or "?") for m in _ORIGIN.finditer(tasklet.code.as_string)]
    return found or [("?", "?")]


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


def _read_reports(folder: Path) -> tuple[dict, dict, int]:
    """The reports of DaCe's timers in ``folder``, one per call: per element, the median
    over the calls of its seconds in a call (robust to bursts of load from other
    processes, as the program's own median time is) and its total executions; and the
    number of calls."""
    per_call: list[dict] = []
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
        per_call.append(seconds)
    runs = len(per_call)
    medians = {key: statistics.median(call.get(key, 0.0) for call in per_call)
               for key in counts}
    return medians, counts, runs


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

    from .api import jit
    from .arguments import as_array

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


def _write_viewer(sdfg, path: Path) -> Path | None:
    """DaCe's SDFG viewer page for ``sdfg`` at ``path``, reading the viewer's scripts from
    DaCe's installation; None where DaCe does not ship them."""
    import dace

    viewer = Path(dace.__file__).resolve().parent / "viewer"
    template = viewer / "templates" / "sdfv_base.html"
    if not (template.is_file() and (viewer / "webclient" / "dist" / "sdfv.js").is_file()):
        return None
    page = template.read_text()
    # DaCe renders the page with Jinja; its tags here are plain blocks and one variable
    page = re.sub(r"{%[^%]*%}", "", page).replace("{{dir|safe}}", viewer.as_uri() + "/")
    graph = json.dumps(dace.serialize.dumps(sdfg.to_json())).replace("</", "<\\/")
    script = ("<script>\nvar sdfg_string = " + graph + ";\n"
              "document.addEventListener('DOMContentLoaded', function () {\n"
              "  const sdfv = WebSDFV.getInstance();\n"
              "  const show = () => sdfv.setSDFG(checkCompatLoad(parse_sdfg(sdfg_string)),"
              " null, false);\n"
              "  if (sdfv.initialized) show(); else sdfv.on('initialized', show);\n"
              "});\n</script>\n")
    path.write_text(page.replace("</body>", script + "</body>"))
    return path
