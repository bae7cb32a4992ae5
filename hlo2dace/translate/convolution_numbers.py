"""The geometry of a convolution: its dimension numbers, window and groups, the sizes they
imply, and C++ for where a window's taps fall in the padded, dilated lhs (what the
convolution's kernels and the plan's choice between them read)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from .. import ir
from .cpp import on_grid


@dataclass(frozen=True)
class Convolution:
    """The dimension numbers, window and groups of a convolution, and the sizes they imply.
    Spatial tuples are in the order of the dimension numbers' spatial lists."""

    lhs_shape: tuple[int, ...]
    kernel_shape: tuple[int, ...]
    out_shape: tuple[int, ...]
    lhs_batch: int
    lhs_feature: int
    lhs_spatial: tuple[int, ...]
    kernel_in: int
    kernel_out: int
    kernel_spatial: tuple[int, ...]
    out_batch: int
    out_feature: int
    out_spatial: tuple[int, ...]
    strides: tuple[int, ...]
    low: tuple[int, ...]
    lhs_dilation: tuple[int, ...]
    rhs_dilation: tuple[int, ...]
    reversal: tuple[bool, ...]
    feature_groups: int
    batch_groups: int

    @classmethod
    def of(cls, op: ir.Op, padding: object = None) -> Convolution:
        """``padding``: the (rank, 2) padding array, if not the op's attribute."""
        numbers = op.attr("dimension_numbers").fields
        lhs, kernel = op.operands[:2]
        rank = len(numbers["input_spatial_dimensions"])

        def ints(name, default):
            value = op.attr(name)
            if value is None:
                return (default,) * rank
            if isinstance(value, ir.DenseElements):
                value = value.array.reshape(-1)
            return tuple(type(default)(v) for v in value)

        if padding is None and op.attr("padding") is not None:
            padding = op.attr("padding").array
        low = (tuple(int(p) for p in np.reshape(padding, (rank, 2))[:, 0])
               if padding is not None else (0,) * rank)
        return cls(
            tuple(lhs.type.shape), tuple(kernel.type.shape), tuple(op.result.type.shape),
            int(numbers["input_batch_dimension"]), int(numbers["input_feature_dimension"]),
            tuple(int(d) for d in numbers["input_spatial_dimensions"]),
            int(numbers["kernel_input_feature_dimension"]),
            int(numbers["kernel_output_feature_dimension"]),
            tuple(int(d) for d in numbers["kernel_spatial_dimensions"]),
            int(numbers["output_batch_dimension"]), int(numbers["output_feature_dimension"]),
            tuple(int(d) for d in numbers["output_spatial_dimensions"]),
            ints("window_strides", 1), low, ints("lhs_dilation", 1), ints("rhs_dilation", 1),
            ints("window_reversal", False), int(op.attr("feature_group_count", 1)),
            int(op.attr("batch_group_count", 1)))

    @property
    def rank(self) -> int:
        return len(self.lhs_spatial)

    @property
    def window(self) -> tuple[int, ...]:
        return tuple(self.kernel_shape[d] for d in self.kernel_spatial)

    @property
    def groups(self) -> int:
        return max(self.feature_groups, self.batch_groups)

    @property
    def group_in(self) -> int:
        """Input features per group (the kernel's input feature dimension)."""
        return self.kernel_shape[self.kernel_in]

    @property
    def group_out(self) -> int:
        return self.kernel_shape[self.kernel_out] // self.groups

    @property
    def depth(self) -> int:
        """Products summed into one result element."""
        return math.prod(self.window) * self.group_in

    @property
    def rows(self) -> int:
        """Result rows: batch times output positions."""
        return self.out_shape[self.out_batch] * math.prod(self.out_shape[d]
                                                          for d in self.out_spatial)

    def row_dims(self) -> list[tuple[str, int, int]]:
        """The result's row dimensions, batch and spatial, in the order the result lays them
        out (so that rows are single-strided wherever its layout allows): (C++ name, size,
        dimension)."""
        dims = [("__n", self.out_batch)] + [(f"__p{d}", dim)
                                            for d, dim in enumerate(self.out_spatial)]
        return [(name, self.out_shape[dim], dim) for name, dim in sorted(dims, key=lambda n: n[1])]

    def lhs_group_stride(self, lhs_strides: Sequence[int]) -> int:
        """How far the lhs (its elements ``lhs_strides`` apart) moves from one group to the
        next."""
        if self.batch_groups > 1:
            return self.out_shape[self.out_batch] * lhs_strides[self.lhs_batch]
        return self.group_in * lhs_strides[self.lhs_feature] if self.feature_groups > 1 else 0

    def position(self, d: int, out: str, tap: str) -> str:
        """C++ for where tap ``tap`` of spatial dimension ``d`` of the window at output
        position ``out`` falls in the padded, dilated lhs."""
        if self.reversal[d]:
            tap = f"({self.window[d] - 1} - {tap})"
        return (f"(int64_t){out} * {self.strides[d]}LL + {tap} * {self.rhs_dilation[d]}LL"
                f" - ({self.low[d]}LL)")

    def valid(self, d: int, q: str) -> str:
        """C++: whether position ``q`` of spatial dimension ``d`` holds an lhs element (not
        padding, not a dilation hole)."""
        size, dilation = self.lhs_shape[self.lhs_spatial[d]], self.lhs_dilation[d]
        return on_grid(q, size, dilation)

    def lhs_offset(self, d: int, q: str, lhs_strides: Sequence[int]) -> str:
        """C++: the lhs offset of the valid position ``q`` of spatial dimension ``d``."""
        index = q if self.lhs_dilation[d] == 1 else f"({q} / {self.lhs_dilation[d]}LL)"
        return f"{index} * {lhs_strides[self.lhs_spatial[d]]}LL"
