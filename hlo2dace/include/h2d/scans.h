// hlo2dace's C++ helpers: scans (cumulative reductions) in XLA's order.
// (Included through h2d/ops.h; each topic header builds on the one before it.)
#pragma once

#include "rounding.h"

namespace h2d {

// ------------------------------------------------------------------ scans
// A scan (a reduce_window whose window spans its dimension: cumsum, cumprod...) as XLA
// computes it: one of up to 16 elements folds each output's window in index order (from
// the init value; `forward` false: the elements from the output's on); a longer one is
// rewritten by XLA's ReduceWindowRewriter into scans of blocks of 16 (the last padded
// with the init value), a scan of the blocks' totals (the same way, recursively), and
// the body applied to an element's block scan and the totals before its block. Each body
// application is XLA's, so each rounding is too.
constexpr int64_t kScanBlock = 16;
// The scratch `xla_scan` needs for n elements per lane (in elements per lane).
H2D_FN inline int64_t xla_scan_scratch(int64_t n) {
    if (n <= kScanBlock) return 0;
    const int64_t blocks = (n + kScanBlock - 1) / kScanBlock;
    return (blocks + 1) * kScanBlock + 2 * blocks + xla_scan_scratch(blocks);
}
// `lanes` independent scans at once (element k of lane l at x[k * lanes + l], out too),
// so that every step is a loop over the lanes, which vectorises; `scratch` holds
// xla_scan_scratch(n) * lanes elements. O(n) per lane: each level of blocks is a 16th of
// the one below.
template <typename T, typename Body>
void xla_scan(const T* __restrict x, int64_t n, int64_t lanes, T init, const Body& body,
              bool forward, T* __restrict out, T* __restrict scratch) {
    if (n <= kScanBlock) {
        for (int64_t i = 0; i < n; ++i) {
            T* __restrict acc = out + i * lanes;
            const T* __restrict element = x + i * lanes;
            if (forward && i == 0) {
                for (int64_t l = 0; l < lanes; ++l) acc[l] = body(init, element[l]);
            } else if (forward) {  // the fold up to i is the fold up to i - 1, one step on
                const T* __restrict before = acc - lanes;
                for (int64_t l = 0; l < lanes; ++l) acc[l] = body(before[l], element[l]);
            } else {  // from element i on, in index order: a fold of its own
                for (int64_t l = 0; l < lanes; ++l) acc[l] = init;
                for (int64_t k = i; k < n; ++k, element += lanes)
                    for (int64_t l = 0; l < lanes; ++l) acc[l] = body(acc[l], element[l]);
            }
        }
        return;
    }
    const int64_t blocks = (n + kScanBlock - 1) / kScanBlock;
    T* inner = scratch;
    T* padded = inner + blocks * kScanBlock * lanes;
    T* totals = padded + kScanBlock * lanes;
    T* across = totals + blocks * lanes;
    T* rest = across + blocks * lanes;
    for (int64_t b = 0; b < blocks; ++b) {
        const int64_t first = b * kScanBlock, count = std::min(kScanBlock, n - first);
        const T* block = x + first * lanes;
        if (count < kScanBlock) {  // the last block, padded with the init value
            std::copy(block, block + count * lanes, padded);
            std::fill(padded + count * lanes, padded + kScanBlock * lanes, init);
            block = padded;
        }
        T* scanned = inner + first * lanes;
        xla_scan(block, kScanBlock, lanes, init, body, forward, scanned, rest);
        std::copy(scanned + (forward ? kScanBlock - 1 : 0) * lanes,
                  scanned + (forward ? kScanBlock : 1) * lanes, totals + b * lanes);
    }
    xla_scan(totals, blocks, lanes, init, body, forward, across, rest);
    for (int64_t i = 0; i < n; ++i) {
        const int64_t b = i / kScanBlock;
        const T* __restrict scanned = inner + i * lanes;
        T* __restrict result = out + i * lanes;
        if (forward ? b == 0 : b == blocks - 1) {
            for (int64_t l = 0; l < lanes; ++l) result[l] = body(scanned[l], init);
        } else {
            const T* __restrict before = across + (forward ? b - 1 : b + 1) * lanes;
            for (int64_t l = 0; l < lanes; ++l) result[l] = body(scanned[l], before[l]);
        }
    }
}

}  // namespace h2d
