"""What crosses between Python and a compiled program: the argument and result specs of a
module's entry function, pytree leaves as the arrays the program takes, its NumPy results
as the ``jax.Array``s ``jax.jit`` would return, and whether a call is traced by JAX.
``api.py`` (the public stages), ``interop.py`` (JAX's transformations) and ``cli.py`` use
them."""

from __future__ import annotations

import contextlib
import functools
import threading
from typing import Any, Sequence

import numpy as np
from jax._src import config as _jax_config
from jax._src import core as _jax_core

from . import ir, runtime
from .errors import UnsupportedError


def tensor_specs(types: Sequence[ir.Type], names: Sequence[str], what: str):
    from .translate import dtypes

    specs = []
    for i, (t, name) in enumerate(zip(types, names)):
        if not isinstance(t, ir.TensorType) or not t.is_static:
            raise UnsupportedError("func.func", f"{what} {i} of type {t}")
        element = dtypes.of(t, "func.func")
        shape = tuple(d if isinstance(d, int) else str(d) for d in t.shape)
        specs.append(runtime.TensorSpec(name, shape, element.numpy.name,
                                        element.storage_numpy.name,
                                        bits=element.narrow_bits is None))
    return specs


def data_types(types: Sequence[ir.Type]) -> list[ir.Type]:
    """The types of what a call passes or returns: tokens (ordered effects) are neither."""
    return [t for t in types if not isinstance(t, ir.TokenType)]


#: the jax.Array types whose buffers the C call path reads as they are
JAX_ARRAY_TYPES = frozenset(runtime.exported_array_types())
#: argument types ``JitFunction`` keys its cache on directly (shape, dtype, weak type)
ARRAY_TYPES = (np.ndarray, *JAX_ARRAY_TYPES)
#: Python's scalars, which JAX gives a weak type: a call keys its cache on the type alone
PYTHON_SCALARS = (bool, int, float, complex)
#: argument types that are pytree leaves themselves, keyed without flattening a pytree
LEAF_TYPES = frozenset((*ARRAY_TYPES, *PYTHON_SCALARS,
                        *(t for t in set(np.sctypeDict.values()) if issubclass(t, np.generic))))


class Results:
    """Turns the compiled code's NumPy results into what ``jax.jit`` returns: ``jax.Array``s
    with the avals (weak types included) of the lowering, typed PRNG keys, in its pytree.
    Each array is put on the CPU device by jaxlib's ``batched_device_put`` with the aval
    and sharding made here once: ``jax.device_put`` costs ten times as much per call."""

    def __init__(self, tree, avals, polymorphic: bool = False,
                 shardings: Sequence[Any] | None = None):
        import jax
        from jax._src.lib import xla_client
        from jax.sharding import SingleDeviceSharding

        self.tree = tree
        self.polymorphic = polymorphic
        self.device = jax.devices("cpu")[0]
        self.sharding = SingleDeviceSharding(self.device)
        #: per result, the sharding it is returned with (``in_shardings``/``out_shardings``:
        #: jax.jit's), or None: all on the CPU device
        self.shardings = list(shardings) if shardings is not None else None
        #: (key type, None) for a typed PRNG key, (None, None) for a dtype jaxlib's CPU
        #: buffers cannot hold (f6E2M3FN, f6E3M2FN: returned as NumPy arrays), else
        #: (None, aval)
        self.leaves = [(aval.dtype, None) if is_key(aval.dtype)
                       else (None, aval) if _device_holds(aval.dtype) else (None, None)
                       for aval in avals]
        self.concrete: dict[tuple[int, tuple], Any] = {}  # (leaf, shape) -> its aval
        #: every result's aval where each is an array put on the CPU device as it is (the
        #: common case, ``wrap``'s one loop; results XLA may make, ``interop.py``), else None
        self.plain_avals = [aval for _, aval in self.leaves] if shardings is None and not \
            polymorphic and all(aval is not None for _, aval in self.leaves) else None
        # looked up once: the imports and attribute lookups are on every call's path
        self._devices = [self.device]
        self._put = xla_client.batched_device_put
        self._unflatten = jax.tree_util.tree_unflatten
        #: the results are one array, not a pytree of them
        self._one_leaf = tree.num_leaves == 1 and jax.tree_util.treedef_is_leaf(tree)
        self._wrap_key = lambda array, key_type: jax.random.wrap_key_data(
            jax.device_put(array), impl=key_type._impl)

    @classmethod
    def of_arrays(cls, arrays: Sequence[np.ndarray]) -> Results:
        """For a module's flat results shaped like ``arrays``: a tuple of ``jax.Array``s,
        as a ``jax.jit`` function of a module with several results returns them."""
        import jax

        return cls(jax.tree_util.tree_structure(tuple(arrays)),
                   [jax.core.ShapedArray(a.shape, a.dtype) for a in arrays])

    def unflatten(self, leaves: Sequence[Any]):
        """``leaves`` as they are, in the results' pytree (process-local arrays)."""
        return self._unflatten(self.tree, list(leaves))

    def wrap(self, arrays: Sequence[np.ndarray], committed: bool = False):
        """``arrays`` as ``jax.Array``s in the results' pytree, committed to the device as
        jax.jit's results of committed arguments are (``committed``)."""
        if self.plain_avals is None:
            return self._wrap_each(arrays, committed)
        put, sharding, devices = self._put, self.sharding, self._devices
        results = [put(aval, sharding, [array], devices, committed, False)
                   for aval, array in zip(self.plain_avals, arrays)]
        return results[0] if self._one_leaf else self._unflatten(self.tree, results)

    def _wrap_each(self, arrays: Sequence[np.ndarray], committed: bool):
        """``wrap`` where results have shardings, symbolic sizes, or are keys or f6."""
        if self.shardings is not None:
            return self._unflatten(self.tree, [
                self._placed(array, aval, sharding) if aval is not None
                else array if key_type is None else self._wrap_key(array, key_type)
                for array, (key_type, aval), sharding in zip(arrays, self.leaves,
                                                            self.shardings)])
        if self.polymorphic:  # the avals' symbolic sizes made concrete, once per shape
            return self._unflatten(self.tree, [
                self._put(self._concrete(k, aval, array.shape), self.sharding, [array],
                          self._devices, committed, False) if aval is not None
                else array if key_type is None else self._wrap_key(array, key_type)
                for k, (array, (key_type, aval)) in enumerate(zip(arrays, self.leaves))])
        results = [self._put(aval, self.sharding, [array], self._devices, committed, False)
                   if aval is not None else array if key_type is None
                   else self._wrap_key(array, key_type)
                   for array, (key_type, aval) in zip(arrays, self.leaves)]
        return results[0] if self._one_leaf else self._unflatten(self.tree, results)

    def _placed(self, array: np.ndarray, aval, sharding):
        """``array`` as a ``jax.Array`` of ``sharding``: put on its one device, or cut into
        the shards of its several (a copy: a sharded result of a program that ran whole)."""
        import jax

        devices = list(sharding.device_set)
        if len(devices) == 1:
            return self._put(aval.update(shape=array.shape), sharding, [array], devices,
                             False, False)
        return jax.device_put(array, sharding)

    def _concrete(self, k: int, aval, shape: tuple):
        concrete = self.concrete.get((k, shape))
        if concrete is None:
            concrete = self.concrete[(k, shape)] = aval.update(shape=shape)
        return concrete


@functools.cache
def _device_holds(dtype) -> bool:
    """Whether a jax.Array on the CPU can hold ``dtype`` (XLA has no f6 types)."""
    import jax

    try:
        jax.device_put(np.zeros((), dtype), jax.devices("cpu")[0])
    except Exception:  # JaxRuntimeError: Unknown NumPy dtype
        return False
    return True


def leaf_key(leaf: Any):
    """What a call's cache key holds of a leaf: a Python scalar's type (JAX gives it a weak
    type), an array's shape, dtype and weak type (a jax.Array's read off its aval: one
    attribute instead of three properties, a third of the time)."""
    kind = type(leaf)
    if kind in JAX_ARRAY_TYPES:
        aval = leaf.aval
        return aval.shape, aval.dtype, aval.weak_type
    if kind is np.ndarray:
        return leaf.shape, leaf.dtype, False
    if kind in PYTHON_SCALARS:
        return kind
    return abstract(leaf)


def abstract(leaf: Any):
    if isinstance(leaf, PYTHON_SCALARS):
        return (type(leaf),)
    shape = getattr(leaf, "shape", None)
    dtype = getattr(leaf, "dtype", None)
    if shape is None or dtype is None:
        leaf = np.asarray(leaf)
        shape, dtype = leaf.shape, leaf.dtype
    name = str(dtype) if is_key(dtype) else np.dtype(dtype).str
    return (tuple(shape), name, bool(getattr(leaf, "weak_type", False)))


def is_key(dtype: Any) -> bool:
    """Typed PRNG keys (``jax.random.key``): StableHLO sees their uint32 key data."""
    if dtype is None or isinstance(dtype, np.dtype):
        return False
    import jax

    return jax.dtypes.issubdtype(dtype, jax.dtypes.prng_key)


def as_array(leaf: Any, spec: runtime.TensorSpec) -> np.ndarray:
    """A leaf as the NumPy array the compiled code takes: Python scalars, weakly typed
    values and 64-bit arrays with x64 off take the dtype JAX gave them in the lowering."""
    import jax

    if isinstance(leaf, (bool, int, float, complex)):
        return np.asarray(leaf, dtype=np.dtype(spec.dtype))
    if is_key(getattr(leaf, "dtype", None)):
        leaf = jax.random.key_data(leaf)
    array = np.asarray(leaf)
    expected = np.dtype(spec.dtype)
    if array.dtype != expected and (getattr(leaf, "weak_type", False)
                                    or jax.dtypes.canonicalize_dtype(array.dtype) == expected):
        array = array.astype(expected)
    return array




_inline = threading.local()


@contextlib.contextmanager
def inlining():
    """While hlo2dace lowers a function, the ``hlo2dace.jit`` functions it calls are traced
    into it: the whole program is compiled by DaCe, with no foreign call inside."""
    _inline.depth = getattr(_inline, "depth", 0) + 1
    try:
        yield
    finally:
        _inline.depth -= 1


def inlined() -> bool:
    """Whether hlo2dace is lowering a function on this thread (``inlining``)."""
    return getattr(_inline, "depth", 0) > 0


def compiling_calls() -> bool:
    """True outside every JAX trace and with jit on: where ``jax.jit`` would run a call now
    as one compiled program (JAX's trace context read directly: its public accessor costs
    half a microsecond, a tenth of a call)."""
    return type(_jax_core.trace_ctx.trace) is _jax_core.EvalTrace \
        and not _jax_config.disable_jit.value


def committed(leaves: Sequence[Any]) -> bool:
    """Whether jax.jit commits its results to their device for these arguments: where any
    is a jax.Array committed to its own."""
    return any(type(leaf) in JAX_ARRAY_TYPES and leaf.committed for leaf in leaves)


def traced(leaves: Sequence[Any]) -> bool:
    """True if any leaf is a JAX tracer: the call is inside a transformation."""
    from jax.core import Tracer

    return any(isinstance(leaf, Tracer) for leaf in leaves)
