// hlo2dace's C++ helpers: real and complex functions as XLA computes them.
// (Included through h2d/ops.h; each topic header builds on the one before it.)
#pragma once

#include "scans.h"

namespace h2d {

// ------------------------------------------------------------------ transcendental
// Real functions as XLA computes them: a denormal argument of expm1 and (f32) tanh comes
// back unchanged, log and log1p read it as zero (DAZ). XLA's own f32 approximations of exp, log,
// tanh, rsqrt... differ from the C library's by a few ULP (the tests allow for that).
template <typename R> H2D_FN inline R rsqrt_r(R a) { return R(1) / std::sqrt(a); }
// XLA's own f64 exponential and expm1, which its CPU backend inlines (exp: a rational
// approximation of e^g after reducing by n ln 2, scaled by 2^n in four factors; expm1:
// e^x - 1 above |x| = 0.5, else tanh(x / 2) (e^x + 1) with XLA's rational tanh); LLVM
// contracts their products and sums into FMAs, hence std::fma. Bit for bit XLA's results.
inline double xla_exp(double x) {
    constexpr double lo = -0x1.6232bdd7abcd2p+9, hi = 0x1.62e42fefa39efp+9;
    const double clamped = blend(x < lo, lo, blend(x > hi, hi, x));  // NaN stays NaN
    // n = floor(x log2(e) + 1/2), rounded to an integer by adding 1.5 2^52, which also
    // leaves it in the low bits (std::floor does not vectorise without -fno-trapping-math,
    // conversions between double and int64 not without AVX-512); |x| is clamped, so n fits;
    // NaN gives 0
    const double t = std::fma(clamped, 0x1.71547652b82fep+0, 0.5);
    const double t_number = blend(t != t, 0.0, t);
    constexpr double shifter = 0x1.8p52;
    const double nearest = (t_number + shifter) - shifter;
    const double n = nearest - blend(nearest > t_number, 1.0, 0.0);
    const int64_t k = bit_cast<int64_t>(n + shifter) - bit_cast<int64_t>(shifter);
    double g = std::fma(-n, 0x1.62e4000000000p-1, clamped);
    g = std::fma(-n, 0x1.7f7d1cf79abcap-20, g);
    const double gg = g * g;
    const double p = std::fma(std::fma(gg, 0x1.089cdd5e44be8p-13, 0x1.f06d10cca2c7ep-6), gg,
                              1.0) * g;
    const double q = std::fma(std::fma(std::fma(gg, 0x1.92eb6bc365fa0p-19,
                                                0x1.4ae39b508b6c0p-9),
                                       gg, 0x1.d17099887e074p-3), gg, 2.0);
    const double r = std::fma(p / (q - p), 2.0, 1.0);
    // 2^n as four factors 2^(n/4) 2^(n/4) 2^(n/4) 2^(n - 3 (n/4)) (XLA clamps n to
    // +-2099, which the clamped x never reaches)
    const int64_t quarter = k >> 2;
    const double scale = bit_cast<double>((uint64_t)((quarter << 52) + 0x3FF0000000000000ll));
    const double rest = bit_cast<double>(
        (uint64_t)(((k - 3 * quarter) << 52) + 0x3FF0000000000000ll));
    const double result = r * scale * scale * scale * rest;
    return blend(x > hi, std::numeric_limits<double>::infinity(), blend(x < lo, 0.0, result));
}
// XLA's own f32 exponential (Cephes' expf, which XLA's CPU backend puts in place of LLVM's
// vector exp: xla/backends/cpu/codegen/polynomial_approximations.cc, GenerateVF32Exp):
// x clamped to [-87.8, 88.8], n = floor(x log2(e) + 1/2) clamped to [-127, 127],
// g = x - n C1 - n C2, e^g = 1 + (g + g^2 P(g)), times 2^n made of exponent bits (n = -127
// gives 0). Bit for bit jax.jit's results on all 2^32 inputs under FTZ/DAZ, except where
// XLA computes the last elements of a few short vectors with libm's expf (1-D arrays of 3,
// 5-7, 11, 13-15 elements: 1 ULP or a flushed result in 0.4% of inputs). No call, so a
// loop of it vectorises as a loop of arithmetic (libmvec's expf computed the lanes beyond
// its range one by one, with the scalar function: a masked softmax's exp(-inf) took 12 ns
// an element).
inline float xla_exp(float x) {
    const float c = blend(x > 88.8f, 88.8f, blend(x < -87.8f, -87.8f, x));  // NaN stays NaN
    const float t = std::fma(c, 0x1.715476p+0f, 0.5f);
    // floor(t), |t| < 129, as for f64 (a NaN's n gives some scale: the result is NaN)
    constexpr float shifter = 0x1.8p23f;
    const float nearest = (t + shifter) - shifter;
    const float floor_t = nearest - blend(nearest > t, 1.0f, 0.0f);
    const float n = blend(floor_t > 127.0f, 127.0f, blend(floor_t < -127.0f, -127.0f, floor_t));
    float g = std::fma(-n, 0x1.63p-1f, c);
    g = std::fma(-n, -0x1.bd0106p-13f, g);
    float p = std::fma(g, 0x1.a0d2cep-13f, 0x1.6e879cp-10f);
    p = std::fma(p, g, 0x1.11121p-7f);
    p = std::fma(p, g, 0x1.555382p-5f);
    p = std::fma(p, g, 0x1.555554p-3f);
    p = std::fma(p, g, 0.5f);
    const float r = std::fma(p, g * g, g) + 1.0f;
    const uint32_t k = bit_cast<uint32_t>(n + shifter) - bit_cast<uint32_t>(shifter);
    return r * bit_cast<float>((k + 127u) << 23);
}
inline double xla_expm1(double x) {
    constexpr double bound = 0x1.1b6d58f246197p+4;
    const double e = xla_exp(x);
    const double half = x * 0.5;
    const double c = blend(half > bound, bound, blend(half < -bound, -bound, half));
    const double w = c * c;
    double num = std::fma(w, 0x1.f9f82e5d782dfp-76, 0x1.c3c836c04b4c8p-61);
    num = std::fma(w, num, 0x1.c3379f905e662p-49);
    num = std::fma(w, num, 0x1.29aff6c8edd96p-38);
    num = std::fma(w, num, 0x1.525a389dce7c2p-29);
    num = std::fma(w, num, 0x1.708819be51cd9p-21);
    num = std::fma(w, num, 0x1.8996f4026a7fap-14);
    num = std::fma(w, num, 0x1.87f80b957ed00p-8);
    num = std::fma(w, num, 0x1.36fba9b450e5ap-3);
    num = std::fma(w, num, 1.0);
    double den = std::fma(w, 0x1.e8630cf903250p-68, 0x1.0aabca9a5fea0p-54);
    den = std::fma(w, den, 0x1.232981aa2bba8p-43);
    den = std::fma(w, den, 0x1.ee2f015ea8065p-34);
    den = std::fma(w, den, 0x1.81f1947c52304p-25);
    den = std::fma(w, den, 0x1.26c82ab46d140p-17);
    den = std::fma(w, den, 0x1.b2e7c4d488c04p-11);
    den = std::fma(w, den, 0x1.1998830265b50p-5);
    den = std::fma(w, den, 0x1.f0d32a2f7dc79p-2);
    den = std::fma(w, den, 1.0);
    const double tanh_half = blend(std::fabs(half) >= 20.0, std::copysign(1.0, half),
                                   c * num / den);
    const double result = blend(std::fabs(x) > 0.5, e + -1.0, tanh_half * (e + 1.0));
    return blend(half == 0.0, x, result);
}
// Each function is computed unconditionally and then selected, so that loops vectorise.
template <typename R> H2D_FN inline R expm1_r(R a) {
    if constexpr (std::is_same_v<R, double> && !on_device) return xla_expm1(a);
    const R r = vm::expm1(a);
    return is_denormal(a) ? a : r;
}
// XLA's f64 tanh (Eigen's ptanh_double, its polynomials in FMAs): a 19/18-degree
// rational function of x clamped to +-17.714..., and +-1 from |x| = 20 on; bit for bit
// XLA's results, inline, so that loops of any length vectorise it (libmvec's tanh left a
// scalar libm call in every short row's remainder: 3x XLA's time on rows of 10).
inline double xla_tanh(double a) {
    constexpr double c = 17.714196154005176;
    const double x = blend(a > c, c, blend(a < -c, -c, a));  // NaN stays NaN
    const double x2 = x * x;
    const double p = horner(x2, 2.6158007860482230e-23, 7.6534862268749319e-19,
                            3.1309488231386680e-15, 4.2303918148209176e-12,
                            2.4618379131293676e-09, 6.8644367682497074e-07,
                            9.3839087674268880e-05, 5.9809711724441161e-03,
                            1.5184719640284322e-01, 1.0);
    const double q = horner(x2, 6.463747022670968018e-21, 5.782506856739003571e-17,
                            1.293019623712687916e-13, 1.123643448069621992e-10,
                            4.492975677839633985e-08, 8.785185266237658698e-06,
                            8.295161192716231542e-04, 3.437448108450402717e-02,
                            4.851805297361760360e-01, 1.0);
    return blend(std::fabs(a) >= 20.0, std::copysign(1.0, a), x * p / q);
}
template <typename R> H2D_FN inline R tanh_r(R a) {  // f64: XLA reads a denormal as zero
    if constexpr (std::is_same_v<R, double> && !on_device) return xla_tanh(flush(a));
    const R r = vm::tanh(a);
    return is_denormal(a) ? a : r;
}
// f64 log: glibc's (Arm's optimized-routines math/log.c, MIT licensed), which XLA calls,
// as GCC compiles it for glibc's FMA variant, so bit for bit XLA's results (checked on 16
// million arguments), written without branches so that GCC inlines and vectorises it, on
// AVX2 as on AVX-512: libmvec's log differed from glibc's in 17% of its results, and
// its SIMD variants from each other. Near 1, a polynomial in x - 1; elsewhere
// x = 2^k z, log(x) = k ln 2 + log(c) + log1p(z / c - 1) with c the centre of z's
// 1/128th of [0.6875, 1.375) (tables of 1 / c and log(c), indexed by 64-bit integers,
// which AVX2 gathers).
inline constexpr double kLogInvC[128] = {
    0x1.734f0c3e0de9fp+0, 0x1.713786a2ce91fp+0, 0x1.6f26008fab5a0p+0, 0x1.6d1a61f138c7dp+0,
    0x1.6b1490bc5b4d1p+0, 0x1.69147332f0cbap+0, 0x1.6719f18224223p+0, 0x1.6524f99a51ed9p+0,
    0x1.63356aa8f24c4p+0, 0x1.614b36b9ddc14p+0, 0x1.5f66452c65c4cp+0, 0x1.5d867b5912c4fp+0,
    0x1.5babccb5b90dep+0, 0x1.59d61f2d91a78p+0, 0x1.5805612465687p+0, 0x1.56397cee76bd3p+0,
    0x1.54725e2a77f93p+0, 0x1.52aff42064583p+0, 0x1.50f22dbb2bddfp+0, 0x1.4f38f4734ded7p+0,
    0x1.4d843cfde2840p+0, 0x1.4bd3ec078a3c8p+0, 0x1.4a27fc3e0258ap+0, 0x1.4880524d48434p+0,
    0x1.46dce1b192d0bp+0, 0x1.453d9d3391854p+0, 0x1.43a2744b4845ap+0, 0x1.420b54115f8fbp+0,
    0x1.40782da3ef4b1p+0, 0x1.3ee8f5d57fe8fp+0, 0x1.3d5d9a00b4ce9p+0, 0x1.3bd60c010c12bp+0,
    0x1.3a5242b75dab8p+0, 0x1.38d22cd9fd002p+0, 0x1.3755bc5847a1cp+0, 0x1.35dce49ad36e2p+0,
    0x1.34679984dd440p+0, 0x1.32f5cceffcb24p+0, 0x1.3187775a10d49p+0, 0x1.301c8373e3990p+0,
    0x1.2eb4ebb95f841p+0, 0x1.2d50a0219a9d1p+0, 0x1.2bef9a8b7fd2ap+0, 0x1.2a91c7a0c1babp+0,
    0x1.293726014b530p+0, 0x1.27dfa5757a1f5p+0, 0x1.268b39b1d3bbfp+0, 0x1.2539d838ff5bdp+0,
    0x1.23eb7aac9083bp+0, 0x1.22a012ba940b6p+0, 0x1.2157996cc4132p+0, 0x1.201201dd2fc9bp+0,
    0x1.1ecf4494d480bp+0, 0x1.1d8f5528f6569p+0, 0x1.1c52311577e7cp+0, 0x1.1b17c74cb26e9p+0,
    0x1.19e010c2c1ab6p+0, 0x1.18ab07bb670bdp+0, 0x1.1778a25efbcb6p+0, 0x1.1648d354c31dap+0,
    0x1.151b990275fddp+0, 0x1.13f0ea432d24cp+0, 0x1.12c8b7210f9dap+0, 0x1.11a3028ecb531p+0,
    0x1.107fbda8434afp+0, 0x1.0f5ee0f4e6bb3p+0, 0x1.0e4065d2a9fcep+0, 0x1.0d244632ca521p+0,
    0x1.0c0a77ce2981ap+0, 0x1.0af2f83c636d1p+0, 0x1.09ddb98a01339p+0, 0x1.08cabaf52e7dfp+0,
    0x1.07b9f2f4e28fbp+0, 0x1.06ab58c358f19p+0, 0x1.059eea5ecf92cp+0, 0x1.04949cdd12c90p+0,
    0x1.038c6c6f0ada9p+0, 0x1.02865137932a9p+0, 0x1.0182427ea7348p+0, 0x1.008040614b195p+0,
    0x1.fe01ff726fa1ap-1, 0x1.fa11cc261ea74p-1, 0x1.f6310b081992ep-1, 0x1.f25f63ceeadcdp-1,
    0x1.ee9c8039113e7p-1, 0x1.eae8078cbb1abp-1, 0x1.e741aa29d0c9bp-1, 0x1.e3a91830a99b5p-1,
    0x1.e01e009609a56p-1, 0x1.dca01e577bb98p-1, 0x1.d92f20b7c9103p-1, 0x1.d5cac66fb5ccep-1,
    0x1.d272caa5ede9dp-1, 0x1.cf26e3e6b2ccdp-1, 0x1.cbe6da2a77902p-1, 0x1.c8b266d37086dp-1,
    0x1.c5894bd5d5804p-1, 0x1.c26b533bb9f8cp-1, 0x1.bf583eeece73fp-1, 0x1.bc4fd75db96c1p-1,
    0x1.b951e0c864a28p-1, 0x1.b65e2c5ef3e2cp-1, 0x1.b374867c9888bp-1, 0x1.b094b211d304ap-1,
    0x1.adbe885f2ef7ep-1, 0x1.aaf1d31603da2p-1, 0x1.a82e63fd358a7p-1, 0x1.a5740ef09738bp-1,
    0x1.a2c2a90ab4b27p-1, 0x1.a01a01393f2d1p-1, 0x1.9d79f24db3c1bp-1, 0x1.9ae2505c7b190p-1,
    0x1.9852ef297ce2fp-1, 0x1.95cbaeea44b75p-1, 0x1.934c69de74838p-1, 0x1.90d4f2f6752e6p-1,
    0x1.8e6528effd79dp-1, 0x1.8bfce9fcc007cp-1, 0x1.899c0dabec30ep-1, 0x1.87427aa2317fbp-1,
    0x1.84f00acb39a08p-1, 0x1.82a49e8653e55p-1, 0x1.8060195f40260p-1, 0x1.7e22563e0a329p-1,
    0x1.7beb377dcb5adp-1, 0x1.79baa679725c2p-1, 0x1.77907f2170657p-1, 0x1.756cadbd6130cp-1};
inline constexpr double kLogC[128] = {
    -0x1.7cc7f79e69000p-2, -0x1.76feec20d0000p-2, -0x1.713e31351e000p-2, -0x1.6b85b38287800p-2,
    -0x1.65d5590807800p-2, -0x1.602d076180000p-2, -0x1.5a8ca86909000p-2, -0x1.54f4356035000p-2,
    -0x1.4f637c36b4000p-2, -0x1.49da7fda85000p-2, -0x1.445923989a800p-2, -0x1.3edf439b0b800p-2,
    -0x1.396ce448f7000p-2, -0x1.3401e17bda000p-2, -0x1.2e9e2ef468000p-2, -0x1.2941b3830e000p-2,
    -0x1.23ec58cda8800p-2, -0x1.1e9e129279000p-2, -0x1.1956d2b48f800p-2, -0x1.141679ab9f800p-2,
    -0x1.0edd094ef9800p-2, -0x1.09aa518db1000p-2, -0x1.047e65263b800p-2, -0x1.feb224586f000p-3,
    -0x1.f474a7517b000p-3, -0x1.ea4443d103000p-3, -0x1.e020d44e9b000p-3, -0x1.d60a22977f000p-3,
    -0x1.cc00104959000p-3, -0x1.c202956891000p-3, -0x1.b81178d811000p-3, -0x1.ae2c9ccd3d000p-3,
    -0x1.a45402e129000p-3, -0x1.9a877681df000p-3, -0x1.90c6d69483000p-3, -0x1.87120a645c000p-3,
    -0x1.7d68fb4143000p-3, -0x1.73cb83c627000p-3, -0x1.6a39a9b376000p-3, -0x1.60b3154b7a000p-3,
    -0x1.5737d76243000p-3, -0x1.4dc7b8fc23000p-3, -0x1.4462c51d20000p-3, -0x1.3b08abc830000p-3,
    -0x1.31b996b490000p-3, -0x1.2875490a44000p-3, -0x1.1f3b9f879a000p-3, -0x1.160c8252ca000p-3,
    -0x1.0ce7f57f72000p-3, -0x1.03cdc49fea000p-3, -0x1.f57bdbc4b8000p-4, -0x1.e370896404000p-4,
    -0x1.d17983ef94000p-4, -0x1.bf9674ed8a000p-4, -0x1.adc79202f6000p-4, -0x1.9c0c3e7288000p-4,
    -0x1.8a646b372c000p-4, -0x1.78d01b3ac0000p-4, -0x1.674f145380000p-4, -0x1.55e0e6d878000p-4,
    -0x1.4485cdea1e000p-4, -0x1.333d94d6aa000p-4, -0x1.22079f8c56000p-4, -0x1.10e4698622000p-4,
    -0x1.ffa6c6ad20000p-5, -0x1.dda8d4a774000p-5, -0x1.bbcece4850000p-5, -0x1.9a1894012c000p-5,
    -0x1.788583302c000p-5, -0x1.5715e67d68000p-5, -0x1.35c8a49658000p-5, -0x1.149e364154000p-5,
    -0x1.e72c082eb8000p-6, -0x1.a55f152528000p-6, -0x1.63d62cf818000p-6, -0x1.228fb8caa0000p-6,
    -0x1.c317b20f90000p-7, -0x1.419355daa0000p-7, -0x1.81203c2ec0000p-8, -0x1.0040979240000p-9,
    0x1.feff384900000p-9, 0x1.7dc41353d0000p-7, 0x1.3cea3c4c28000p-6, 0x1.b9fc114890000p-6,
    0x1.1b0d8ce110000p-5, 0x1.58a5bd001c000p-5, 0x1.95c8340d88000p-5, 0x1.d276aef578000p-5,
    0x1.07598e598c000p-4, 0x1.253f5e30d2000p-4, 0x1.42edd8b380000p-4, 0x1.606598757c000p-4,
    0x1.7da76356a0000p-4, 0x1.9ab434e1c6000p-4, 0x1.b78c7bb0d6000p-4, 0x1.d431332e72000p-4,
    0x1.f0a3171de6000p-4, 0x1.067152b914000p-3, 0x1.147858292b000p-3, 0x1.2266ecdca3000p-3,
    0x1.303d7a6c55000p-3, 0x1.3dfc33c331000p-3, 0x1.4ba366b7a8000p-3, 0x1.5933928d1f000p-3,
    0x1.66acd2418f000p-3, 0x1.740f8ec669000p-3, 0x1.815c0f51af000p-3, 0x1.8e92954f68000p-3,
    0x1.9bb3602f84000p-3, 0x1.a8bed1c2c0000p-3, 0x1.b5b515c01d000p-3, 0x1.c2967ccbcc000p-3,
    0x1.cf635d5486000p-3, 0x1.dc1bd3446c000p-3, 0x1.e8c01b8cfe000p-3, 0x1.f5509c0179000p-3,
    0x1.00e6c121fb800p-2, 0x1.071b80e93d000p-2, 0x1.0d46b9e867000p-2, 0x1.13687334bd000p-2,
    0x1.1980d67234800p-2, 0x1.1f8ffe0cc8000p-2, 0x1.2595fd7636800p-2, 0x1.2b9300914a800p-2,
    0x1.3187210436000p-2, 0x1.377266dec1800p-2, 0x1.3d54ffbaf3000p-2, 0x1.432eee32fe000p-2};
inline double glibc_log(double x) {
    const uint64_t bits = bit_cast<uint64_t>(x);
    const double r1 = x - 1.0;
    const double r1_2 = r1 * r1;
    const double r1_3 = r1 * r1_2;
    double p1 = horner(r1, -0x1.999eb43b068ffp-4, 0x1.c7184282ad6cap-4);
    p1 = std::fma(r1_3, -0x1.5521375d145cdp-4, std::fma(r1_2, 0x1.78182f7afd085p-4, p1));
    p1 = std::fma(r1_3, p1, std::fma(r1_2, -0x1.fffffa4423d65p-4,
                                     horner(r1, 0x1.24924a344de3p-3, -0x1.55555556745a7p-3)));
    p1 = std::fma(r1_3, p1, std::fma(r1_2, 0x1.999999995dd0cp-3,
                                     horner(r1, -0x1.ffffffffffdcbp-3, 0x1.5555555555577p-2)));
    const double w1 = r1 * 0x1p27;  // r1 split into 26 high bits and the rest
    const double r1_high = r1 + w1 - w1;
    const double r1_low = r1 - r1_high;
    const double w2 = r1_high * r1_high * -0.5;
    const double hi1 = r1 + w2;
    const double lo1 = std::fma(-0.5 * r1_low, r1_high + r1, r1 - hi1 + w2);
    const double near_one = std::fma(r1_3, p1, lo1) + hi1;
    const uint64_t shifted = bits - 0x3fe6000000000000ull;
    const uint64_t i = (shifted >> 45) % 128;
    // k, a 12-bit two's complement number, as a double: 2^52 + (k + 2048) by its bits
    const uint64_t biased_k = (shifted >> 52) ^ 0x800;
    const double k = bit_cast<double>(0x4330000000000000ull | biased_k) - (0x1p52 + 2048.0);
    const double z = bit_cast<double>(bits - (shifted & 0xfff0000000000000ull));
    const double r = std::fma(z, kLogInvC[i], -1.0);
    const double w = std::fma(k, 0x1.62e42fefa3800p-1, kLogC[i]);
    const double hi = w + r;
    const double lo = std::fma(k, 0x1.ef35793c76730p-45, w - hi + r);
    const double r2 = r * r;
    const double p = std::fma(r2, horner(r, -0x1.55575e506c89fp-3, 0x1.999b324f10111p-3),
                              horner(r, -0x1.fffffffeb459p-3, 0x1.555555551305bp-2));
    const double far = std::fma(r * r2, p, std::fma(r2, -0x1.0000000000001p-1, lo)) + hi;
    // close to 1: x in [1 - 2^-4, 1 + 0x1.09p-4), by its bits
    const bool close = bits - 0x3fee000000000000ull < 0x0003090000000000ull;
    constexpr double inf = std::numeric_limits<double>::infinity();
    // log(+-0) = -inf, log(x < 0) = the default NaN, log(inf) = inf, log(NaN) = NaN
    const double special = blend(x == 0.0, -inf,
                                 blend(x < 0.0, -std::numeric_limits<double>::quiet_NaN(), x));
    return blend((x > 0.0) & (x < inf), blend(close, near_one, far), special);
}
template <typename R> H2D_FN inline R log_r(R a) {  // XLA reads a denormal as zero
    if constexpr (std::is_same_v<R, double> && !on_device) return glibc_log(flush(a));
    else return vm::log(flush(a));
}

template <typename R> H2D_FN inline R log1p_r(R a) { return vm::log1p(flush(a)); }

// Complex functions, computed as XLA computes them, in two families:
// * sqrt, log, log1p and exp: XLA expands these with StableHLO's
//   stablehlo-complex-math-expander pass when it imports a module; the functions below are
//   that pass's expansion (jaxlib's, for complex<f32> and complex<f64>: they differ only in
//   constants), transcribed op by op by a script, with XLA's rewrite of x / c into
//   x * (1 / c) and of (x * c0) * c1 into x * (c0 * c1) for constants c;
// * the others with MLIR's complex-to-standard lowering, in which LLVM contracts a product
//   feeding an addition into an fma (hence the std::fma calls: -ffp-contract=off here).
namespace cx {
template <typename R> constexpr R pick(float f, double d) {
    if constexpr (std::is_same_v<R, float>) return f; else return (R)d;
}
// The expander's hypot: max * sqrt(1 + (min / max)^2); max * (1 + r / 2) where that
// square root rounds to 1 though r = (min / max)^2 > 0; sqrt(2) max where min == max.
template <typename R> H2D_FN inline R hypot_(R a, R b) {
    const R big = max_(a, b);
    const R small = min_(a, b);
    const R quotient = small / big;
    const R r = quotient * quotient;
    const R root = std::sqrt(R(1) + r);
    const R if_rounded = big + (big * r) * (R(1) / R(2));
    const R general = root == R(1) && r > R(0) ? if_rounded : big * root;
    return big == small ? pick<R>(0x1.6a09e6p+0f, 0x1.6a09e667f3bcdp+0) * big : general;
}
template <typename R> H2D_FN inline std::complex<R> sqrt(std::complex<R> z) {
    const R v0 = pick<R>(0x1.19435c0000000p+1f, 0x1.19435caffa9f9p+1);
    const R v1 = std::numeric_limits<R>::infinity();
    const R v2 = R(0x1.0000000000000p+1);
    const R v3 = R(0x1.0000000000000p+0);
    const R v4 = pick<R>(0x1.6a09e60000000p+0f, 0x1.6a09e667f3bcdp+0);
    const R v5 = pick<R>(0x1.8dc4220000000p+0f, 0x1.8dc42193d5c03p+0);
    const R v6 = R(0x0.0p+0);
    const R v7 = z.real();
    const bool v8 = v7 >= v6;
    const R v9 = std::fabs(v7);
    const R v10 = z.imag();
    const R v11 = std::fabs(v10);
    const bool v12 = v9 == v11;
    const R v13 = std::sqrt(v9);
    const R v15 = v13 * (v5 * (R(1) / v4));
    const R v32 = hypot_(v9, v11);
    const R v33 = v32 * (R(1) / v2);
    const R v34 = v9 * (R(1) / v2);
    const R v35 = v33 + v34;
    const R v36 = std::sqrt(v35);
    const bool v37 = v36 == v6;
    const bool v38 = v36 == v1;
    const bool v39 = v37 || v38;
    const bool v40 = v9 > v11;
    const bool v41 = v9 < v11;
    const R v42 = v9 / v11;
    const R v43 = v11 / v9;
    const R v44 = v41 ? v42 : v43;
    const R v45 = v12 ? v3 : v44;
    const R v46 = std::fabs(v45);
    const R v63 = hypot_(v3, v46);
    const R v64 = v3 + v63;
    const R v65 = std::sqrt(v64);
    const R v66 = v65 * (R(1) / v4);
    const R v67 = v13 * v66;
    const R v68 = std::sqrt(v11);
    const R v69 = v45 + v63;
    const R v70 = std::sqrt(v69);
    const R v71 = v70 * (R(1) / v4);
    const R v72 = v68 * v71;
    const R v73 = v40 ? v67 : v72;
    const R v74 = v39 ? v73 : v36;
    const R v75 = v12 ? v15 : v74;
    const R v76 = v68 * (R(1) / v0);
    const R v77 = v13 / v68;
    const R v78 = v68 / v13;
    const R v79 = v41 ? v77 : v78;
    const R v80 = v12 ? v3 : v79;
    const R v81 = v68 * v80;
    const R v82 = v65 * v4;
    const R v83 = v81 / v82;
    const R v84 = v70 * v4;
    const R v85 = v68 / v84;
    const R v86 = v40 ? v83 : v85;
    const R v87 = v36 * v2;
    const R v88 = v11 / v87;
    const R v89 = v39 ? v86 : v88;
    const R v90 = v12 ? v76 : v89;
    const R v91 = v8 ? v75 : v90;
    const bool v92 = v7 < v6;
    const bool v93 = v10 < v6;
    const R v94 = -v75;
    const R v95 = v93 ? v94 : v75;
    const R v96 = -v90;
    const R v97 = v93 ? v96 : v90;
    const R v98 = v92 ? v95 : v97;
    const std::complex<R> v99(v91, v98);
    return v99;
}
// The error-free steps of the expander's log and log1p: x * x + square_error(x) is x * x
// exactly (Dekker's product, x split by Veltkamp's 2^ceil(p / 2) + 1, the constant the
// expander selects by the type's largest value); s = a + b rounded, a + b is s +
// two_sum_error(a, b, s) exactly (Knuth), and s + fast_two_sum_error(a, b, s) where
// |a| >= |b| (Dekker).
template <typename R> H2D_FN inline R square_error(R x) {
    const R scaled = pick<R>(0x1.001p+12f, 0x1.0000002p+27) * x;
    const R high = scaled + (x - scaled);
    const R low = x - high;
    const R cross = high * low;
    return (((-(x * x) + high * high) + cross) + cross) + low * low;
}
template <typename R> H2D_FN inline R two_sum_error(R a, R b, R s) {
    const R b_rounded = s - a;
    return (a - (s - b_rounded)) + (b - b_rounded);
}
template <typename R> H2D_FN inline R fast_two_sum_error(R a, R b, R s) { return b - (s - a); }
// log|z| is log1p(|z|^2 - 1) / 2 near |z| = 1, with |z|^2 - 1 summed exactly enough by
// the steps above, else log(max) + log1p((min / max)^2) / 2.
template <typename R> H2D_FN inline std::complex<R> log(std::complex<R> z) {
    const R half = R(0.5);
    const R x = z.real();
    const R y = z.imag();
    const R yy = y * y;
    const R xx = x * x;
    const R larger = yy > xx ? yy : xx;
    const R smaller = yy > xx ? xx : yy;
    const R sum1 = R(-1) + larger;
    const R sum2 = sum1 + smaller;
    const R y_error = square_error(y);
    const R sum3 = sum2 + y_error;
    const R x_error = square_error(x);
    const R sum4 = sum3 + x_error;
    const R errors = ((fast_two_sum_error(R(-1), larger, sum1)
                       + fast_two_sum_error(sum1, smaller, sum2))
                      + fast_two_sum_error(sum2, y_error, sum3))
                     + fast_two_sum_error(sum3, x_error, sum4);
    const R abs_squared_minus_one = sum4 + errors;
    const R near_one = half * log1p_r(abs_squared_minus_one);
    const R ax = std::fabs(x);
    const R ay = std::fabs(y);
    const R big = max_(ax, ay);
    const R log_big = log_r(big);
    const R small = min_(ax, ay);
    const R quotient = small / big;
    const R ratio = small == big ? R(1) : quotient;
    const R elsewhere = log_big + half * log1p_r(ratio * ratio);
    const R real = std::fabs(abs_squared_minus_one) < half ? near_one : elsewhere;
    return std::complex<R>(real, std::atan2(y, x));
}
// log|1 + z| is log(max) + log1p((min / max)^2) / 2 for large z, log(|1 + z|^2) / 2 where
// |1 + z| is small, else log1p(2x + y^2 + x^2) / 2 summed as in log.
template <typename R> H2D_FN inline std::complex<R> log1p(std::complex<R> z) {
    const R half = R(0.5);
    const R x = z.real();
    const R ax = std::fabs(x);
    const R y = z.imag();
    const R ay = std::fabs(y);
    const R big = max_(ax, ay);
    const bool large = big > std::sqrt(std::numeric_limits<R>::max())
                                 * pick<R>(0x1.47ae14p-7f, 0x1.47ae147ae147bp-7);
    const R log_big = log_r(big);
    const R small = min_(ax, ay);
    const R quotient = small / big;
    const R ratio_squared = quotient * quotient;
    const R if_large = log_big + half * log1p_r(small == big ? R(1) : ratio_squared);
    const R x1 = x + R(1);
    const bool near_minus_one = std::fabs(x1) + ay < pick<R>(0x1.99999ap-3f, 0x1.999999999999ap-3);
    const R yy = y * y;
    const R if_near_minus_one = half * log_r(x1 * x1 + yy);
    const R twice_x = x + x;
    const R sum1 = twice_x + yy;
    const R xx = x * x;
    const R sum2 = sum1 + xx;
    const R y_error = square_error(y);
    const R sum3 = sum2 + y_error;
    const R x_error = square_error(x);
    const R sum4 = sum3 + x_error;
    const R errors = ((two_sum_error(twice_x, yy, sum1) + two_sum_error(sum1, xx, sum2))
                      + two_sum_error(sum2, y_error, sum3))
                     + two_sum_error(sum3, x_error, sum4);
    const R otherwise = half * log1p_r(sum4 + errors);
    const R real = large ? if_large : near_minus_one ? if_near_minus_one : otherwise;
    return std::complex<R>(real, std::atan2(y, x1));
}
template <typename R> H2D_FN inline std::complex<R> exp(std::complex<R> z) {
    const R v0 = R(0x0.0p+0);
    const R v1 = R(0x1.0000000000000p-1);
    const R v2 = std::numeric_limits<R>::infinity();
    const R v3 = z.real();
    const R v4 = std::exp(v3);
    const bool v5 = v4 == v2;
    const R v6 = v3 * v1;
    const R v7 = std::exp(v6);
    const R v8 = z.imag();
    const R v9 = std::cos(v8);
    const R v10 = v7 * v9;
    const R v11 = v10 * v7;
    const R v12 = v4 * v9;
    const R v13 = v5 ? v11 : v12;
    const bool v14 = v8 == v0;
    const R v15 = std::sin(v8);
    const R v16 = v7 * v15;
    const R v17 = v16 * v7;
    const R v18 = v4 * v15;
    const R v19 = v5 ? v17 : v18;
    const R v20 = v14 ? v0 : v19;
    const std::complex<R> v21(v13, v20);
    return v21;
}

// MLIR's computeAbs: |z|, sqrt(|z|) or 1/sqrt(|z|) by max * sqrt(1 + (min/max)^2).
enum class AbsFn { abs, sqrt, rsqrt };
// The maximum and minimum are XLA's (maxps and minps, which give the second operand where
// either is NaN, the first's NaN kept), not h2d::max_'s: of two magnitudes they need no
// signed zeros, and the denormals that max_ flushes by hand reach only arithmetic here,
// which reads them as zero (DAZ), and the NaN case's min, flushed there. max_ and min_
// made |z| 1.75x XLA's time (mandelbrot 2x).
template <typename R> H2D_FN inline R abs_parts(R re, R im, AbsFn fn) {
    R ar = std::fabs(re), ai = std::fabs(im);
    const bool ar_nan = ar != ar;
    R mx = blend(ar_nan, ar, ar > ai ? ar : ai), mn = blend(ar_nan, ar, ar < ai ? ar : ai);
    R ratio = mn / mx;
    R ratio_sq_plus_one = std::fma(ratio, ratio, R(1));
    if (fn == AbsFn::rsqrt) {
        ratio_sq_plus_one = rsqrt_r(ratio_sq_plus_one);
        mn = rsqrt_r(mn);
        mx = rsqrt_r(mx);
    }
    R result = fn == AbsFn::sqrt ? std::sqrt(mx) * std::pow(ratio_sq_plus_one, R(0.25))
                                 : mx * std::sqrt(ratio_sq_plus_one);
    return blend(result != result, flush(mn), result);
}
template <typename R> H2D_FN inline R abs(std::complex<R> z) {
    return abs_parts(z.real(), z.imag(), AbsFn::abs);
}
template <typename R> H2D_FN inline std::complex<R> sign(std::complex<R> z) {
    R re = z.real(), im = z.imag();
    R a = cx::abs(z);
    return (re == 0 && im == 0) ? z : std::complex<R>(re / a, im / a);
}
template <typename R> H2D_FN inline std::complex<R> rsqrt(std::complex<R> z) {
    const R inf = std::numeric_limits<R>::infinity();
    R re = z.real(), im = z.imag();
    R abs_rsqrt = abs_parts(re, im, AbsFn::rsqrt);
    R arg = std::atan2(im, re) * R(-0.5);
    R rr = abs_rsqrt * std::cos(arg), ri = abs_rsqrt * std::sin(arg);
    bool zero = (std::fabs(im) == inf && std::isnan(re)) || std::fabs(re) == inf;
    rr = zero ? std::copysign(R(0), re) : rr;
    ri = zero ? R(-1) * std::copysign(R(0), im) : ri;
    bool is_zero = re == 0 && im == 0;
    return {is_zero ? inf : rr, is_zero ? std::numeric_limits<R>::quiet_NaN() : ri};
}
// cos(x) - 1 (cephes' cosm1 below (pi/4)^2).
template <typename R> H2D_FN inline R cosm1(R x) {
    static constexpr double k[] = {4.7377507964246204691685E-14, -1.1470284843425359765671E-11,
                                   2.0876754287081521758361E-9, -2.7557319214999787979814E-7,
                                   2.4801587301570552304991E-5, -1.3888888888888872993737E-3,
                                   4.1666666666666666609054E-2};
    R x2 = x * x, x4 = x2 * x2;
    R poly = R(k[0]);
    for (int i = 1; i < 7; ++i) poly = std::fma(poly, x2, R(k[i]));
    R small = std::fma(x4, poly, R(-0.5) * x2);
    return x2 >= R(0.61685) ? std::cos(x) + R(-1) : small;
}
template <typename R> H2D_FN inline std::complex<R> expm1(std::complex<R> z) {
    R re = z.real(), im = z.imag();
    R em1 = expm1_r(re);
    R c_m1 = cosm1(im);
    R rr = std::fma(em1, c_m1 + R(1), c_m1);
    R ri = im == 0 ? R(0) : (em1 + R(1)) * std::sin(im);
    return {rr, ri};
}
// MLIR's exp (XLA's own expansions use it: e.g. the logistic op's).
template <typename R> H2D_FN inline std::complex<R> exp_mlir(std::complex<R> z) {
    R e = std::exp(z.real());
    return {e * std::cos(z.imag()), e * std::sin(z.imag())};
}
template <typename R> H2D_FN inline std::complex<R> tanh_parts(R re, R im) {
    const R inf = std::numeric_limits<R>::infinity();
    R two_re = re + re;
    R e1 = expm1_r(two_re), e2 = expm1_r(R(-1) * two_re);
    R real_num = e1 - e2;
    R c = std::cos(im), s = std::sin(im);
    R imag_num = R(4) * (c * s);
    R sum_minus_two = e1 + e2;
    R denom = std::fma(c * c, R(4), sum_minus_two);
    R rr = sum_minus_two == inf ? std::copysign(R(1), re) : real_num / denom;
    R ri = imag_num / denom;
    bool re_inf = std::fabs(re) == inf, num_nan = std::isnan(imag_num);
    if (num_nan && !re_inf) rr = std::numeric_limits<R>::quiet_NaN();
    if (im == 0 || (re_inf && num_nan)) ri = R(0);
    return {rr, ri};
}
template <typename R> H2D_FN inline std::complex<R> tanh(std::complex<R> z) {
    return tanh_parts(z.real(), z.imag());
}
template <typename R> H2D_FN inline std::complex<R> tan(std::complex<R> z) {  // -i tanh(iz)
    std::complex<R> t = tanh_parts(z.imag() * R(-1), z.real());
    return {t.imag(), t.real() * R(-1)};
}
template <typename R> H2D_FN inline std::complex<R> sin(std::complex<R> z) {
    R e = std::exp(z.imag());
    R scaled = R(0.5) * e, reciprocal = R(0.5) / e;
    return {(scaled + reciprocal) * std::sin(z.real()),
            (scaled - reciprocal) * std::cos(z.real())};
}
template <typename R> H2D_FN inline std::complex<R> cos(std::complex<R> z) {
    R e = std::exp(z.imag());
    R scaled = R(0.5) * e, reciprocal = R(0.5) / e;
    return {(reciprocal + scaled) * std::cos(z.real()),
            (reciprocal - scaled) * std::sin(z.real())};
}
template <typename R> H2D_FN inline std::complex<R> pow(std::complex<R> x, std::complex<R> y) {
    using C = std::complex<R>;
    const R inf = std::numeric_limits<R>::infinity();
    R a = x.real(), b = x.imag(), c = y.real(), d = y.imag();
    R r = cx::abs(x);
    R arg = std::atan2(b, a);
    R coeff = std::pow(r, c) * std::exp(-d * arg);
    R q = std::fma(c, arg, d * log_r(r));
    C result(coeff * std::cos(q), coeff * std::sin(q));
    if (r == 0 && d == 0 && 0 <= c) result = c == 0 ? C(1, 0) : C(0, 0);
    if (c == 0 && d == 0) result = C(1, 0);
    if (a == 1 && b == 0) result = C(1, 0);
    if (a == inf && b == 0 && d == 0 && c > 0) result = C(inf, 0);
    if (a == inf && b == 0 && d == 0 && c < 0) result = C(0, 0);
    return result;
}
// MLIR's sqrt and log (used by its atan2).
template <typename R> H2D_FN inline std::complex<R> sqrt_mlir(std::complex<R> z) {
    const R inf = std::numeric_limits<R>::infinity();
    R re = z.real(), im = z.imag();
    R abs_sqrt = abs_parts(re, im, AbsFn::sqrt);
    R half_arg = std::atan2(im, re) * R(0.5);
    R c = std::cos(half_arg), s = std::sin(half_arg);
    R rr = abs_sqrt * c;
    R ri = s == 0 ? R(0) : abs_sqrt * s;
    R abs_im = std::fabs(im);
    if (re == -inf && abs_im != inf && !std::isnan(abs_im)) rr = R(0);
    if (abs_im == inf || re == inf) rr = inf;
    if (std::isnan(abs_sqrt)) ri = std::numeric_limits<R>::quiet_NaN();
    if (abs_im == inf || re == -inf) ri = std::copysign(inf, im);
    if (abs_sqrt == 0) rr = ri = R(0);
    return {rr, ri};
}
template <typename R> H2D_FN inline std::complex<R> log_mlir(std::complex<R> z) {
    return {log_r(cx::abs(z)), std::atan2(z.imag(), z.real())};
}
template <typename R> H2D_FN inline std::complex<R> atan2(std::complex<R> y, std::complex<R> x) {
    using C = std::complex<R>;
    C sum = h2d::add(cx::mul(x, x), cx::mul(y, y));
    C ratio = cx::div(h2d::add(x, cx::mul(C(0, 1), y)), cx::sqrt_mlir(sum));
    return cx::mul(C(0, -1), cx::log_mlir(ratio));
}
}  // namespace cx

// The element types' functions: complex arguments go to cx::.
template <typename T> H2D_FN inline T rsqrt(T a) {
    if constexpr (is_complex<T>) return cx::rsqrt(a); else return rsqrt_r(a);
}
template <typename T> H2D_FN inline T sqrt_(T a) {
    if constexpr (is_complex<T>) return cx::sqrt(a); else return std::sqrt(a);
}
template <typename T> H2D_FN inline T exp_(T a) {
    if constexpr (is_complex<T>) return cx::exp(a);
#if defined(__CUDA_ARCH__)
    else return vm::exp(a);
#else
    else return xla_exp(a);
#endif
}
template <typename T> H2D_FN inline T expm1_(T a) {
    if constexpr (is_complex<T>) return cx::expm1(a); else return expm1_r(a);
}
template <typename T> H2D_FN inline T tanh_(T a) {
    if constexpr (is_complex<T>) return cx::tanh(a); else return tanh_r(a);
}
template <typename T> H2D_FN inline T tan_(T a) {
    if constexpr (is_complex<T>) return cx::tan(a);
    else {  // libmvec flushes tan of the smallest normals to zero: tan(x) rounds to x there
        constexpr T tiny = T(1) / T(1ULL << (std::numeric_limits<T>::digits / 2 + 1));
        return blend(std::fabs(a) < tiny, a, vm::tan(a));
    }
}
template <typename T> H2D_FN inline T sin_(T a) {
    // libmvec's sin reads a denormal as zero (DAZ) where XLA returns it: sin(x) = x
    if constexpr (is_complex<T>) return cx::sin(a);
    else return blend(is_denormal(a), a, vm::sin(a));
}
template <typename T> H2D_FN inline T cos_(T a) {
    if constexpr (is_complex<T>) return cx::cos(a); else return vm::cos(a);
}
template <typename T> H2D_FN inline T log_(T a) {
    if constexpr (is_complex<T>) return cx::log(a); else return log_r(a);
}
template <typename T> H2D_FN inline T log1p_(T a) {
    if constexpr (is_complex<T>) return cx::log1p(a); else return log1p_r(a);
}
template <typename T> H2D_FN inline T cbrt_(T a) {
    // f32: libm's answer for denormals (see cbrtf_of_denormal); f64: libm reads them as
    // zero under DAZ, as XLA does. Either way independent of the libmvec variant.
    if constexpr (std::is_same_v<T, float> && !on_device) {
        return blend(is_denormal(a), cbrtf_of_denormal, vm::cbrt(a));
    } else return vm::cbrt(flush(a));
}
template <typename T> H2D_FN inline T atan2_(T a, T b) {
    // Denormal arguments read as zero, as DAZ reads every other op's (libmvec's variants
    // differ there: some read them as zero, some do not). XLA calls libm's scalar atan2,
    // whose branches under DAZ give artefacts for them (f64 atan2(d, d) = pi/2, f32 NaN):
    // docs/vector-math.md.
    if constexpr (is_complex<T>) return cx::atan2(a, b); else return vm::atan2(flush(a), flush(b));
}
// The exponential inside XLA's own expansion of the logistic op.
template <typename T> H2D_FN inline T exp_logistic(T a) {
    if constexpr (is_complex<T>) return cx::exp_mlir(a); else return exp_(a);
}
template <typename T> H2D_FN inline bool is_finite(T a) { return std::isfinite(a); }
// select: by bits (floats and integers) or by parts (complex), so that loops vectorise
template <typename T> H2D_FN inline T select(bool c, T a, T b) {
    // by parts: GCC does not vectorise a loop that picks whole complex numbers
    if constexpr (is_complex<T>)
        return cx::of_parts(blend(c, a.real(), b.real()), blend(c, a.imag(), b.imag()));
    else if constexpr (std::is_floating_point_v<T> || std::is_integral_v<T>)
        return blend(c, a, b);
    else return c ? a : b;
}

// A sum of products starting from +0.0, as XLA's are, is never -0.0; OpenBLAS's AVX-512
// complex kernels return -0.0 for a sum of -0.0 products (their AVX2 ones do not). Adding
// +0.0 turns -0.0 into +0.0 and changes nothing else.
template <typename R> H2D_FN inline void no_negative_zero_sums(std::complex<R>* sums, int64_t count) {
    R* parts = reinterpret_cast<R*>(sums);
    for (int64_t i = 0; i < 2 * count; ++i) parts[i] += R(0);
}

}  // namespace h2d
