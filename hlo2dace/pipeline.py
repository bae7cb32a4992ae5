"""The passes of one compilation, in the order they run, per target and optimisation level:
how hlo2dace optimises a program, as one list (as XLA's ``cpu_compiler.cc`` is a list of
``AddPass`` calls).

Three stages run passes (``plan/passes.py``):

* ``plan``: IR to IR, after the frontend and before translation; each pass records its
  decisions on the ops (``plan/annotations.py``), which ``Lowered.as_planned_text()``
  shows, and the translators lower each op as its annotations say;
* ``sdfg``: the built SDFG, before DaCe generates its code;
* ``code``: DaCe's generated C++ (what no SDFG property can say: see ``cpp_split.py``).

``optimize="none"`` runs no pass: one op, one translator, every value in an array, the
plain lowering to compare against and to start one's own transformations from. Any pass
can be switched off by name (``hlo2dace.jit(f, disable_passes=[...])``, ``hlo2dace passes
--disable NAME``), for A/B measurements. The pipeline is part of a binary's cache key.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from . import cuda_toolchain, ir
from .errors import ArgumentError
from .machine import Machine, current_machine
from .optimize import Level
from .plan import fusion, loops, matvec, products, readers, updates
from .plan.passes import STAGES, Pass, PassContext, block_pass, remove_dead_ops
from .sdfg_build import CODE_PASSES
from .sdfg_passes import buffers, device, registers, rows, threads, tiling


def cpu_passes(level: Level) -> list[Pass]:
    """The CPU target's passes at ``level``: none at ``none`` (the plain lowering)."""
    passes: list[Pass] = []
    if level.name == "none":
        return passes

    def add(name: str, stage: str, run, summary: str) -> None:
        passes.append(Pass(name, stage, run, summary))

    # plan: how each op is computed (IR to IR, decisions recorded as annotations)
    add("unroll_short_loops", "plan", block_pass(loops.unroll_short_loops),
        "a counted loop of a few trips of elementwise work becomes its trips' ops, which "
        "fuse into one map")
    add("outer_products_as_multiplies", "plan",
        block_pass(products.outer_products_as_multiplies),
        "a product without contraction becomes a multiply of broadcasts (h2d.outer_product)")
    add("pair_matvecs", "plan", block_pass(matvec.pair_matvecs),
        "two matrix-vector products of one large matrix read it once (h2d.paired_matvecs)")
    add("choose_product_kernels", "plan", block_pass(products.choose_product_kernels),
        "each product's and convolution's kernel: BLAS, loops, skinny gemms, few rows in "
        "registers, blocked gemv (h2d.kernel)")
    add("fold_scale_into_products", "plan", block_pass(products.fold_scale_into_products),
        "alpha * A @ B passes alpha to BLAS; alpha * A is never written (h2d.scaled_dot)")
    add("fuse_elementwise", "plan", fusion.fuse_elementwise,
        "elementwise ops of one shape in one map; cheap producers recomputed (h2d.fusion)")
    add("expensive_ops_alone", "plan", block_pass(fusion.expensive_ops_alone),
        "an expensive op of a map over short strided rows runs in a contiguous map of "
        "its own (h2d.own_map)")
    add("fuse_into_readers", "plan", block_pass(fusion.fuse_into_readers),
        "reshapes, gathers, concatenations, row reductions computed where read "
        "(h2d.computed_by_readers)")
    add("fuse_into_consumers", "plan", block_pass(fusion.fuse_into_consumers),
        "a reduction's, scatter's or sort's elementwise operand computed in its loops, a "
        "lazy gather's where it gathers (h2d.fused_operands)")
    add("contract_multiply_adds", "plan", block_pass(fusion.contract_multiply_adds),
        "a * b + c as one fused multiply-add, where XLA contracts it (h2d.contract)")
    add("partial_sorts", "plan", block_pass(readers.partial_sorts),
        "a sort keeps only the prefix its readers slice (h2d.read_prefix)")
    add("result_destinations", "plan", updates.result_destinations,
        "results computed straight into the function's result arrays (h2d.destinations)")
    add("update_in_place", "plan", block_pass(updates.update_in_place),
        "an update writes its dead operand's array (h2d.in_place)")
    add("loop_buffers", "plan", block_pass(updates.loop_buffers),
        "a loop runs in its dead initial values' arrays (h2d.in_place)")
    add("carries_in_place", "plan", block_pass(updates.carries_in_place),
        "a loop body's elementwise map writes the carries it alone reads in place "
        "(h2d.carries_in_place)")
    add("swap_loop_buffers", "plan", updates.swap_loop_buffers,
        "a counted loop's large stencil-like carries alternate between two buffers "
        "(h2d.swapped_carries)")
    add("skip_replaced_windows", "plan", block_pass(updates.skip_replaced_windows),
        "a scatter's copy skips the boxes later .sets replace (h2d.replaced_later)")
    add("scatter_per_window", "plan", block_pass(updates.scatter_per_window),
        "max pooling's gradient (a select_and_scatter of disjoint windows) selects once "
        "per window (h2d.scatter_per_window)")
    add("remove_dead_ops", "plan", block_pass(remove_dead_ops),
        "ops nothing reads are dropped")
    # sdfg: the loop nests of the built SDFG's maps
    add("tile_transposing", "sdfg", tiling.tile_transposing,
        "maps that transpose a large array run in tiles that stay in L1")
    add("collapse_short_rows", "sdfg", rows.collapse_short_rows,
        "short innermost loops merged with the loop around them")
    add("interchange_tiny_rows", "sdfg", rows.interchange_tiny_rows,
        "tiny innermost loops run outside a long one, vectorised with strides")
    add("share_leading_loops", "sdfg", threads.share_leading_loops,
        "short outer loops of a parallel map collapsed until every thread has work")
    add("zero_d_values_in_registers", "sdfg", registers.zero_d_values_in_registers,
        "0-d values that one state computes and reads live in registers, not memory")
    add("reuse_transients", "sdfg", buffers.reuse_transients,
        "transients of one shape never live at once share one array (liveness in program "
        "order)")
    # code: DaCe's C++ (what no SDFG property says)
    add("outline_repeated_maps", "code", CODE_PASSES["outline_repeated_maps"],
        "map scopes that repeat compiled once, as functions")
    add("transient_arena", "code", CODE_PASSES["transient_arena"],
        "arrays never live at once share the bytes of one allocation (largest first, as "
        "XLA's heap simulator)")
    add("independent_loops", "code", CODE_PASSES["independent_loops"],
        "#pragma GCC ivdep on loops whose iterations are independent")
    add("restrict_state_pointers", "code", CODE_PASSES["restrict_state_pointers"],
        "the program's arrays read through __restrict__ locals")
    return passes


def cuda_passes(level: Level) -> list[Pass]:
    """The cuda target's passes at ``level``: the CPU's plan passes that decide what is
    computed together and where results live (not the product kernels, which are the
    CPU's BLAS calls and threads), then the placement on the GPU, which runs at every
    level, ``none`` included: it is the target, not an optimisation (docs/gpu.md)."""
    cpu = {p.name: p for p in cpu_passes(level)}
    names = ("unroll_short_loops", "outer_products_as_multiplies", "fuse_elementwise",
             "fuse_into_readers", "fuse_into_consumers", "contract_multiply_adds",
             "result_destinations", "update_in_place", "loop_buffers", "carries_in_place",
             "swap_loop_buffers", "skip_replaced_windows", "scatter_per_window",
             "remove_dead_ops")
    passes = [cpu[name] for name in names if name in cpu]
    passes.append(Pass("to_device", "sdfg", device.to_device,
                       "tasklets checked for host-only code, then DaCe's GPU "
                       "transformation: maps as GPU kernels, arrays in GPU memory"))
    return passes


#: each target's passes, by level
TARGETS = {"cpu": cpu_passes, "cuda": cuda_passes}
#: what a target's binaries depend on besides their code, for the cache key
TARGET_KEYS = {"cpu": lambda: "", "cuda": cuda_toolchain.key}
#: what a target's build needs around it (the CPU's: DaCe as hlo2dace configures it)
BUILD_ENVIRONMENTS = {"cpu": contextlib.nullcontext,
                      "cuda": cuda_toolchain.build_environment}


@dataclass(frozen=True)
class Pipeline:
    """The passes a compilation runs: a target's at a level, less the ``disabled`` ones."""

    target: str
    level: Level
    passes: tuple[Pass, ...]
    disabled: frozenset[str] = frozenset()

    def stage(self, stage: str) -> list[Pass]:
        """The passes of ``stage`` that run, in order."""
        return [p for p in self.passes if p.stage == stage and p.name not in self.disabled]

    @property
    def key(self) -> str:
        """What the pipeline adds to a binary's cache key: the passes that run, and for a
        target other than the CPU (whose keys stay what they were) the target and what
        its binaries depend on (``TARGET_KEYS``: the GPU architecture, the toolchain)."""
        names = ",".join(p.name for p in self.passes if p.name not in self.disabled)
        toolchain = TARGET_KEYS[self.target]()
        return f"{self.target}[{toolchain}]:{names}" if toolchain else names

    def plan(self, module: ir.Module, context: PassContext) -> ir.Module:
        for step in self.stage("plan"):
            module = step.run(module, context)
        return module

    def transform(self, sdfg: Any, context: PassContext) -> None:
        for step in self.stage("sdfg"):
            step.run(sdfg, context)

    def build_environment(self) -> contextlib.AbstractContextManager:
        """The context the target's build runs in (the cuda target's: DaCe and CMake
        pointed at the CUDA toolchain, ``cuda_toolchain.build_environment``)."""
        return BUILD_ENVIRONMENTS[self.target]()

    @property
    def code_passes(self) -> frozenset[str]:
        return frozenset(p.name for p in self.stage("code"))

    def listing(self) -> str:
        """The pipeline as text: per stage, each pass and what it does."""
        lines = [f"target {self.target}, optimize={self.level.name}"]
        for stage in STAGES:
            lines.append(f"  {stage}:")
            found = [p for p in self.passes if p.stage == stage]
            for p in found:
                state = " (disabled)" if p.name in self.disabled else ""
                lines.append(f"    {p.name}{state}: {p.summary}")
            if not found:
                lines.append("    (none)")
        return "\n".join(lines) + "\n"


def pipeline(target: str = "cpu", level: Level | None = None,
             disable: Sequence[str] = ()) -> Pipeline:
    """The pipeline of ``target`` at ``level`` (default: ``optimize.level()``) without the
    passes named in ``disable`` (an ``ArgumentError`` names an unknown one)."""
    from .optimize import level as default_level

    if target not in TARGETS:
        raise ArgumentError(f"unknown target {target!r}; the targets are {', '.join(TARGETS)}")
    level = level or default_level()
    passes = tuple(TARGETS[target](level))
    known = {p.name for p in TARGETS[target](default_level("default"))}
    unknown = sorted(set(disable) - known)
    if unknown:
        raise ArgumentError(f"no pass named {', '.join(unknown)}; the passes of the {target} "
                            f"target are {', '.join(sorted(known))} (hlo2dace passes lists "
                            "them)")
    return Pipeline(target, level, passes, frozenset(disable))


@dataclass(frozen=True)
class Options:
    """How one module is compiled: the optimisation level's name (None:
    ``$HLO2DACE_OPTIMIZE``, else ``default``), the passes switched off, the machine model
    the code is tuned for (None: this machine's), the target, and a user's transformation
    of the SDFG after the pipeline's passes (``user_sdfg.py``; at ``none``, of the plain
    lowering)."""

    optimize: str | None = None
    disable_passes: tuple[str, ...] = ()
    machine: Machine | None = None
    target: str = "cpu"
    transform: Callable[[Any], Any] | None = None

    @classmethod
    def of(cls, given: Options | str | None) -> Options:
        """``given`` as options: a level's name, or None, stands for that level alone."""
        return given if isinstance(given, Options) else cls(given)

    def resolved(self) -> Options:
        """With the level, the pass names and the machine checked and filled in
        (``ArgumentError`` names a wrong one)."""
        from .optimize import level

        try:
            name = level(self.optimize).name
        except ValueError as exc:
            raise ArgumentError(str(exc)) from None
        disabled = (self.disable_passes,) if isinstance(self.disable_passes, str) \
            else tuple(self.disable_passes)
        if self.transform is not None and not callable(self.transform):
            raise ArgumentError(f"transform must be a function of a dace.SDFG, not a "
                                f"{type(self.transform).__name__}")
        resolved = Options(name, disabled, self.machine or current_machine(), self.target,
                           self.transform)
        resolved.pipeline()  # checks the target and the names
        return resolved

    def pipeline(self) -> Pipeline:
        from .optimize import level

        return pipeline(self.target, level(self.optimize), self.disable_passes)

    def context(self, entry: str | None = None) -> PassContext:
        from .optimize import level

        return PassContext(self.machine or current_machine(), self.target,
                           level(self.optimize), entry)
