"""Where compilation time goes: each stage of a compilation (JAX's lowering, normalising,
parsing, translating, the C++ build) is timed by ``stage`` and logged to the ``hlo2dace``
logger: at DEBUG when it begins, at INFO with its duration (wall and CPU seconds) when it
ends. ``hlo2dace.jit`` and the command line share it: ``$HLO2DACE_LOG=info`` prints the
records on stderr for a program that has not configured logging itself, and the command
line shows them on a terminal with ``TerminalDisplay``."""

from __future__ import annotations

import contextlib
import gc
import logging
import os
import resource
import threading
import time
import warnings
from typing import IO, Iterator

LOGGER = logging.getLogger("hlo2dace")

_environment_read = False


def configure_from_environment() -> None:
    """Apply ``$HLO2DACE_LOG`` (a level: debug, info, warning, ...) once, at the first
    stage, unless the program has configured the ``hlo2dace`` logger itself (a level or a
    handler): the logger takes that level, and a handler on stderr unless the root logger
    has one (``logging.basicConfig``), which then receives the records."""
    global _environment_read
    if _environment_read:
        return
    _environment_read = True
    value = os.environ.get("HLO2DACE_LOG", "").strip()
    if not value or LOGGER.level != logging.NOTSET or LOGGER.handlers:
        return
    level = logging.getLevelName(value.upper())
    if not isinstance(level, int):
        warnings.warn(f"hlo2dace: HLO2DACE_LOG={value!r} is not a logging level (debug, info, "
                      "warning, error); ignored", stacklevel=4)
        return
    LOGGER.setLevel(level)
    if not logging.getLogger().handlers:
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("%(name)s: %(message)s"))
        LOGGER.addHandler(handler)


def cpu_seconds() -> float:
    """CPU seconds of this process and of the child processes it waited for (the C++
    compiler): on a machine shared with other work they say what a stage cost, where its
    wall time says how long it waited too."""
    own, children = (resource.getrusage(who) for who in (resource.RUSAGE_SELF,
                                                          resource.RUSAGE_CHILDREN))
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


class Stage:
    """The stage being timed; ``note`` (e.g. "found") is added to the message that ends it."""

    def __init__(self, name: str):
        self.name, self.note = name, ""


@contextlib.contextmanager
def stage(name: str) -> Iterator[Stage]:
    """Time the block as the stage ``name``: records with ``stage`` (the name), ``seconds``
    (None when it begins) and, at its end, ``cpu_seconds`` (``cpu_seconds``) attributes. A
    stage ended by an exception is logged at DEBUG only: the exception says what
    happened."""
    configure_from_environment()
    current = Stage(name)
    LOGGER.debug("%s ...", name, extra={"stage": name, "seconds": None})
    start, cpu = time.perf_counter(), cpu_seconds()
    try:
        yield current
    except BaseException as exc:
        seconds = time.perf_counter() - start
        LOGGER.debug("%s: stopped after %.2f s (%s)", name, seconds, type(exc).__name__,
                     extra={"stage": name, "seconds": seconds})
        raise
    seconds = time.perf_counter() - start
    LOGGER.info("%s: %.2f s%s", name, seconds, f" ({current.note})" if current.note else "",
                extra={"stage": name, "seconds": seconds, "cpu_seconds": cpu_seconds() - cpu})


_collector_lock = threading.Lock()
#: how many compilations have paused the cyclic collector, and whether it ran before
_collector_pauses = [0, False]


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """Python's cyclic garbage collector held off within the ``with`` block (a compilation):
    translation and DaCe's code generation build graphs of hundreds of thousands of
    objects, which each collection walks again while they grow (half the time of
    outlining a 12-layer transformer's repeated maps). Nested and concurrent compilations
    share one pause; the collector runs again when the last one ends."""
    with _collector_lock:
        if _collector_pauses[0] == 0:
            _collector_pauses[1] = gc.isenabled()
            gc.disable()
        _collector_pauses[0] += 1
    try:
        yield
    finally:
        with _collector_lock:
            _collector_pauses[0] -= 1
            if _collector_pauses[0] == 0 and _collector_pauses[1]:
                gc.enable()


class TerminalDisplay(logging.Handler):
    """The ``hlo2dace`` logger's records on a stream. On a terminal a stage's line appears
    when it begins ("hlo2dace: translate ...") and is completed in place by its duration;
    elsewhere only the lines of stages that ended are written."""

    def __init__(self, stream: IO[str]):
        self.live = stream.isatty()
        super().__init__(logging.DEBUG if self.live else logging.INFO)
        self.stream = stream
        #: the begun stage whose line waits for its end, and that line's length
        self.open: tuple[str, int] | None = None

    def emit(self, record: logging.LogRecord) -> None:
        try:
            text = f"{record.name}: {record.getMessage()}"
            name = getattr(record, "stage", None)
            begins = name is not None and getattr(record, "seconds", 0) is None
            if self.open is not None:
                if name == self.open[0] and not begins:
                    self.stream.write("\r" + text.ljust(self.open[1]) + "\n")
                    self.stream.flush()
                    self.open = None
                    return
                self.stream.write("\n")  # something else ends the open line
                self.open = None
            if begins:
                if self.live:
                    self.stream.write(text)
                    self.open = (name, len(text))
            else:
                self.stream.write(text + "\n")
            self.stream.flush()
        except Exception:
            self.handleError(record)
