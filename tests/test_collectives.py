"""Sharding annotations and one-process collectives (translate/collectives.py) against
jax.jit: ``with_sharding_constraint`` and ``shard_map`` over a one-device mesh, whose
collectives have groups of one; a program for several processes compiles and, outside an
MPI job, refuses to run, naming the command to launch (``tests/test_mpi.py`` runs such
programs under mpirun)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

import hlo2dace
from hlo2dace.errors import JobSizeError

from util import ALL_DTYPES, assert_matches_jax, dtype_id

MESH = jax.make_mesh((1,), ("x",), axis_types=(AxisType.Auto,))


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=dtype_id)
def test_sharding_constraint_is_the_identity(dtype):
    def fun(x):
        return jax.lax.with_sharding_constraint(x, NamedSharding(MESH, P("x"))) + x

    x = np.arange(12).reshape(4, 3).astype(dtype)
    assert_matches_jax(fun, x)


def test_collectives_over_a_one_device_mesh():
    def per_shard(x, y):
        return {
            "psum": jax.lax.psum(x, "x"),
            "pmax": jax.lax.pmax(x, "x"),
            "all_gather": jax.lax.all_gather(x, "x", tiled=True),
            "psum_scatter": jax.lax.psum_scatter(x, "x", tiled=True),
            "all_to_all": jax.lax.all_to_all(x, "x", 0, 0, tiled=True),
            "ppermute": jax.lax.ppermute(y, "x", perm=[(0, 0)]),
            "axis_index": jax.lax.axis_index("x") + jnp.zeros(3, jnp.int32),
        }

    fun = jax.shard_map(per_shard, mesh=MESH, in_specs=(P("x"), P()), out_specs=P(),
                        check_vma=False)
    x = np.linspace(-2.0, 5.0, 8, dtype=np.float32)
    y = np.arange(6, dtype=np.int32).reshape(2, 3)
    assert_matches_jax(fun, x, y)


MODULE = """
func.func @main(%x: tensor<4xf32>) -> tensor<4xf32> {{
  %0 = "stablehlo.all_reduce"(%x) <{{replica_groups = dense<{groups}> : tensor<{shape}xi64>}}> ({{
  ^bb0(%a: tensor<f32>, %b: tensor<f32>):
    %s = stablehlo.add %a, %b : tensor<f32>
    stablehlo.return %s : tensor<f32>
  }}) : (tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}}
"""

PERMUTE = """
func.func @main(%x: tensor<3xi32>) -> tensor<3xi32> {{
  %0 = "stablehlo.collective_permute"(%x) <{{
      channel_handle = #stablehlo.channel_handle<handle = 1, type = 1>,
      source_target_pairs = dense<{pairs}> : tensor<{shape}xi64>}}>
      : (tensor<3xi32>) -> tensor<3xi32>
  return %0 : tensor<3xi32>
}}
"""


def test_group_of_one_runs_and_larger_groups_need_an_mpi_job():
    x = np.array([1.0, -2.0, 3.5, 0.0], np.float32)
    single = hlo2dace.compile_text(MODULE.format(groups="[[0]]", shape="1x1"))
    np.testing.assert_array_equal(single(x), x)
    pair = hlo2dace.compile_text(MODULE.format(groups="[[0, 1]]", shape="1x2"))
    with pytest.raises(JobSizeError, match=r"runs on 2 processes .* `mpirun -n 2 "):
        pair(x)


def test_collective_permute_without_a_source_gives_zeros():
    x = np.array([4, 5, 6], np.int32)
    kept = hlo2dace.compile_text(PERMUTE.format(pairs="[[0, 0]]", shape="1x2"))
    np.testing.assert_array_equal(kept(x), x)
    dropped = hlo2dace.compile_text(PERMUTE.format(pairs="", shape="0x2"))
    np.testing.assert_array_equal(dropped(x), np.zeros(3, np.int32))
    shifted = hlo2dace.compile_text(PERMUTE.format(pairs="[[0, 1]]", shape="1x2"))
    with pytest.raises(JobSizeError, match="mpirun -n 2"):
        shifted(x)
