"""The contract_multiply_adds pass: a product added to something is one fused multiply-add,
where XLA's CPU code contracts it."""


from pass_util import check_pass, expect, operands, planned

MODULE = """
    func.func @main(%a: tensor<8xf32>, %b: tensor<8xf32>, %c: tensor<8xf32>)
        -> (tensor<8xf32>, tensor<8xf32>) {
      %0 = stablehlo.multiply %a, %b : tensor<8xf32>
      %1 = stablehlo.subtract %c, %0 : tensor<8xf32>
      %2 = stablehlo.multiply %b, %c : tensor<8xf32>
      %3 = stablehlo.negate %2 : tensor<8xf32>
      %4 = stablehlo.add %3, %a : tensor<8xf32>
      %5 = stablehlo.add %2, %4 : tensor<8xf32>
      return %1, %5 : tensor<8xf32>, tensor<8xf32>
    }"""


def test_candidates_in_the_order_xla_tries_them():
    """``c - a*b`` contracts its product (subtracted); ``-(b*c) + a`` a negated product,
    shared with another reader (the lowering contracts it only where no other reader is
    in the same map); ``b*c + ...`` its product, shared too."""
    text = planned(MODULE, "fuse_elementwise", "contract_multiply_adds")
    lines = text.splitlines()
    assert "#h2d.contract<candidates = [[1, false, false]], subtract = true>" in lines[1]
    assert "#h2d.contract<candidates = [[0, true, true]], subtract = false>" in lines[4]
    assert "#h2d.contract<candidates = [[0, false, true]], subtract = false>" in lines[5]
    assert "contract" not in lines[0] + lines[2] + lines[3]


def test_only_fused_ops_contract():
    assert "contract" not in planned(MODULE, "contract_multiply_adds")


def test_f16_and_integers():
    text = planned("""
        func.func @main(%a: tensor<8xi32>, %b: tensor<8xi32>) -> tensor<8xi32> {
          %0 = stablehlo.multiply %a, %b : tensor<8xi32>
          %1 = stablehlo.add %0, %a : tensor<8xi32>
          return %1 : tensor<8xi32>
        }""", "fuse_elementwise", "contract_multiply_adds")
    assert "contract" not in text
    assert text == expect("""
        %0 = stablehlo.multiply(%arg0, %arg1) {h2d.fusion = #h2d.fusion<group = 0>}
        %1 = stablehlo.add(%0, %arg0) {h2d.fusion = #h2d.fusion<group = 0>}
        func.return(%1)
        """)


def test_contracted_as_xla_contracts():
    """With the pass, XLA's bits (its single rounding); without, the product's rounding
    apart (relative to the product: the difference may cancel)."""
    a, b, c = operands((512,), (512,), (512,))
    check_pass("contract_multiply_adds", lambda a, b, c: (c - a * b, -(b * c) + a), a, b, c,
               without={"atol": 1e-6})
