// stablehlo.rng_bit_generator's bit generators (see rng.py), as XLA builds them
// (xla/hlo/builder/lib/prng.cc): Threefry-2x32 with 20 rounds and Philox-4x32 with 10.
// Written without loops so that the maps calling them vectorise (see h2d::scalar_loop).
#ifndef H2D_RNG_H
#define H2D_RNG_H

#include <atomic>
#include <cstdint>

namespace h2d::rng {

H2D_FN inline uint32_t rotl(uint32_t v, int distance) {
    return (v << distance) | (v >> (32 - distance));
}

// Four Threefry rounds with the rotations r0..r3, then key injection number `s`.
H2D_FN inline void threefry_block(uint32_t& x0, uint32_t& x1, int r0, int r1, int r2, int r3,
                           uint32_t k0, uint32_t k1, uint32_t s) {
    x0 += x1; x1 = rotl(x1, r0) ^ x0;
    x0 += x1; x1 = rotl(x1, r1) ^ x0;
    x0 += x1; x1 = rotl(x1, r2) ^ x0;
    x0 += x1; x1 = rotl(x1, r3) ^ x0;
    x0 += k0;
    x1 += k1 + s;
}

// Threefry-2x32 of the 64-bit `counter` (low word first) under the 64-bit `key`.
H2D_FN inline void threefry2x32(uint64_t key, uint64_t counter, uint32_t& x0, uint32_t& x1) {
    const uint32_t k0 = uint32_t(key), k1 = uint32_t(key >> 32);
    const uint32_t k2 = 0x1BD11BDAu ^ k0 ^ k1;
    x0 = uint32_t(counter) + k0;
    x1 = uint32_t(counter >> 32) + k1;
    threefry_block(x0, x1, 13, 15, 26, 6, k1, k2, 1);
    threefry_block(x0, x1, 17, 29, 16, 24, k2, k0, 2);
    threefry_block(x0, x1, 13, 15, 26, 6, k0, k1, 3);
    threefry_block(x0, x1, 17, 29, 16, 24, k1, k2, 4);
    threefry_block(x0, x1, 13, 15, 26, 6, k2, k0, 5);
}

// One Philox round, then the key is raised.
H2D_FN inline void philox_round(uint32_t (&x)[4], uint32_t& k0, uint32_t& k1) {
    const uint64_t p0 = uint64_t(x[0]) * 0xD2511F53u, p1 = uint64_t(x[2]) * 0xCD9E8D57u;
    const uint32_t x1 = x[1], x3 = x[3];
    x[0] = uint32_t(p1 >> 32) ^ x1 ^ k0;
    x[1] = uint32_t(p1);
    x[2] = uint32_t(p0 >> 32) ^ x3 ^ k1;
    x[3] = uint32_t(p0);
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
}

// Philox-4x32 of the 128-bit counter (low, high) under the 64-bit `key`.
H2D_FN inline void philox4x32(uint64_t key, uint64_t low, uint64_t high, uint32_t (&x)[4]) {
    uint32_t k0 = uint32_t(key), k1 = uint32_t(key >> 32);
    x[0] = uint32_t(low);
    x[1] = uint32_t(low >> 32);
    x[2] = uint32_t(high);
    x[3] = uint32_t(high >> 32);
    philox_round(x, k0, k1); philox_round(x, k0, k1);
    philox_round(x, k0, k1); philox_round(x, k0, k1);
    philox_round(x, k0, k1); philox_round(x, k0, k1);
    philox_round(x, k0, k1); philox_round(x, k0, k1);
    philox_round(x, k0, k1); philox_round(x, k0, k1);
}

// stablehlo.rng, XLA's stateful generator: every execution of an op takes the next stream
// number of the program, so that calls give new numbers as XLA's do.
inline uint64_t next_stream() {  // the host's: a device counter is not written yet
    static std::atomic<uint64_t> streams{0};
    return streams.fetch_add(1, std::memory_order_relaxed);
}

// 128 random bits for element `i` of stream `stream` of the op numbered `op`.
H2D_FN inline void stream_words(uint64_t op, uint64_t stream, uint64_t i, uint64_t (&w)[2]) {
    uint32_t x[4];
    philox4x32(0x9E3779B97F4A7C15ULL * (op + 1), i, stream, x);
    w[0] = x[0] | (uint64_t(x[1]) << 32);
    w[1] = x[2] | (uint64_t(x[3]) << 32);
}

}  // namespace h2d::rng

#endif  // H2D_RNG_H
