// hlo2dace's C++ helpers: complex multiplication and division, and complex matrix products in XLA's (Eigen's) order.
// (Included through h2d/ops.h; each topic header builds on the one before it.)
#pragma once

#include "floats.h"

namespace h2d {

// Complex multiplication and division as XLA computes them: MLIR's complex-to-standard
// lowering (the textbook product; Smith's division with its special cases), in which LLVM
// contracts a product feeding an addition into an fma.
namespace cx {
// A complex number made of its parts, written as the two floats the standard lets a
// std::complex be read as: GCC 12 does not vectorise a loop that stores a complex number
// built of two fma results (mandelbrot's z * z + c), and does when the parts are written.
template <typename R> H2D_FN inline std::complex<R> of_parts(R re, R im) {
    std::complex<R> z;
    reinterpret_cast<R*>(&z)[0] = re;
    reinterpret_cast<R*>(&z)[1] = im;
    return z;
}
template <typename R> H2D_FN inline std::complex<R> mul(std::complex<R> x, std::complex<R> y) {
    R a = x.real(), b = x.imag(), c = y.real(), d = y.imag();
    return of_parts(std::fma(a, c, -(b * d)), std::fma(b, c, a * d));
}
template <typename R> H2D_FN inline std::complex<R> div(std::complex<R> x, std::complex<R> y) {
    const R inf = std::numeric_limits<R>::infinity(), zero = 0, one = 1;
    R lr = x.real(), li = x.imag(), rr = y.real(), ri = y.imag();
    R ratio1 = rr / ri;
    R denom1 = std::fma(ratio1, rr, ri);
    R re1 = std::fma(lr, ratio1, li) / denom1;
    R im1 = std::fma(li, ratio1, -lr) / denom1;
    R ratio2 = ri / rr;
    R denom2 = std::fma(ratio2, ri, rr);
    R re2 = std::fma(li, ratio2, lr) / denom2;
    R im2 = std::fma(-lr, ratio2, li) / denom2;
    R arr = std::fabs(rr), ari = std::fabs(ri), alr = std::fabs(lr), ali = std::fabs(li);
    bool smaller_real = arr < ari;
    R re = smaller_real ? re1 : re2, im = smaller_real ? im1 : im2;
    if (!(std::isnan(re) && std::isnan(im))) return {re, im};
    // 1. zero denominator, numerator not all NaN
    if ((!std::isnan(lr) || !std::isnan(li)) && arr == 0 && ari == 0) {
        R signed_inf = std::copysign(inf, rr);
        return {signed_inf * lr, signed_inf * li};
    }
    // 2. infinite numerator, finite denominator
    bool rhs_finite = (arr != inf && !std::isnan(arr)) && (ari != inf && !std::isnan(ari));
    if ((alr == inf || ali == inf) && rhs_finite) {
        R a = std::copysign(alr == inf ? one : zero, lr), b = std::copysign(ali == inf ? one : zero, li);
        return {inf * std::fma(a, rr, b * ri), inf * std::fma(b, rr, -(a * ri))};
    }
    // 3. finite numerator, infinite denominator
    bool lhs_finite = (alr != inf && !std::isnan(alr)) && (ali != inf && !std::isnan(ali));
    if (lhs_finite && (arr == inf || ari == inf)) {
        R c = std::copysign(arr == inf ? one : zero, rr), d = std::copysign(ari == inf ? one : zero, ri);
        return {zero * std::fma(lr, c, li * d), zero * std::fma(li, c, -(lr * d))};
    }
    return {re, im};
}
template <typename R> H2D_FN inline R abs(std::complex<R> z);
template <typename R> H2D_FN inline std::complex<R> sign(std::complex<R> z);
template <typename R> H2D_FN inline std::complex<R> pow(std::complex<R> x, std::complex<R> y);
}  // namespace cx

// ------------------------------------------------------------------ complex products
// One element of a complex matrix product as XLA computes it: its dot thunk calls Eigen,
// which jaxlib builds for AVX (no FMA; a packet holds 4 complex<float> or 2
// complex<double>). Eigen's kernels keep the four real sums a_re b_re, a_im b_im,
// a_im b_re, a_re b_im apart and combine them at the end (re = rr - ii, im = ir + ri),
// in an order that depends on where the element falls in Eigen's blocking (h2d::cdot_order
// picks it): `packet`, each sum in k order; `pairs`, its even and odd terms apart up to a
// multiple of 8, then added, then the rest in order; `quads`, four interleaved partial
// sums up to a multiple of 4, added as (0 + 1) + (2 + 3), then the rest; `scalar`, the
// complex product (rounded) added term by term. The result is then Eigen's alpha (1) times
// it, added to the zeroed output. `reduce`: a product of one row and one column, which
// XLA rewrites into a multiply and a reduce (its dot strength reduction): up to 32 terms
// fused, LLVM contracting the imaginary part's products into the sum; longer, XLA's
// complex products summed by tree_sum.
enum class CdotOrder { packet, pairs, quads, scalar, reduce };
// XLA's tree reduction: a sum of more than 32 terms is padded to a multiple of 32 (the
// padding split around the terms) and summed in windows of 32, each in order from zero,
// and the windows' sums summed the same way.
constexpr int64_t kReduceWindow = 32;
template <typename R> H2D_FN inline std::complex<R> tree_sum(const std::vector<std::complex<R>>& terms) {
    const int64_t n = (int64_t)terms.size();
    if (n <= kReduceWindow) {
        R re = 0, im = 0;
        for (const auto& t : terms) re = re + t.real(), im = im + t.imag();
        return {re, im};
    }
    const int64_t windows = (n + kReduceWindow - 1) / kReduceWindow;
    const int64_t low = (windows * kReduceWindow - n) / 2;
    std::vector<std::complex<R>> sums(windows);
    for (int64_t w = 0; w < windows; ++w) {
        R re = 0, im = 0;
        for (int64_t p = w * kReduceWindow - low; p < (w + 1) * kReduceWindow - low; ++p) {
            if (p >= 0 && p < n) re = re + terms[p].real(), im = im + terms[p].imag();
        }
        sums[w] = {re, im};
    }
    return tree_sum(sums);
}
template <typename R> H2D_FN inline R opaque(R x) {
#if defined(__SSE__) && !defined(__CUDA_ARCH__)
    asm("" : "+x"(x));
#endif
    return x;
}
template <typename R, typename Lhs, typename Rhs>
H2D_FN inline std::complex<R> eigen_cdot(const Lhs& lhs, const Rhs& rhs, int64_t k, CdotOrder order) {
    R re, im;
    if (order == CdotOrder::reduce) {
        if (k > kReduceWindow) {
            std::vector<std::complex<R>> products(k);
            for (int64_t t = 0; t < k; ++t) products[t] = cx::mul<R>(lhs(t), rhs(t));
            return tree_sum(products);
        }
        re = 0, im = 0;
        for (int64_t t = 0; t < k; ++t) {
            const std::complex<R> x = lhs(t), y = rhs(t);
            re = re + std::fma(x.real(), y.real(), -(x.imag() * y.imag()));
            im = std::fma(x.imag(), y.real(), std::fma(x.real(), y.imag(), im));
        }
        return {re, im};
    }
    if (order == CdotOrder::scalar) {
        re = 0, im = 0;
        for (int64_t t = 0; t < k; ++t) {
            const std::complex<R> x = lhs(t), y = rhs(t);
            // opaque: GCC's vectoriser turns a complex product into fmaddsub, even under
            // -ffp-contract=off
            const R rr = opaque(x.real() * y.real()), ii = opaque(x.imag() * y.imag());
            const R ri = opaque(x.real() * y.imag()), ir = opaque(x.imag() * y.real());
            re = re + (rr - ii);
            im = im + (ri + ir);
        }
    } else {
        const int lanes = order == CdotOrder::quads ? 4 : order == CdotOrder::pairs ? 2 : 1;
        const int64_t split = order == CdotOrder::quads ? k / 4 * 4
                              : order == CdotOrder::pairs ? k / 8 * 8 : 0;
        R rr[4] = {}, ii[4] = {}, ir[4] = {}, ri[4] = {};
        for (int64_t t = 0; t < split; ++t) {
            const std::complex<R> x = lhs(t), y = rhs(t);
            const int l = (int)(t % lanes);
            rr[l] = rr[l] + x.real() * y.real();
            ii[l] = ii[l] + x.imag() * y.imag();
            ir[l] = ir[l] + x.imag() * y.real();
            ri[l] = ri[l] + x.real() * y.imag();
        }
        if (lanes == 4) {
            for (R* s : {rr, ii, ir, ri}) s[0] = (s[0] + s[1]) + (s[2] + s[3]);
        } else if (lanes == 2) {
            for (R* s : {rr, ii, ir, ri}) s[0] = s[0] + s[1];
        }
        for (int64_t t = split; t < k; ++t) {
            const std::complex<R> x = lhs(t), y = rhs(t);
            rr[0] = rr[0] + x.real() * y.real();
            ii[0] = ii[0] + x.imag() * y.imag();
            ir[0] = ir[0] + x.imag() * y.real();
            ri[0] = ri[0] + x.real() * y.imag();
        }
        re = rr[0] + -ii[0], im = ir[0] + ri[0];
    }
    return {R(0) + (re * R(1) - im * R(0)), R(0) + (re * R(0) + im * R(1))};
}
// The order of element (i, j) of an m x n product (see eigen_cdot). XLA computes the
// row-major C = A B as C^T = B^T A^T, so Eigen's rows are C's columns: blocks of two
// packets of them run in order, then one packet and a half packet with even and odd
// terms apart, and a last single column with the swapped kernel (four partial sums) in
// C's rows of whole groups of 4 (Eigen's panels of its columns), else the scalar
// kernel; a product with one row is Eigen's matrix-vector kernel (scalar order), one
// with one row and one column XLA's multiply and reduce.
template <typename R> H2D_FN inline CdotOrder cdot_order(int64_t i, int64_t j, int64_t m, int64_t n) {
    constexpr int64_t packet = std::is_same_v<R, float> ? 4 : 2, half = packet / 2;
    if (m == 1) return n == 1 ? CdotOrder::reduce : CdotOrder::scalar;
    const bool panel = i < m / 4 * 4;
    int64_t done = n / (2 * packet) * (2 * packet);
    if (j < done) return CdotOrder::packet;
    for (int64_t width : {packet, half}) {
        if (n - done >= width) {
            if (j < done + width) return panel ? CdotOrder::pairs : CdotOrder::packet;
            done += width;
        }
    }
    return panel ? CdotOrder::quads : CdotOrder::scalar;
}

}  // namespace h2d
