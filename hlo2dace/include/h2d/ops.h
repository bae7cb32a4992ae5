// StableHLO elementwise semantics in C++, as XLA computes them on the CPU (where XLA and
// the StableHLO spec disagree, XLA wins: tests/test_elementwise.py compares with jax.jit),
// by topic: every generated program includes this header (precompiled once per compiler
// flag set with DaCe's own, runtime/build.py).
#pragma once

#include "core.h"
#include "floats.h"
#include "complex.h"
#include "arithmetic.h"
#include "bits.h"
#include "rounding.h"
#include "scans.h"
#include "transcendental.h"
#include "conversion.h"
#include "products.h"
