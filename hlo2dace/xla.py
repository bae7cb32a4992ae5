"""Runs a StableHLO module with XLA (jaxlib's CPU client): the reference that
``hlo2dace compare`` and the tests measure hlo2dace against."""

from __future__ import annotations

from typing import Sequence

import numpy as np


class XlaModule:
    """A module compiled by XLA, callable with NumPy arrays."""

    def __init__(self, text: str):
        import jax
        from jax._src.lib import xla_client
        from jax.extend import backend

        self._backend = backend.get_backend("cpu")
        devices = xla_client.DeviceList(tuple(self._backend.devices()[:1]))
        self._executable = self._backend.compile_and_load(text.encode(), devices,
                                                          xla_client.CompileOptions())
        self._jax = jax

    def __call__(self, *arrays: np.ndarray) -> list[np.ndarray]:
        buffers = [self._jax.device_put(np.asarray(a)) for a in arrays]
        results = self._executable.execute_sharded(buffers)
        return [np.asarray(r[0]) for r in results.disassemble_into_single_device_arrays()]


def run_module(text: str, arrays: Sequence[np.ndarray]) -> list[np.ndarray]:
    return XlaModule(text)(*arrays)
