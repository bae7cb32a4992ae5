"""Runs a StableHLO module with XLA (jaxlib's CPU client): the reference that
``hlo2dace compare`` and the tests measure hlo2dace against."""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np


class XlaModule:
    """A module compiled by XLA. ``place`` puts arguments on XLA's device once and
    ``execute`` runs the module on them, its results left on the device: what a call of a
    ``jax.jit`` function does with arguments that are already ``jax.Array``s, and what
    ``hlo2dace compare`` times. Calling the module with NumPy arrays does both and returns
    NumPy arrays."""

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

    def place(self, arrays: Sequence[Any]) -> list[Any]:
        """``arrays`` as ``jax.Array``s on XLA's device (64-bit arrays stay 64-bit whatever
        the process's ``jax_enable_x64`` says): a host-to-device copy, made once."""
        with self._jax.enable_x64(True):
            return [self._jax.device_put(np.asarray(a), self._device) for a in arrays]

    def execute(self, placed: Sequence[Any]) -> list[Any]:
        """The module run on arguments made by ``place``; its results as ``jax.Array``s,
        ready (no copy to the host)."""
        results = self._executable.execute_sharded(list(placed))
        return self._jax.block_until_ready(
            [r[0] for r in results.disassemble_into_single_device_arrays()])

    def __call__(self, *arrays: np.ndarray) -> list[np.ndarray]:
        return [np.asarray(r) for r in self.execute(self.place(arrays))]


def run_module(text: str, arrays: Sequence[np.ndarray]) -> list[np.ndarray]:
    return XlaModule(text)(*arrays)
