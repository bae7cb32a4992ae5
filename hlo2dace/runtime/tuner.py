"""How many OpenMP threads a program's calls run with (``ThreadTuner``), and OpenMP's own
settings: its workers sleep rather than spin between parallel regions."""

from __future__ import annotations

import ctypes
import functools
import os
import threading
from typing import Any

# OpenMP workers that spin while waiting for the next parallel region take the cores from
# everything else on a busy machine: a 100-step stencil took 8 s instead of 50 ms next to
# two other processes. Sleeping workers cost microseconds per region on an idle machine.
# Read by libgomp when the first compiled library loads; the user's setting wins.
os.environ.setdefault("OMP_WAIT_POLICY", "passive")


class ThreadTuner:
    """How many OpenMP threads a program's calls run with: one or all, whichever its own
    calls measure faster. A parallel region costs a wake-up of every worker, which on a
    machine with other work on its cores can take longer than the region's work, so a
    loop of small maps runs slower on all threads than on one; a large map runs faster.
    Which one wins depends on the program and on the load, so it is measured: the first
    calls alternate, each setting keeps the times of its last ``KEPT`` calls, and every
    ``PROBE_EVERY``-th call later runs with the setting not chosen, so that a change of
    load changes the choice. Results do not depend on the choice: every map's partition
    of the work is fixed when it is compiled."""

    KEPT = 5
    PROBE_EVERY = 32

    def __init__(self, most: int):
        self.settings = (1, most)
        #: per setting, the seconds of its last calls
        self.times: dict[int, list[float]] = {n: [] for n in self.settings}
        self._chosen = most
        self._calls = 0

    def next(self) -> int:
        """The thread count for the next call."""
        self._calls += 1
        one, most = (self.times[n] for n in self.settings)
        if len(one) < 3 or len(most) < 3:  # learning: alternate
            return self.settings[self._calls % 2]
        if self._calls % self.PROBE_EVERY == 0:
            return self.settings[self._chosen == 1]
        return self._chosen

    def record(self, threads: int, seconds: float) -> None:
        times = self.times[threads]
        times.append(seconds)
        if len(times) > self.KEPT:
            del times[0]
        (one, most), (one_times, most_times) = self.settings, self.times.values()
        if len(one_times) >= 3 and len(most_times) >= 3:  # the faster median; one on a tie
            self._chosen = one if _median(one_times) <= _median(most_times) else most


def _median(values: list[float]) -> float:
    """``statistics.median`` of a few values, without its checks and conversions: it runs
    after every call of a program with parallel regions."""
    ordered = sorted(values)
    half = len(ordered) // 2
    return ordered[half] if len(ordered) % 2 else (ordered[half - 1] + ordered[half]) / 2


@functools.lru_cache(maxsize=1)
def _openmp() -> tuple[Any, int]:
    """libgomp (the compiled programs' OpenMP runtime), or None, and the most threads a
    parallel region may have (``OMP_NUM_THREADS``, else the cores), read before any
    program set its own."""
    try:
        library = ctypes.CDLL("libgomp.so.1")
    except OSError:
        return None, 1
    library.omp_set_num_threads.argtypes = [ctypes.c_int]
    return library, library.omp_get_max_threads()


#: the thread count last set in each Python thread (OpenMP's is per calling thread)
_team = threading.local()


def set_threads(threads: int) -> None:
    if getattr(_team, "size", None) != threads:
        _openmp()[0].omp_set_num_threads(threads)
        _team.size = threads


def thread_tuner(parallel: bool) -> ThreadTuner | None:
    """A tuner for a program with parallel regions, where OpenMP can be told the thread count
    and more than one thread is allowed (``OMP_NUM_THREADS``); else None."""
    library, most = _openmp()
    return ThreadTuner(most) if parallel and library is not None and most > 1 else None
