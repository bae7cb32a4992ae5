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
        self._device = self._backend.devices()[0]
        devices = xla_client.DeviceList((self._device,))
        self._executable = self._backend.compile_and_load(text.encode(), devices,
                                                          xla_client.CompileOptions())
        self._jax = jax

    def __call__(self, *arrays: np.ndarray) -> list[np.ndarray]:
        # 64-bit arrays stay 64-bit whatever the process's jax_enable_x64 says
        with self._jax.enable_x64(True):
            buffers = [self._jax.device_put(np.asarray(a), self._device) for a in arrays]
        results = self._executable.execute_sharded(buffers)
        return [np.asarray(r[0]) for r in results.disassemble_into_single_device_arrays()]


def run_module(text: str, arrays: Sequence[np.ndarray]) -> list[np.ndarray]:
    return XlaModule(text)(*arrays)
