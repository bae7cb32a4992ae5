"""IR -> SDFG. Importing this package registers every op family with the registry."""

from . import control, elementwise, indexing, linalg, reduction, shape  # noqa: F401  (registration)
from .builder import Builder
from .registry import supported_ops

__all__ = ["Builder", "supported_ops"]
