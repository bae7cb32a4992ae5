"""The build of an SDFG (hlo2dace/sdfg_build.py, hlo2dace/cpp_split.py): the program split
into translation units gives the same bits as one file, validation runs when asked, and
the cache keeps the program's signature."""

import re

import dace
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import hlo2dace
from hlo2dace import cpp_split, runtime, sdfg_build, sdfg_repeats

from util import assert_arrays_match


def layers(x, w):
    """Products, reductions and the vectorised transcendental functions (whose results
    depend on whether GCC vectorises a loop: libmvec and libm differ in the last bits)."""
    for k in range(3):
        h = jnp.tanh(x @ w + k) * jnp.exp(-jnp.abs(x)) + jnp.log1p(jnp.abs(x))
        x = h - jnp.max(h, axis=-1, keepdims=True) / (1 + jnp.sum(h * h, axis=0))
    return x, jnp.sin(x).sum()


def stepped(x, w):
    """A program whose control flow is loops (a for loop, a while loop) between maps."""
    x = jnp.tanh(x @ w)
    x = jax.lax.fori_loop(0, 3, lambda i, c: jnp.sin(c) * 0.5 + c @ w / 8, x)
    x = jax.lax.while_loop(lambda c: c[1] < 2, lambda c: (jnp.cos(c[0]) + 1, c[1] + 1),
                           (x, 0))[0]
    return x, jnp.exp(-x).sum()


@pytest.mark.parametrize("function", [layers, stepped])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_parts_compute_the_same_bits_as_one_file(private_cache, monkeypatch, dtype,
                                                 function):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((48, 40)).astype(dtype)
    w = rng.standard_normal((40, 40)).astype(dtype) / 8
    results = {}
    for parts in (1, 4):
        monkeypatch.setattr(runtime.cache, "_loaded", {})
        monkeypatch.setenv("HLO2DACE_CACHE_DIR", str(private_cache / str(parts)))
        monkeypatch.setattr(cpp_split, "MIN_PART_CHARS", 1)
        monkeypatch.setattr(cpp_split, "MAX_PARTS", parts)
        compiled = hlo2dace.jit(function).lower(x, w).compile()
        sources = list((compiled.program.folder / "build" / "src" / "cpu").glob("*.cpp"))
        assert len(sources) == (1 if parts == 1 else parts + 1)
        results[parts] = [np.asarray(r) for r in compiled(x, w)]
    for one, split in zip(results[1], results[4]):
        assert one.tobytes() == split.tobytes()


PRELUDE = "#include <cmath>\nstruct p_state_t { float* a; };\n"
SIGNATURE = "void __program_p_internal(p_state_t*__state, float * __restrict__ x, int n)\n"


def program(body: str) -> str:
    return (f"{PRELUDE}{SIGNATURE}{{\n{body}\n}}\n\n"
            "DACE_EXPORTED void __program_p(p_state_t *__state, float * __restrict__ x, int n)"
            "\n{\n    __program_p_internal(__state, x, n);\n}\n")


def test_split_cuts_between_blocks_and_calls_the_parts_in_order():
    blocks = ['{ x[0] = 1; /* } */ }', '{ { x[1] = \'}\'; } { x[2] = n; } }',
              '{ const char* s = "{"; x[3] = s[0]; // }\n }', '{ x[4] = 4; }']
    split = cpp_split.split(program("\n".join(blocks)), "p", parts=3)
    assert split is not None and len(split.parts) == 3
    for k, part in enumerate(split.parts):
        assert part.startswith(PRELUDE)
        assert f"__h2d_part{k}_p(p_state_t*__state, float * __restrict__ x, int n)" in part
        assert f"    __h2d_part{k}_p(__state, x, n);" in split.main
    # the inner blocks of a block of blocks (a state) are cut apart, in their order
    statements = "".join(split.parts)
    order = [statements.index(f"x[{k}] =") for k in range(5)]
    assert order == sorted(order)
    assert split.main.count("__program_p_internal(__state, x, n);") == 1  # the entry


@pytest.mark.parametrize("cores, parts", [(1, 0), (2, 2), (8, 2)])
def test_programs_of_tens_of_kilobytes_are_split_for_the_cores(monkeypatch, cores, parts):
    """A body of 85,000 characters is one file on one core (each part would parse the
    prelude again) and a part per 40,000 characters where cores would otherwise idle
    (NPBench's resnet compiled in 1.46 s as one file, 1.00 s as two parts on two cores)."""
    monkeypatch.setattr(cpp_split, "_cores", lambda: cores)
    body = "\n".join(f"{{ x[{k}] = n * 2; /*{'.' * 8_000}*/ }}" for k in range(10))
    split = cpp_split.split(program(body), "p")
    assert (0 if split is None else len(split.parts)) == parts


@pytest.mark.parametrize("body", [
    "int i = 0;\n{ x[i] = 1; }\n{ x[1] = 2; }",      # a local that two parts would share
    "{ x[0] = 1; goto done; }\n{ done: x[1] = 2; }",  # a jump between parts
    "int i;\nfor (i = 0; i < n; ++i) { x[i] = 1; }\n{ x[i] = 2; }",  # i read after
    "if (n > 2) { x[0] = 1; } else x[0] = 2;",      # a branch that is not a block
    # two blocks alike, which would be compiled once, reading the counter of a loop
    "int i;\nfor (i = 0; i < n; ++i) { x[i] = 1; }\n"
    + "\n".join(["{ x[0] = x[i] * 2; /*" + "." * 400 + "*/ }"] * 2),
])
def test_split_leaves_one_file_where_parts_would_share_locals_or_labels(body):
    assert cpp_split.split(program(body), "p", parts=2) is None


def test_loops_and_conditionals_are_split_with_their_counters():
    """A loop or conditional of the program's control flow is a statement of a part, the
    declaration of its counter in the part that runs it."""
    body = ("int64_t v__it_1;\nint64_t v__it_2;\n{ x[0] = 1; }\n"
            "for (v__it_1 = 0; (v__it_1 < n); v__it_1 = (v__it_1 + 1)) { { x[v__it_1] += 1; } }\n"
            "if (n > 3) { x[1] = 2; } else if (n > 2) { x[1] = 3; } else { x[1] = 4; }\n"
            "while ((x[0] < 10)) { x[0] *= 2; }\n"
            "for (v__it_2 = 0; (v__it_2 < 2); v__it_2 = (v__it_2 + 1)) { x[2] += v__it_2; }")
    split = cpp_split.split(program(body), "p", parts=5)
    assert split is not None and len(split.parts) >= 3
    statements = ["x[0] = 1;", "for (v__it_1 = 0;", "if (n > 3)", "while ((x[0] < 10))",
                  "for (v__it_2 = 0;"]
    where = [[k for k, part in enumerate(split.parts) if s in part] for s in statements]
    assert all(len(w) == 1 for w in where) and where == sorted(where)
    for counter in ("v__it_1", "v__it_2"):  # declared once, in the part of its loop
        holding = [part for part in split.parts if f"int64_t {counter};" in part]
        assert len(holding) == 1
        assert holding[0].index(f"int64_t {counter};") < holding[0].index(f"for ({counter}")
    assert "else if (n > 2) { x[1] = 3; } else { x[1] = 4; }" in "".join(split.parts)


STATE = ("struct p_state_t {\n    float * __restrict__ __0_a;\n    double * __restrict__ __0_b;\n"
         "    int * __restrict__ __0_c;\n    int * __restrict__ __0_d;\n"
         "    bool * __restrict__ __0_m;\n    bool * __restrict__ __0_n;\n};\n")


def test_state_pointers_are_read_through_restricted_locals():
    code = (STATE + "void helper(p_state_t *__state) { __state->__0_d[0] = 1; }\n"
            + SIGNATURE + "{\n{ for (int i = 0; i < n; ++i) __state->__0_a[i] = "
            "__state->__0_b[i] + x[i]; }\n{ int* p = &__state->__0_a[0]; (void)p; }\n"
            "{ __state->__0_c = 0; __state->__0_d[1] = 2; }\n"
            "{ for (int i = 0; i < n; ++i) __state->__0_m[i] = !__state->__0_m[i]; }\n"
            "{ bool* q = &__state->__0_n[0]; __state->__0_n[1] = q[0]; }\n}\n"
            "DACE_EXPORTED p_state_t *__dace_init_p(int n)\n{\n"
            "    auto __state = new p_state_t;\n    __state->__0_a = new float[n];\n"
            "    return __state;\n}\n")
    internal = cpp_split.restrict_state_pointers(code, ["__program_p_internal"])
    body = internal[internal.index(SIGNATURE):internal.index("DACE_EXPORTED")]
    assert "float * __restrict__ const __h2d___0_a = __state->__0_a;" in body
    assert "double * __restrict__ const __h2d___0_b = __state->__0_b;" in body
    assert "__h2d___0_a[i] = __h2d___0_b[i] + x[i]" in body
    assert "&__h2d___0_a[0]" in body  # an element's address is the local's
    # a bool array only indexed is read and written as bytes (GCC vectorises those)
    assert ("uint8_t * __restrict__ const __h2d___0_m = reinterpret_cast<uint8_t *>"
            "(__state->__0_m);") in body
    assert "__h2d___0_m[i] = !__h2d___0_m[i]" in body
    # one whose element's address is taken keeps its type, as the pointer it fills
    assert "bool * __restrict__ const __h2d___0_n = __state->__0_n;" in body
    # assigned in the function, or reached by another function: left as they are
    assert "__state->__0_c = 0" in body and "__state->__0_d[1] = 2" in body
    assert "__h2d___0_c" not in body and "__h2d___0_d" not in body
    assert "__state->__0_a = new float[n]" in internal  # the allocation is DaCe's
    assert cpp_split.restrict_state_pointers(internal[len(STATE):], ["x"]) == \
        internal[len(STATE):]  # no state struct: nothing to do


@pytest.mark.pipeline
def test_loops_over_program_arrays_vectorise(private_cache):
    """A map that reads two arrays the program keeps (here carried through a loop) and
    writes a third reaches them through restricted locals."""
    x = np.linspace(0, 1, 4096)

    def loop(x):  # more trips than unroll_short_loops unrolls
        return jax.lax.fori_loop(0, 12, lambda i, c: (c[0] * c[1] + 1, c[1] - c[0]), (x, x))

    compiled = hlo2dace.jit(loop).lower(x).compile()
    source, = (compiled.program.folder / "build" / "src" / "cpu").glob("*.cpp")
    code = source.read_text()
    assert "__restrict__ const __h2d___0_" in code
    start = code.index("_internal(")
    internal = code[start:code.index("DACE_EXPORTED", start)]
    assert internal.count("__state->") == internal.count("= __state->")  # declarations only
    # bit for bit: c0 * c1 + 1 is one fused multiply-add in both (fusion.contraction)
    assert_arrays_match(jax.jit(loop)(x), compiled(x))


def test_validation_runs_in_tests_and_debug_mode_only(private_cache, monkeypatch):
    calls = []
    monkeypatch.setattr(dace.SDFG, "validate", lambda self, *a, **k: calls.append(self.name))
    x = np.arange(5.0)
    for k, setting in enumerate(["0", "1"]):
        monkeypatch.setenv(sdfg_build.VALIDATE_OPTION, setting)
        hlo2dace.jit(lambda x, k=k: x * 3 + k).lower(x).compile()
        assert len(calls) == k


def test_debug_logging_turns_validation_on(monkeypatch):
    import logging

    monkeypatch.setenv(sdfg_build.VALIDATE_OPTION, "0")
    logger = logging.getLogger("hlo2dace")
    saved = logger.level
    try:
        logger.setLevel(logging.INFO)
        assert not sdfg_build.validating()
        logger.setLevel(logging.DEBUG)
        assert sdfg_build.validating()
    finally:
        logger.setLevel(saved)


@pytest.mark.filterwarnings("ignore:Library .* already loaded")  # loaded twice on purpose
def test_the_cache_keeps_the_signature_of_the_program(private_cache):
    x = np.arange(6.0).reshape(2, 3)
    compiled = hlo2dace.jit(lambda x: (jnp.exp(x) + 1, x.sum())).lower(x).compile()
    saved = dace.SDFG.from_file(str(compiled.program.folder / "build" / "program.sdfgz"))
    assert sorted(saved.arrays) == ["__return0", "__return1", "arg0"]
    assert [len(state.nodes()) for state in saved.states()] == [0]
    expected = [r.tobytes() for r in compiled.program(x)]
    runtime.cache._loaded.clear()  # loaded again from the entry, as a new process would
    program = runtime.lookup(compiled.program.folder.name)
    assert program is not compiled.program
    assert [r.tobytes() for r in program(x)] == expected


SHARED_STATE = ("struct p_state_t {\n    float * __restrict__ __0_a;\n"
                "    float * __restrict__ __0_b;\n    double * __restrict__ __0_c;\n"
                "    double * __restrict__ __0_d;\n    bool * __restrict__ __0_m;\n"
                "    bool * __restrict__ __0_n;\n};\n")


def layer(source: str, target: str, local: str, note: str = "") -> str:
    """A block of more than ``MIN_SHARED_CHARS`` that reads ``source`` into ``target``
    through a register named ``local``."""
    steps = "\n".join(f"        {local} = {local} * 0.5f + {k}.0f;  // {note}"
                      for k in range(40))
    return (f"{{\n    for (int i = 0; i < n; ++i) {{\n        float {local};\n"
            f"        {local} = {source}[i];\n{steps}\n        {target}[i] = {local};\n"
            "    }\n}")


def test_a_block_that_repeats_on_other_arrays_is_compiled_once():
    blocks = [layer("x", "__state->__0_a", "s_1_2", "line 3"),
              layer("__state->__0_a", "__state->__0_b", "s_7_9", "line 8"),  # the same code
              layer("__state->__0_c", "__state->__0_d", "s_5_1"),  # the same text, doubles
              layer("__state->__0_d", "__state->__0_c", "s_6_1"),
              layer("__state->__0_a", "__state->__0_a", "s_3_3"),  # one array, not two
              layer("x", "x", "s_4_4"),  # a parameter or a field: an array either way
              "{ x[0] = 1.0f; }", "{ x[1] = 1.0f; }"]  # too small to share
    code = SHARED_STATE + program("\n".join(blocks))[len(PRELUDE):]
    split = cpp_split.split(code, "p", parts=1)
    assert split is not None and split.parts == ()
    main = split.main
    for k in range(3):
        assert main.count(f"void __h2d_shared{k}_p(") == 2  # declared, defined
    assert "__h2d_shared3_p" not in main
    body = main[main.index(SIGNATURE):]
    calls = ["__h2d_shared0_p(n, x, __state->__0_a);",
             "__h2d_shared0_p(n, __state->__0_a, __state->__0_b);",
             "__h2d_shared1_p(n, __state->__0_c, __state->__0_d);",
             "__h2d_shared1_p(n, __state->__0_d, __state->__0_c);",
             "__h2d_shared2_p(n, __state->__0_a);", "__h2d_shared2_p(n, x);",
             "x[0] = 1.0f;", "x[1] = 1.0f;"]
    order = [body.index(call) for call in calls]
    assert order == sorted(order)
    # a symbol's value is passed as it is; every array becomes a restricted local
    assert ("void __h2d_shared0_p(int __h2d_p0, float * __h2d_p1_field, "
            "float * __h2d_p2_field)") in main
    assert "float * __restrict__ const __h2d_p2 = __h2d_p2_field;" in main
    assert ("void __h2d_shared1_p(int __h2d_p0, double * __h2d_p1_field, "
            "double * __h2d_p2_field)") in main
    # the program's own function reads the fields through its restricted locals
    restricted = cpp_split.program_files(code, "p", parts=1).main
    assert "__h2d_shared0_p(n, __h2d___0_a, __h2d___0_b);" in restricted


@pytest.mark.parametrize("block", [
    "{ float* p = (float*)__state; p[0] = 1; }",   # the state itself
    "{ if (n > 3) return; }",                      # leaves the program's function
    "{ static int calls = 0; ++calls; }",           # one counter for every occurrence
    "{ __state->__0_e[0] = 1; }",                  # not one of the state's arrays
])
def test_blocks_that_cannot_move_into_a_function_stay(block):
    padded = block[:-1] + " /*" + "." * cpp_split.MIN_SHARED_CHARS + "*/ }"
    code = SHARED_STATE + program("\n".join([padded, padded]))[len(PRELUDE):]
    assert cpp_split.split(code, "p", parts=1) is None


def test_a_shared_block_reads_bool_arrays_it_only_indexes_as_bytes():
    block = ("{ for (int i = 0; i < n; ++i) { x[i] = __state->__0_m[i] ? 1.0f : x[i]; "
             "__state->__0_n[i] = !__state->__0_m[i]; } /*" + "." * 400 + "*/ }")
    other = block.replace("__0_m", "__0_q").replace("__0_n", "__0_m").replace("__0_q", "__0_n")
    code = SHARED_STATE + program(f"{block}\n{other}")[len(PRELUDE):]
    main = cpp_split.split(code, "p", parts=1).main
    assert ("uint8_t * __restrict__ const __h2d_p2 = reinterpret_cast<uint8_t *>"
            "(__h2d_p2_field);") in main
    assert "__h2d_shared0_p(n, x, __state->__0_n, __state->__0_m);" in main


@pytest.mark.pipeline
def test_an_outlined_scope_reads_bool_arrays_it_only_indexes_as_bytes(private_cache):
    """NPBench's mandelbrot2: a loop unrolled twice selects complex values by a carried
    mask, so its map is outlined (``sdfg_repeats``). The function reads the mask as
    bytes, as the program's own function does: with ``bool *`` parameters GCC 12
    vectorised no loop of it, and NPBench's program took 5x as long. (Its carries are
    swapped, not written in place, as before ``carries_in_place``: that is what repeats
    the map.)"""
    c = (np.linspace(-2, 0.5, 200)[:, None] + 1j * np.linspace(-1, 1, 200)[None, :]).ravel()

    def escape(c):
        def step(i, state):  # NPBench's body
            z, c, n, last, mask = state
            z = z * z + c
            out = (jnp.abs(z) > 2.0) & mask
            mask = mask & ~out
            return (jnp.where(mask, z, 0), c, jnp.where(out, i + 1, n),
                    jnp.where(out, z, last), mask)

        return jax.lax.fori_loop(0, 9, step, (jnp.zeros_like(c), c, jnp.zeros(c.shape, int),
                                               jnp.zeros_like(c), jnp.ones(c.shape, bool)))

    compiled = hlo2dace.jit(escape, disable_passes=("carries_in_place",)).lower(c).compile()
    folder = compiled.program.folder / "build" / "src" / "cpu"
    code = "".join(p.read_text() for p in folder.glob("*.cpp"))
    masked = [m for m in re.finditer(r"noinline\)\) void __h2d_repeat\w+\(([^)]*)\)\n\{", code)
              if "bool * __restrict__" in m.group(1)]
    assert masked, "the loop's map is outlined, with its masks"
    for definition in masked:
        body = code[definition.end():code.index("\n}\n", definition.end())]
        assert "= reinterpret_cast<uint8_t *>(" in body
    assert_arrays_match(jax.jit(escape)(c), compiled(c))


def repeated_layers(x, ws):
    """A model whose Python loop repeats a layer. Its operations are exact in vector and
    scalar code alike: GCC vectorises more loops of small functions than of one large
    one, and a transcendental function it vectorises is libmvec's, not libm's."""
    for w in ws:
        x = x + (x @ w) * jnp.maximum(x, 0)
        x = x / jnp.sqrt(jnp.mean(x * x, axis=-1, keepdims=True) + 1e-5)
    return x


@pytest.mark.pipeline
@pytest.mark.parametrize("variant", ["outlined", "shared"])
def test_repeated_layers_compute_the_same_bits_compiled_once(private_cache, monkeypatch,
                                                             variant):
    """The layers' maps are generated once (``sdfg_repeats``), or, where they are not,
    their C++ blocks are compiled once (``cpp_split._Sharing``): the bits of the program
    compiled with every map in place."""
    rng = np.random.default_rng(1)
    x = rng.standard_normal((16, 64)).astype(np.float32)
    ws = [rng.standard_normal((64, 64)).astype(np.float32) / 8 for _ in range(4)]
    outline = sdfg_repeats.outline
    results = {}
    for build in (variant, "plain"):
        monkeypatch.setattr(runtime.cache, "_loaded", {})
        monkeypatch.setenv("HLO2DACE_CACHE_DIR", str(private_cache / build))
        monkeypatch.setattr(sdfg_repeats, "outline",
                            outline if build == "outlined" else lambda sdfg: None)
        monkeypatch.setattr(cpp_split, "MIN_SHARED_CHARS", 400 if build == "shared" else 10 ** 9)
        compiled = hlo2dace.jit(repeated_layers).lower(x, ws).compile()
        code = "".join(p.read_text() for p in
                       (compiled.program.folder / "build" / "src" / "cpu").glob("*.cpp"))
        function = {"outlined": "__h2d_repeat", "shared": "__h2d_shared"}.get(build)
        if function is not None:
            defined = re.findall(rf"noinline\)\) void ({function}\w+)\([^;]*\n{{", code)
            assert defined and len(defined) == len(set(defined))  # each defined once
            assert all(code.count(f"{name}(") >= 4 for name in defined)  # called per layer
        else:
            assert "__h2d_repeat" not in code and "__h2d_shared" not in code
        results[build] = np.asarray(compiled(x, ws))
    assert results[variant].tobytes() == results["plain"].tobytes()
    # XLA (Eigen) and OpenBLAS sum the products in other orders
    assert_arrays_match(jax.jit(repeated_layers)(x, ws), results[variant], rtol=1e-4,
                        atol=1e-6)


def test_only_scopes_of_the_same_code_on_arrays_of_the_same_layout_are_outlined():
    """Two layers on 8 x 16 arrays share their maps; a third, the same code on 16 x 8
    arrays, does not; an SDFG with timers keeps every map."""
    rng = np.random.default_rng(2)
    x = rng.standard_normal((8, 16)).astype(np.float32)
    ws = [rng.standard_normal((16, 16)).astype(np.float32) for _ in range(2)]
    v = rng.standard_normal((8, 8)).astype(np.float32)

    def model(x, ws, v):
        return repeated_layers(repeated_layers(x, ws).T, [v])

    sdfg = hlo2dace.jit(model).lower(x, ws, v).as_sdfg()
    outlined = sdfg_repeats.outline(sdfg)
    assert outlined is not None and outlined.groups
    for occurrences, arguments in zip(outlined.groups, outlined.arguments()):
        assert len(occurrences) == 2
        shapes = {tuple(tuple(sdfg.arrays[name].shape) for name in scope.outer)
                  for scope in occurrences}
        assert len(shapes) == 1 and len(arguments) == len(occurrences[0].outer)
    for state in sdfg.states():
        state.instrument = dace.InstrumentationType.Timer
    assert sdfg_repeats.outline(sdfg) is None


def test_independent_loops_are_marked_for_the_vectoriser():
    """The loop around a tasklet that says its iterations are independent (a map whose
    short rows run as one loop and gather an operand) gets ``#pragma GCC ivdep``, once, or
    an OpenMP loop ``parallel for simd``; other loops keep their pragmas."""
    code = "\n".join([
        "for (int __i0 = 0; __i0 < 4; __i0 += 1) {",
        "    for (int __i1 = 0; __i1 < 60; __i1 += 1) {",
        "        {",
        "            double __o = __m0 * 2;",
        f"            {cpp_split.INDEPENDENT_ITERATIONS}",
        "        }",
        "    }",
        "}",
        "for (int __i0 = 0; __i0 < 4; __i0 += 1) {",
        "    __o[__i0] = 0;",
        "}",
        "#pragma omp parallel for",
        "for (int __i0 = 0; __i0 < 400; __i0 += 1) {",
        "    {",
        f"        {cpp_split.INDEPENDENT_ITERATIONS}",
        "    }",
        "}",
        "#pragma omp parallel for schedule(static)",
        "for (int __i0 = 0; __i0 < 400; __i0 += 1) {",
        f"    {cpp_split.INDEPENDENT_ITERATIONS}",
        "}"])
    marked = cpp_split.independent_loops(code).split("\n")
    assert marked.count("#pragma GCC ivdep") == 1
    assert marked.count("#pragma omp parallel for simd") == 1
    assert marked.count("#pragma omp parallel for simd schedule(static)") == 1
    assert marked[marked.index("#pragma GCC ivdep") + 1].strip().startswith(
        "for (int __i1 = 0;")
    assert cpp_split.independent_loops("\n".join(marked)) == "\n".join(marked)
