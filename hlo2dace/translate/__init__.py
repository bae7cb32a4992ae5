"""IR -> SDFG. Importing this package registers every op family with the registry, and
hlo2dace's implementations of DaCe's library nodes with DaCe."""

from . import (  # noqa: F401  (registration)
    collectives,
    control,
    convolution,
    cuda,
    custom_call,
    elementwise,
    expansions,
    fft,
    indexing,
    lapack,
    linalg,
    matvec,
    reduction,
    rng,
    shape,
    sorting,
)
from .builder import Builder
from .registry import supported_ops

cuda.register_rules()  # after every family: the cuda target's rule for each

__all__ = ["Builder", "supported_ops"]
