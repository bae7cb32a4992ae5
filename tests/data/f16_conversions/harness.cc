// h2d/ops.h's f16 conversions against the CPU's own (F16C: vcvtph2ps, vcvtps2ph rounding to
// nearest even), in the vectorised loops generated code has, for every f16 and every float,
// with the default floating-point mode and with FTZ/DAZ (which generated code runs under).
// Except on signalling NaNs, which the CPU quietens and h2d keeps: f16's widen exactly, a
// float's keeps its top 10 payload bits (with the quiet bit only where those are zero).
// And bf16's rounding of every float, in 32-bit lanes, against its rule (expected_bf16).
// Prints the number of differences and the first few; tests/test_f16_conversions.py. An
// argument n > 1 checks every n-th chunk of 2^16 floats only.
#include <immintrin.h>

#include <cstdio>
#include <cstdlib>
#include <vector>

#include "h2d/ops.h"

static const int chunk = 1 << 16;

__attribute__((noinline)) void widen(const uint16_t* __restrict in, float* __restrict out) {
    for (int i = 0; i < chunk; ++i) out[i] = h2d::f16_to_float(in[i]);  // loop: widen
}
__attribute__((noinline)) void narrow(const float* __restrict in, uint16_t* __restrict out) {
    for (int i = 0; i < chunk; ++i) out[i] = h2d::float_to_f16(in[i]);  // loop: narrow
}
__attribute__((noinline)) void round(const float* __restrict in, float* __restrict out) {
    for (int i = 0; i < chunk; ++i) out[i] = h2d::round_f16(in[i]);  // loop: round
}
__attribute__((noinline)) void round_bf16(const float* __restrict in, float* __restrict out) {
    for (int i = 0; i < chunk; ++i) out[i] = h2d::round_bf16(in[i]);  // loop: round_bf16
}

static bool signalling(uint32_t bits, uint32_t exponent, uint32_t quiet) {
    return (bits & exponent) == exponent && (bits & (quiet - 1)) != 0 && !(bits & quiet);
}
static float expected_widened(uint16_t half) {  // the CPU's, or a signalling NaN's exact widening
    if (!signalling(half, 0x7c00u, 0x200u)) return _cvtsh_ss(half);
    return h2d::bit_cast<float>((uint32_t)(half & 0x8000u) << 16 | 0x7f800000u | (half & 0x3ffu) << 13);
}
static uint16_t expected_narrowed(float x) {  // the CPU's, or a signalling NaN's top payload bits
    const uint32_t bits = h2d::bit_cast<uint32_t>(x);
    const uint16_t cpu = _cvtss_sh(x, _MM_FROUND_TO_NEAREST_INT);
    return signalling(bits, 0x7f800000u, 0x400000u) && (bits & 0x3fe000u) ? cpu & ~0x200u : cpu;
}

// bf16 by position: the nearer of the two bf16 values around x, whose bits are linear in
// the value between them (ties to the even one; past the largest, the next is infinity),
// NaNs with their sign and top payload bits, quietened unless the low half was zero (a
// bf16's own NaN, kept as XLA keeps it)
static uint32_t expected_bf16(uint32_t bits) {
    const uint32_t low = bits & 0xffff0000u, rest = bits & 0xffffu;
    if ((bits & 0x7fffffffu) > 0x7f800000u) return low | (rest ? 0x400000u : 0u);
    const bool up = rest > 0x8000u || (rest == 0x8000u && (low & 0x10000u));
    return up ? low + 0x10000u : low;
}

static long compare(const char* mode, uint64_t stride) {
    std::vector<uint16_t> halves(chunk), narrowed(chunk);
    std::vector<float> floats(chunk), widened(chunk), rounded(chunk), rounded_bf16(chunk);
    long differences = 0;
    auto report = [&](const char* what, uint32_t in, uint32_t cpu, uint32_t ours) {
        if (differences++ < 8)
            std::printf("%s %s of %08x: the CPU's %08x, h2d's %08x\n", mode, what, in, cpu, ours);
    };
    for (int i = 0; i < chunk; ++i) halves[i] = (uint16_t)i;
    widen(halves.data(), widened.data());
    for (int i = 0; i < chunk; ++i) {
        const float cpu = expected_widened(halves[i]);
        if (h2d::bit_cast<uint32_t>(cpu) != h2d::bit_cast<uint32_t>(widened[i]))
            report("f16_to_float", i, h2d::bit_cast<uint32_t>(cpu), h2d::bit_cast<uint32_t>(widened[i]));
    }
    for (uint64_t start = 0; start < (1ull << 32); start += chunk * stride) {
        for (int i = 0; i < chunk; ++i) floats[i] = h2d::bit_cast<float>((uint32_t)(start + i));
        narrow(floats.data(), narrowed.data());
        round(floats.data(), rounded.data());
        round_bf16(floats.data(), rounded_bf16.data());
        for (int i = 0; i < chunk; ++i) {
            const uint16_t cpu = expected_narrowed(floats[i]);
            const uint32_t in = (uint32_t)(start + i);
            if (cpu != narrowed[i]) report("float_to_f16", in, cpu, narrowed[i]);
            const uint32_t cpu_rounded = h2d::bit_cast<uint32_t>(expected_widened(cpu));
            if (cpu_rounded != h2d::bit_cast<uint32_t>(rounded[i]))
                report("round_f16", in, cpu_rounded, h2d::bit_cast<uint32_t>(rounded[i]));
            if (expected_bf16(in) != h2d::bit_cast<uint32_t>(rounded_bf16[i]))
                report("round_bf16", in, expected_bf16(in), h2d::bit_cast<uint32_t>(rounded_bf16[i]));
        }
    }
    return differences;
}

int main(int argc, char** argv) {
    const uint64_t stride = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 1;
    long differences = compare("default", stride);
    _mm_setcsr(_mm_getcsr() | 0x8040);  // FTZ and DAZ
    differences += compare("ftz+daz", stride);
    std::printf("%ld differences\n", differences);
    return differences != 0;
}
