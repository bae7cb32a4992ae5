"""Differential property tests: random small programs (chains of elementwise, shape,
conversion and reduction ops over random dtypes and shapes, drawn by hypothesis) give what
``jax.jit`` gives. Bounded and derandomised: the same programs in every run.

A program is a list of steps applied to the first argument; each step's integers choose
its op and its parameters modulo what the current value allows (an axis modulo its rank),
so every drawn list is a valid program and shrinks to a smaller one."""

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from util import assert_matches_jax

DTYPES = [np.float32, np.float64, np.float16, ml_dtypes.bfloat16, np.int8, np.int32,
          np.int64, np.uint8, np.uint32, np.bool_]

FLOAT_UNARY = [jnp.negative, jnp.abs, jnp.sin, jnp.cos, jnp.tanh, jnp.floor, jnp.ceil,
               jnp.round, lambda v: jnp.exp(-jnp.abs(v)), lambda v: jnp.log1p(jnp.abs(v)),
               lambda v: jnp.sqrt(jnp.abs(v)), lambda v: v * 0.5]
INT_UNARY = [jnp.negative, jnp.abs, jnp.sign, jnp.invert, lambda v: v * 3,
             lambda v: v >> 1, lambda v: v // 2]
BOOL_UNARY = [jnp.logical_not]
BINARY = [jnp.add, jnp.subtract, jnp.multiply, jnp.maximum, jnp.minimum]
INT_BINARY = BINARY + [jnp.bitwise_and, jnp.bitwise_or, jnp.bitwise_xor]
BOOL_BINARY = [jnp.logical_and, jnp.logical_or, jnp.logical_xor, jnp.maximum]
REDUCTIONS = [jnp.sum, jnp.max, jnp.min, jnp.prod]
OPS = ["unary", "binary", "select", "convert", "transpose", "reverse", "slice", "reshape",
       "broadcast", "concatenate", "reduce", "cumsum", "dot"]


def _kind(v) -> str:
    return "b" if v.dtype == jnp.bool_ else ("f" if jnp.issubdtype(v.dtype, jnp.inexact)
                                           else "i")


def _pick(options, k):
    return options[k % len(options)]


def _step(v, x, y, op, a, b):
    """One op on the value ``v`` (x, y: the arguments), parameters ``a`` and ``b``."""
    kind = _kind(v)
    axis = a % v.ndim if v.ndim else None
    if op == "unary":
        return _pick({"f": FLOAT_UNARY, "i": INT_UNARY, "b": BOOL_UNARY}[kind], a)(v)
    if op in ("binary", "select"):
        others = [v[::-1] if v.ndim else v, jnp.asarray(1.5 if kind == "f" else 2, v.dtype)]
        others += [w.astype(v.dtype) for w in (x, y) if w.shape == v.shape]
        other = _pick(others, b)
        if op == "select":
            return jnp.where(v > other, v, other)
        return _pick({"f": BINARY, "i": INT_BINARY, "b": BOOL_BINARY}[kind], a)(v, other)
    if op == "convert":
        return v.astype(_pick(DTYPES, a))
    if v.ndim == 0:
        return v
    if op == "transpose":
        return jnp.transpose(v, np.random.default_rng(a).permutation(v.ndim))
    if op == "reverse":
        return jnp.flip(v, axis)
    if op == "slice":
        index = [slice(None)] * v.ndim
        index[axis] = slice(b % 2, None, 1 + b % 3)
        return v[tuple(index)]
    if op == "reshape":
        return v.reshape(-1) if a % 2 or not v.size else v.reshape(v.shape[:1] + (-1,))
    if op == "broadcast":
        return jnp.broadcast_to(jnp.expand_dims(v, axis), v.shape[:axis] + (2,) + v.shape[axis:])
    if op == "concatenate":
        return jnp.concatenate([v, jnp.flip(v, axis)], axis)
    if op == "reduce":
        if kind == "b":
            return (jnp.any if b % 2 else jnp.all)(v, axis=axis, keepdims=bool(b % 3))
        reduction = _pick(REDUCTIONS, b)
        if v.shape[axis] == 0 and reduction in (jnp.max, jnp.min):
            return v  # no identity: an error in JAX as well
        return reduction(v, axis=axis, keepdims=bool(b % 3))
    if op == "cumsum" and kind != "b":
        return jnp.cumsum(v, axis=axis)
    if op == "dot" and kind != "b" and v.ndim <= 2:
        return jnp.matmul(v, jnp.swapaxes(v, -1, 0) if v.ndim == 2 else v)
    return v


def program(steps):
    def fun(x, y):
        v = x
        for step in steps:
            v = _step(v, x, y, *step)
        return v, x + 1 if _kind(x) != "b" else ~x  # a second result, of the argument's type

    return fun


def _magnitude(steps, x, y) -> float:
    """The largest magnitude of any floating-point value the program computes (run op by
    op): the scale of the rounding errors that a different order of operations makes."""
    largest, v = 1.0, x
    for step in steps:
        v = _step(v, x, y, *step)
        if _kind(v) == "f" and v.size:
            finite = np.abs(np.asarray(v, np.float64))
            finite = finite[np.isfinite(finite)]
            largest = max(largest, float(finite.max()) if finite.size else 0.0)
    return largest


@st.composite
def programs(draw):
    dtype = draw(st.sampled_from(DTYPES))
    shape = draw(st.lists(st.integers(1, 4), max_size=3))
    if shape and draw(st.integers(0, 7)) == 0:
        shape[draw(st.integers(0, len(shape) - 1))] = 0  # now and then an empty array
    steps = draw(st.lists(st.tuples(st.sampled_from(OPS), st.integers(0, 63),
                                    st.integers(0, 63)), min_size=1, max_size=6))
    seed = draw(st.integers(0, 2 ** 32 - 1))
    return dtype, tuple(shape), steps, seed


#: programs that passed: hypothesis draws some twice, and each should test something new
_passed: set = set()


def _argument(rng, dtype, shape):
    if np.dtype(dtype) == np.bool_:
        return rng.random(shape) < 0.5
    if np.dtype(dtype).kind in "iu":
        info = np.iinfo(dtype)
        return rng.integers(max(info.min, -100), min(info.max, 100), shape, endpoint=True,
                            dtype=dtype)
    return rng.uniform(-3, 3, shape).astype(dtype)


@settings(max_examples=24, deadline=None, derandomize=True, database=None,
          suppress_health_check=list(HealthCheck))
@given(programs())
def test_random_programs_match_jax_jit(drawn):
    dtype, shape, steps, seed = drawn
    key = (np.dtype(dtype).name, shape, tuple(steps))
    assume(key not in _passed)
    rng = np.random.default_rng(seed)
    x, y = _argument(rng, dtype, shape), _argument(rng, dtype, shape)
    scale = _magnitude(steps, jnp.asarray(x), jnp.asarray(y))
    # each result against XLA's: floats within 64 units of rounding of the largest value
    # computed on the way (sums in another order, libm's last bits), integers exactly
    out = jax.eval_shape(program(steps), x, y)[0]
    eps = float(ml_dtypes.finfo(out.dtype).eps) if _kind(out) == "f" else 0.0
    assert_matches_jax(program(steps), x, y, ulp=4, atol=64 * eps * scale, rtol=64 * eps,
                       signed_zeros=False)
    _passed.add(key)
