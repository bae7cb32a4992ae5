"""Random numbers against jax.jit, bit for bit: stablehlo.rng_bit_generator (THREE_FRY,
PHILOX and DEFAULT, every unsigned width, shapes with odd and unit dimensions, 0-d and
empty, state words near wrapping, and the returned state), PHILOX's three-word state and
signed and float outputs (from StableHLO text, run by XLA directly), and jax.random with the
default threefry implementation (plain integer ops) and with 'rbg' (rng_bit_generator)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

import hlo2dace
from hlo2dace.errors import UnsupportedError
from hlo2dace.xla import run_module

from util import UNSIGNED_DTYPES, assert_matches_jax, dtype_id

ALGORITHMS = {"THREE_FRY": lax.RandomAlgorithm.RNG_THREE_FRY,
              "PHILOX": lax.RandomAlgorithm.RNG_PHILOX,
              "DEFAULT": lax.RandomAlgorithm.RNG_DEFAULT}
#: 32-bit and narrower THREE_FRY outputs split the first even dimension, else the largest
SHAPES = [(), (0,), (1,), (5,), (3, 4), (7, 3), (1, 9), (2, 3, 7), (5, 1, 3)]
#: uint32[4] keys: small words, and counters about to carry into the next word
KEYS = [np.array([0x12345678, 0x9ABCDEF0, 7, 0], np.uint32),
        np.array([1, 2, 0xFFFFFFF0, 0xFFFFFFFF], np.uint32)]


@pytest.mark.parametrize("dtype", UNSIGNED_DTYPES, ids=dtype_id)
@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_rng_bit_generator(algorithm, dtype):
    """Every shape drawn from each key, in one program (one build per algorithm and
    width)."""
    def fun(*keys):
        return [lax.rng_bit_generator(k, shape, dtype=dtype, algorithm=ALGORITHMS[algorithm])
                for k in keys for shape in SHAPES]

    assert_matches_jax(fun, *KEYS)


def test_rng_bit_generator_chained():
    """The returned state feeds the next call, as a loop of draws uses it."""
    def fun(k):
        draws = []
        for shape in [(3,), (2, 5), (7,)]:
            k, bits = lax.rng_bit_generator(k, shape, dtype=np.uint32)
            draws.append(bits)
        return k, draws

    assert_matches_jax(fun, KEYS[1])


ELEMENTS = ["ui2", "i4", "i8", "i16", "i32", "i64", "ui32", "ui64", "f16", "bf16", "f32",
            "f64"]


def _draws_module(n: int, shape: str, algorithm: str) -> str:
    """A module that draws one array of ``shape`` of each of ``ELEMENTS`` from its state of
    ``n`` words, returning the new states and the draws (one build for all of them)."""
    types = [f"tensor<{shape}{el}>" for el in ELEMENTS]
    state = f"tensor<{n}xui64>"
    results = ", ".join(f"{state}, {t}" for t in types)
    lines = [f"func.func @main(%s: {state}) -> ({results}) {{"]
    for k, t in enumerate(types):
        lines.append(f'  %k{k}, %d{k} = "stablehlo.rng_bit_generator"(%s) <{{rng_algorithm = '
                     f"#stablehlo<rng_algorithm {algorithm}>}}> : ({state}) -> ({state}, {t})")
    returned = ", ".join(f"%k{k}, %d{k}" for k in range(len(types)))
    lines += [f"  return {returned} : {results}", "}"]
    return "\n".join(lines)


@pytest.mark.parametrize("shape", ["", "5x", "7x3x"])
@pytest.mark.parametrize("algorithm,state", [
    ("PHILOX", [1, 2, 3]), ("PHILOX", [0xDEADBEEFCAFE, 2**64 - 3, 2**64 - 1]),
    ("DEFAULT", [5, 2**64 - 1, 9]), ("THREE_FRY", [3, 2**64 - 2])])
def test_states_and_element_types(algorithm, state, shape):
    """A three-word PHILOX state is a 128-bit counter (carrying into its high word); signed
    and float outputs hold the bits unsigned ones of their width get (XLA's CPU returns them
    as unsigned integers), 2- and 4-bit ones the low bits of a word."""
    state = np.array(state, np.uint64)
    text = _draws_module(state.size, shape, algorithm)
    expected = run_module(text, [state])
    actual = hlo2dace.compile_text(text)(state)
    assert len(expected) == len(actual) == 2 * len(ELEMENTS)
    for k, (e, a) in enumerate(zip(expected, actual)):
        a, element = np.asarray(a), ELEMENTS[k // 2]
        if k % 2 and element in ("ui2", "i4"):
            mask = (1 << int(element[-1])) - 1
            e, a = e.astype(np.int64) & mask, a.astype(np.int64) & mask
        np.testing.assert_array_equal(e.view(a.dtype), a, err_msg=f"{element} {k % 2}")


SAMPLERS = {
    "bits": lambda k: jax.random.bits(k, (5, 7)),
    "bits64": lambda k: jax.random.bits(k, (9,), jnp.uint64),
    "uniform32": lambda k: jax.random.uniform(k, (5, 7), jnp.float32),
    "uniform64": lambda k: jax.random.uniform(k, (9,), jnp.float64),
    "bernoulli": lambda k: jax.random.bernoulli(k, 0.3, (100,)),
    "categorical": lambda k: jax.random.categorical(
        k, jnp.log(jnp.array([0.1, 0.2, 0.7])), shape=(50,)),
    "randint": lambda k: jax.random.randint(k, (40,), -5, 17),
    "randint64": lambda k: jax.random.randint(k, (40,), -2**40, 2**50, dtype=jnp.int64),
    "split": lambda k: jax.random.key_data(jax.random.split(k, 5)),
    "fold_in": lambda k: jax.random.key_data(jax.random.fold_in(k, 7)),
    "permutation": lambda k: jax.random.permutation(k, 20),
    "shuffle_rows": lambda k: jax.random.permutation(k, jnp.arange(30.0).reshape(10, 3)),
    "choice": lambda k: jax.random.choice(k, 10, (4,), replace=False),
}


@pytest.mark.parametrize("impl", ["threefry2x32", "rbg"])
def test_jax_random(impl):
    """Keys are made inside the function from an integer seed, so seeding is tested too;
    every sampler in one program (a difference names its sampler)."""
    def fun(seed):
        key = jax.random.key(seed, impl=impl)
        return {name: sampler(key) for name, sampler in SAMPLERS.items()}

    assert_matches_jax(fun, np.int32(42))


@pytest.mark.parametrize("impl", ["threefry2x32", "rbg"])
def test_typed_keys_cross_the_boundary(impl):
    """Typed keys as arguments and results: hlo2dace passes their key data and wraps the
    results back into keys of the same implementation, as jax.jit does."""
    def step(key, keys):
        key, sub = jax.random.split(key)
        return key, jax.random.split(keys[1], 3), jax.random.uniform(sub, (4,))

    key, keys = jax.random.key(3, impl=impl), jax.random.split(jax.random.key(5, impl=impl), 2)
    expected, actual = jax.jit(step)(key, keys), hlo2dace.jit(step)(key, keys)
    for want, got in zip(expected[:2], actual[:2]):
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_array_equal(jax.random.key_data(got), jax.random.key_data(want))
    np.testing.assert_array_equal(np.asarray(actual[2]), np.asarray(expected[2]))


#: samplers whose arithmetic after the random bits is not reproduced bit for bit, and the
#: tolerances they are compared with. XLA's CPU contracts ``u * (max - min) + min`` into a
#: fused multiply-add where hlo2dace compiles with -ffp-contract=off: one rounding of the
#: product apart (an ULP of 5, more ULPs of a result near 0 after the cancellation).
#: Normal values go through erf_inv, whose log1p differs from XLA's by a few ULP in f32 and
#: up to hundreds in f64 near -1, which erf_inv amplifies (elementwise ops' concern).
ROUNDED = {
    "uniform_bounds32": (lambda k: jax.random.uniform(k, (99,), jnp.float32, -2.0, 3.0),
                         {"atol": 4 * float(np.finfo(np.float32).eps)}),
    "uniform_bounds64": (lambda k: jax.random.uniform(k, (99,), jnp.float64, -2.0, 3.0),
                         {"atol": 4 * float(np.finfo(np.float64).eps)}),
    "normal32": (lambda k: jax.random.normal(k, (1001,), jnp.float32), {"ulp": 4}),
    "normal64": (lambda k: jax.random.normal(k, (1001,), jnp.float64), {"ulp": 64}),
}


@pytest.mark.parametrize("impl", ["threefry2x32", "rbg"])
@pytest.mark.parametrize("name", ROUNDED)
def test_jax_random_rounded(name, impl):
    sampler, tolerance = ROUNDED[name]

    def fun(seed):
        return sampler(jax.random.key(seed, impl=impl))

    assert_matches_jax(fun, np.int32(7), **tolerance)


@pytest.mark.parametrize("change,message", [
    ("algorithm = PHILOX, n = 4", "PHILOX with a state of type tensor<4xui64>"),
    ("algorithm = THREE_FRY, n = 3", "THREE_FRY with a state of type tensor<3xui64>"),
    ("algorithm = DEFAULT, n = 1", "PHILOX with a state of type tensor<1xui64>"),
])
def test_unsupported(change, message):
    fields = dict(assignment.split(" = ") for assignment in change.split(", "))
    with pytest.raises(UnsupportedError, match=message.replace("<", ".").replace(">", ".")):
        hlo2dace.lower_text(_draws_module(int(fields["n"]), "3x", fields["algorithm"])
                            ).as_sdfg()


# ------------------------------------------------- stablehlo.rng (implementation-defined)


@pytest.mark.parametrize("dtype,low,high", [
    (np.float32, -2.0, 3.0), (np.float64, 0.0, 1.0), (jnp.bfloat16, 1.0, 2.0),
    (np.float16, -1.0, 1.0), (np.int32, -7, 9), (np.uint8, 3, 250), (np.int64, -2**40, 2**41),
    (np.int8, -128, 127)], ids=lambda v: getattr(v, "__name__", str(v)))
def test_rng_uniform(dtype, low, high):
    """``lax.rng_uniform``: values in [low, high), spread over the range, and new numbers
    on every call (XLA's generator is stateful too)."""
    fun = hlo2dace.jit(lambda a, b: jax.lax.rng_uniform(a, b, (4000,)))
    a, b = np.asarray(low, dtype), np.asarray(high, dtype)
    first, second = np.asarray(fun(a, b)), np.asarray(fun(a, b))
    assert first.dtype == np.dtype(dtype) and first.shape == (4000,)
    for values in (first, second):
        assert (values >= a).all() and (values < b).all()
        span = float(b) - float(a)
        assert float(values.min()) < float(a) + 0.05 * span
        assert float(values.max()) > float(b) - 0.05 * span - 1
    assert (first != second).mean() > 0.5


def test_rng_uniform_empty_range_gives_low():
    fun = hlo2dace.jit(lambda a, b: jax.lax.rng_uniform(a, b, (5,)))
    np.testing.assert_array_equal(fun(np.int32(4), np.int32(4)), np.full(5, 4, np.int32))


RNG_NORMAL = """
func.func @main(%mean: tensor<f64>, %sigma: tensor<f64>) -> tensor<200x100xf64> {
  %shape = stablehlo.constant dense<[200, 100]> : tensor<2xi64>
  %0 = stablehlo.rng %mean, %sigma, %shape, distribution = NORMAL
      : (tensor<f64>, tensor<f64>, tensor<2xi64>) -> tensor<200x100xf64>
  return %0 : tensor<200x100xf64>
}
"""


def test_rng_normal_moments():
    values = hlo2dace.compile_text(RNG_NORMAL)(np.float64(3.0), np.float64(2.0))
    assert values.shape == (200, 100) and np.isfinite(values).all()
    assert abs(values.mean() - 3.0) < 0.06 and abs(values.std() - 2.0) < 0.06
    assert abs(((values - 3.0) / 2.0 > 1.0).mean() - 0.1587) < 0.015

