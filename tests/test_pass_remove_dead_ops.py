"""The remove_dead_ops pass: ops nothing reads are dropped (what other passes leave: the
multiply that fold_scale_into_products folds into a product)."""

from pass_util import planned

MODULE = """
    func.func @main(%s: tensor<f32>, %a: tensor<64x64xf32>) -> tensor<64x64xf32> {
      %0 = stablehlo.broadcast_in_dim %s, dims = [] : (tensor<f32>) -> tensor<64x64xf32>
      %1 = stablehlo.multiply %0, %a : tensor<64x64xf32>
      %2 = stablehlo.dot_general %1, %a, contracting_dims = [1] x [0]
        : (tensor<64x64xf32>, tensor<64x64xf32>) -> tensor<64x64xf32>
      return %2 : tensor<64x64xf32>
    }"""


def test_what_a_fold_leaves_is_dropped():
    folded = ("choose_product_kernels", "fold_scale_into_products")
    kept = planned(MODULE, *folded, tidy=False)
    assert "%1 = stablehlo.multiply(%0, %arg1)" in kept
    assert "%0 = stablehlo.broadcast_in_dim(%arg0)" in kept
    assert "multiply" not in planned(MODULE, *folded)
    assert "broadcast" not in planned(MODULE, *folded)
