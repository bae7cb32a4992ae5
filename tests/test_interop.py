"""hlo2dace.jit functions inside JAX's transformations (hlo2dace/interop.py): grad, vjp,
jvp, jacfwd, jacrev, vmap and jax.jit around them compute with DaCe-compiled programs.
Every test counts the compiled programs' runs (``interop.calls``), so a silent fallback
to XLA's own code fails it."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import hlo2dace
from hlo2dace import interop
from hlo2dace.errors import UnsupportedError

TOLERANCE = {np.float32: dict(rtol=2e-5, atol=2e-6), np.float64: dict(rtol=1e-11, atol=1e-12)}


@pytest.fixture(params=["ffi", "callback"])
def call_path(request, monkeypatch):
    """Inside jax.jit: the FFI handler, or jax.pure_callback where it cannot be built."""
    if request.param == "callback":
        monkeypatch.setattr(interop, "ffi_library", lambda: None)
    else:
        assert interop.ffi_library() is not None, "a C++ compiler is here: it must build"
    return request.param


def mlp(params, x):
    for w, b in params[:-1]:
        x = jnp.tanh(x @ w + b)
    w, b = params[-1]
    return x @ w + b


def loss(params, x, y):
    return jnp.mean((mlp(params, x) - y) ** 2)


def mlp_data(dtype, sizes=(5, 8, 3), batch=6, seed=0):
    rng = np.random.default_rng(seed)
    params = [(rng.standard_normal((m, n)).astype(dtype) / np.sqrt(m),
               rng.standard_normal(n).astype(dtype) * 0.1)
              for m, n in zip(sizes[:-1], sizes[1:])]
    x = rng.standard_normal((batch, sizes[0])).astype(dtype)
    y = rng.standard_normal((batch, sizes[-1])).astype(dtype)
    return params, x, y


def assert_trees_close(actual, expected, dtype):
    leaves, tree = jax.tree_util.tree_flatten(actual)
    expected_leaves, expected_tree = jax.tree_util.tree_flatten(expected)
    assert tree == expected_tree
    for a, e in zip(leaves, expected_leaves):
        assert a.dtype == e.dtype and a.shape == e.shape
        np.testing.assert_allclose(np.asarray(a), np.asarray(e), **TOLERANCE[dtype])


def count(fun, *args):
    """``fun(*args)`` (made ready) and how many compiled programs ran for it."""
    before = interop.calls()
    result = jax.block_until_ready(fun(*args))
    return result, interop.calls() - before


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("outer", ["eager", "jit"])
def test_grad_of_mlp_loss(dtype, outer, call_path):
    """jax.grad through hlo2dace.jit equals jax.grad of the plain function: the forward
    program (loss and residuals) and the backward one (residuals in) run once each."""
    params, x, y = mlp_data(dtype)
    grad = jax.grad(hlo2dace.jit(loss))
    grad = jax.jit(grad) if outer == "jit" else grad
    actual, runs = count(grad, params, x, y)
    assert_trees_close(actual, jax.grad(loss)(params, x, y), dtype)
    assert runs == 2


def test_jaxpr_holds_compiled_programs():
    """Under a trace the call is one primitive; its gradient is a forward and a transposed
    linear program, with no XLA operation of the loss left in the jaxpr."""
    params, x, y = mlp_data(np.float32)
    jaxpr = jax.make_jaxpr(jax.value_and_grad(hlo2dace.jit(loss)))(params, x, y)
    names = [eqn.primitive.name for eqn in jaxpr.jaxpr.eqns]
    assert names.count("hlo2dace_call") == 2
    assert not {"tanh", "dot_general"} & set(names)


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
def test_training_loop(dtype, call_path):
    """20 steps of SGD, each a jax.jit of code that differentiates an hlo2dace.jit loss,
    match the pure-JAX loop; two programs (forward, backward) run in every step."""
    params, x, y = mlp_data(dtype, sizes=(4, 16, 16, 2), batch=8, seed=1)

    def make_step(loss_fun):
        @jax.jit
        def step(params, x, y):
            value, grads = jax.value_and_grad(loss_fun)(params, x, y)
            return jax.tree_util.tree_map(lambda p, g: p - 0.1 * g, params, grads), value
        return step

    dace_step, jax_step = make_step(hlo2dace.jit(loss)), make_step(loss)
    expected, actual, losses, runs = params, params, [], 0
    for _ in range(20):
        expected, expected_loss = jax_step(expected, x, y)
        (actual, actual_loss), n = count(dace_step, actual, x, y)
        losses.append((actual_loss, expected_loss))
        runs += n
    assert runs == 40
    assert_trees_close(actual, expected, dtype)
    np.testing.assert_allclose(*np.array(losses).T, **TOLERANCE[dtype])
    assert losses[-1][0] < losses[0][0]


@pytest.mark.parametrize("in_axes", [(0, None), (None, 0), (1, 0)])
@pytest.mark.parametrize("outer", ["eager", "jit"])
def test_vmap(in_axes, outer, call_path):
    """vmap compiles the batched program: one run for the whole batch, not one per row."""
    def f(x, w):
        return jnp.tanh(x @ w), jnp.sum(w, axis=0)

    rng = np.random.default_rng(2)
    x, w = rng.standard_normal((3, 4)), rng.standard_normal((4, 2))
    batch = 5
    x = np.stack([x * (i + 1) for i in range(batch)], axis=in_axes[0]) \
        if in_axes[0] is not None else x
    w = np.stack([w + i for i in range(batch)], axis=in_axes[1]) if in_axes[1] is not None else w
    mapped = jax.vmap(hlo2dace.jit(f), in_axes=in_axes)
    mapped = jax.jit(mapped) if outer == "jit" else mapped
    actual, runs = count(mapped, x, w)
    assert_trees_close(actual, jax.vmap(f, in_axes=in_axes)(x, w), np.float64)
    assert runs == 1


def _cubic(x, w):
    return jnp.sin(x @ w) * jnp.sum(w**3)


@pytest.mark.parametrize("transform, runs", [
    (lambda f: lambda x, w: jax.jvp(f, (x, w), (jnp.ones_like(x), w * 0.5)), 2),
    (lambda f: lambda x, w: jax.vjp(f, x, w)[1](jnp.ones((3, 2))), 2),
    (lambda f: jax.jacfwd(f, argnums=1), 2),
    (lambda f: jax.jacrev(f, argnums=(0, 1)), 2),
    (lambda f: jax.hessian(lambda x, w: jnp.sum(f(x, w)), argnums=1), 4),
    (lambda f: jax.grad(lambda x, w: jnp.sum(jax.vmap(f, in_axes=(0, None))(x[None], w))), 2),
], ids=["jvp", "vjp", "jacfwd", "jacrev", "hessian", "grad-of-vmap"])
def test_transformations(transform, runs):
    """Forward mode, reverse mode and their compositions: each is a few compiled programs
    (forward, linear, transposed, batched) whatever the nesting."""
    rng = np.random.default_rng(3)
    x, w = rng.standard_normal((3, 4)), rng.standard_normal((4, 2))
    actual, n = count(transform(hlo2dace.jit(_cubic)), x, w)
    assert_trees_close(actual, transform(_cubic)(x, w), np.float64)
    assert n == runs


def test_ffi_call_reads_and_writes_xla_buffers_in_place():
    """Inside jax.jit the program is called on XLA's own buffers, no copies: the addresses
    of the arguments and results are the ones the FFI handler passed on (with a constant's)."""
    table = np.arange(12.0, dtype=np.float32).reshape(3, 4)  # a non-splat constant

    @hlo2dace.jit
    def f(x, y):
        return x @ table + 1.0, jnp.sum(y)

    x = jnp.asarray(np.random.default_rng(4).standard_normal((2, 3)), jnp.float32)
    y = jnp.arange(5.0, dtype=jnp.float32)
    (a, b), runs = count(jax.jit(f), x, y)
    np.testing.assert_allclose(np.asarray(a), np.asarray(x) @ table + 1.0, rtol=1e-6)
    assert runs == 1 and float(b) == 10.0
    pointers = interop.last_ffi_pointers()
    buffers = [x, y, a, b]
    assert len(pointers) == len(buffers) + 1  # and the constant's
    assert {t.unsafe_buffer_pointer() for t in buffers} < set(pointers)


@pytest.mark.parametrize("outer", ["jit", "grad"])
def test_pytrees_static_arguments_and_integers(outer, call_path):
    """Pytrees in and out, keyword and static arguments, Python scalars and integer
    results inside jax.jit and jax.grad, as hlo2dace.jit takes them outside."""
    def f(p, n, scale, *, power):
        s = jnp.sum(p["w"] ** power) * scale
        return {"s": s, "n": (n + 1, jnp.argmax(p["w"]))}

    dace_f = hlo2dace.jit(f, static_argnames="power")
    p = {"w": jnp.asarray([0.5, -1.5, 2.0])}
    if outer == "jit":
        def run(fun):
            return jax.jit(lambda p, n: fun(p, n, 2.0, power=3))(p, 4)
    else:
        def run(fun):
            return jax.grad(lambda p: fun(p, 4, 2.0, power=3)["s"])(p)
    actual, runs = count(run, dace_f)
    expected = run(f)
    for a, e in zip(jax.tree_util.tree_leaves(actual), jax.tree_util.tree_leaves(expected)):
        assert a.dtype == e.dtype and getattr(a, "weak_type", False) == e.weak_type
        np.testing.assert_allclose(np.asarray(a), np.asarray(e), rtol=1e-12)
    assert jax.tree_util.tree_structure(actual) == jax.tree_util.tree_structure(expected)
    assert runs == (1 if outer == "jit" else 2)


def test_nested_hlo2dace_jit_is_one_program():
    """An hlo2dace.jit function called by another one joins the caller's program (no
    foreign call inside a program DaCe compiles); inside jax.jit the outer one is called."""
    inner = hlo2dace.jit(lambda x: jnp.sin(x) * 2.0)
    outer = hlo2dace.jit(lambda x: inner(x) + inner(x[::-1]))
    x = jnp.linspace(0.0, 1.0, 7)
    assert "custom_call" not in outer.lower(x).as_text()
    expected = jnp.sin(x) * 2.0 + jnp.sin(x[::-1]) * 2.0
    np.testing.assert_allclose(np.asarray(outer(x)), expected, rtol=1e-14)
    actual, runs = count(jax.jit(outer), x)
    np.testing.assert_allclose(np.asarray(actual), expected, rtol=1e-14)
    assert runs == 1


def test_export_holds_the_functions_own_stablehlo():
    """jax.export serialises for other processes: the call is the function's StableHLO
    there, not a foreign call of this process's program."""
    kernel = hlo2dace.jit(lambda x: jnp.sin(x) * 2.0)
    exported = jax.export.export(jax.jit(lambda x: kernel(x) + 1.0))(
        jax.ShapeDtypeStruct((3,), jnp.float32))
    assert "custom_call" not in exported.mlir_module()
    x = jnp.linspace(0.0, 1.0, 3, dtype=jnp.float32)
    np.testing.assert_allclose(np.asarray(exported.call(x)), np.sin(x) * 2.0 + 1.0, rtol=1e-6)


def test_closing_over_a_traced_value_is_an_error():
    """A program is compiled on its own: a value of the enclosing trace cannot be baked in."""
    def step(scale, x):
        return hlo2dace.jit(lambda x: x * scale)(x)

    with pytest.raises(UnsupportedError, match="closes over a value traced"):
        jax.jit(step)(2.0, jnp.ones(3))


@pytest.mark.parametrize("f, in_place", [
    (lambda p, g: p - 0.1 * jnp.tanh(g) * p, True),
    (lambda p, g: p[::-1] * 2.0 + g, False),
    (lambda p, g: p @ g, False),
    (lambda p, g: (p * 2.0, p + g), True),  # one tasklet reads p[i], then writes both
    (lambda p, g: (p * 2.0, p[::-1] + g), False),
    (lambda p, g: p - jnp.sum(p), False),
], ids=["elementwise", "reversed", "matmul", "two-results", "read-elsewhere", "two-maps"])
@pytest.mark.parametrize("outer_donates", [True, False], ids=["donated", "kept"])
def test_donation(f, in_place, outer_donates):
    """A donated argument's buffer takes a result inside jax.jit where the program reads
    each element only before it writes the same element; elsewhere the program writes a
    buffer of its own. XLA copies an argument that is still needed, so values never change
    under the caller, and a direct call leaves its arguments alone."""
    rng = np.random.default_rng(5)
    kept = rng.standard_normal((32, 32)).astype(np.float32)
    # buffers of XLA's own: an array NumPy has seen (np.asarray) cannot be donated
    p, g = jax.jit(lambda p, g: (p + 0.0, g + 0.0))(kept, kept.T * 2.0)
    expected = jax.jit(f)(kept, kept.T * 2.0)
    # in place as the default level fuses (``none`` writes every intermediate value)
    kernel = hlo2dace.jit(f, donate_argnums=0, optimize="default")
    direct = jnp.asarray(kept)  # not p: NumPy's view of a first call's array pins its buffer
    assert_trees_close(kernel(direct, g), expected, np.float32)
    np.testing.assert_array_equal(np.asarray(direct), kept)
    step = jax.jit(lambda p, g: kernel(p, g), donate_argnums=0 if outer_donates else ())
    address = p.unsafe_buffer_pointer()
    actual, runs = count(step, p, g)
    assert_trees_close(actual, expected, np.float32)
    pointers = interop.last_ffi_pointers()
    assert runs == 1 and (len(set(pointers)) < len(pointers)) == in_place
    if outer_donates:
        assert p.is_deleted()
        if in_place:
            assert jax.tree_util.tree_leaves(actual)[0].unsafe_buffer_pointer() == address
    else:
        np.testing.assert_array_equal(np.asarray(p), kept)


def test_donation_pairs_only_results_of_the_arguments_type():
    """f16 and bf16 share a storage type; a bf16 result never takes an f16 buffer."""
    kernel = hlo2dace.jit(lambda p: (p * 2).astype(jnp.bfloat16), donate_argnums=0)
    p = jnp.arange(8, dtype=jnp.float16)
    got = jax.jit(kernel, donate_argnums=0)(p)
    assert got.dtype == jnp.bfloat16
    np.testing.assert_array_equal(np.asarray(got, np.float32), np.arange(8) * 2.0)
