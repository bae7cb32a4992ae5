// hlo2dace's C++ helpers: shifts, counts and bit casts.
// (Included through h2d/ops.h; each topic header builds on the one before it.)
#pragma once

#include "arithmetic.h"

namespace h2d {

// ------------------------------------------------------------------ bits
// Shifts by the bit width or more: 0 (left, logical) or the sign (arithmetic).
template <typename T> H2D_FN inline T shl(T a, T b) {
    constexpr uns<T> W = sizeof(T) * 8;
    if ((uns<T>)b >= W) return 0;
    return (T)((uns<T>)a << (uns<T>)b);
}
template <typename T> H2D_FN inline T shr_logical(T a, T b) {
    constexpr uns<T> W = sizeof(T) * 8;
    if ((uns<T>)b >= W) return 0;
    return (T)((uns<T>)a >> (uns<T>)b);
}
template <typename T> H2D_FN inline T shr_arithmetic(T a, T b) {
    using S = std::make_signed_t<T>;
    constexpr uns<T> W = sizeof(T) * 8;
    if ((uns<T>)b >= W) return (T)((S)a < 0 ? (S)-1 : (S)0);
    return (T)((S)a >> (uns<T>)b);
}
// The same for narrow (2/4-bit) integers stored in a byte: the amount is read as an
// unsigned `Bits`-bit number (negative amounts are out of range), and the arithmetic shift
// extends bit `Bits - 1` for unsigned types too.
template <int Bits, typename T> H2D_FN inline T shl_n(T a, T b) {
    unsigned amount = (uint8_t)b & ((1u << Bits) - 1);
    if (amount >= (unsigned)Bits) return 0;
    return wrap<Bits>((T)((uint8_t)a << amount));
}
template <int Bits, typename T> H2D_FN inline T shr_logical_n(T a, T b) {
    unsigned amount = (uint8_t)b & ((1u << Bits) - 1);
    if (amount >= (unsigned)Bits) return 0;
    return wrap<Bits>((T)((uint8_t)((uint8_t)a & ((1u << Bits) - 1)) >> amount));
}
template <int Bits, typename T> H2D_FN inline T shr_arithmetic_n(T a, T b) {
    unsigned amount = (uint8_t)b & ((1u << Bits) - 1);
    int extended = (int8_t)((uint8_t)a << (8 - Bits)) >> (8 - Bits);
    if (amount >= (unsigned)Bits) return wrap<Bits>((T)(extended < 0 ? -1 : 0));
    return wrap<Bits>((T)(extended >> amount));
}
template <typename T> H2D_FN inline T popcnt(T a) {
    if constexpr (std::is_same_v<T, bool>) return a;
    else return (T)__builtin_popcountll((unsigned long long)(uns<T>)a);
}
template <typename T> H2D_FN inline T clz(T a, int bits = sizeof(T) * 8) {
    unsigned long long u = (unsigned long long)(uns<T>)a & ((bits >= 64) ? ~0ull : ((1ull << bits) - 1));
    if (u == 0) return (T)bits;
    return (T)(__builtin_clzll(u) - (64 - bits));
}
template <typename T> H2D_FN inline T not_(T a) {
    if constexpr (std::is_same_v<T, bool>) return !a;
    else return (T)~a;
}

}  // namespace h2d
