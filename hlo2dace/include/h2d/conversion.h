// hlo2dace's C++ helpers: total order comparison and conversions between element types.
// (Included through h2d/ops.h; each topic header builds on the one before it.)
#pragma once

#include "transcendental.h"

namespace h2d {

// ------------------------------------------------------------------ comparison
// TOTALORDER: -NaN < -Inf < ... < -0 < +0 < ... < +Inf < +NaN, by the sign-magnitude bits.
// The magnitude bits of a negative value flipped: its own inverse.
template <typename I> H2D_FN inline I flip_negative(I i) {
    return (I)(i ^ ((i >> (sizeof(I) * 8 - 1)) & std::numeric_limits<I>::max()));
}
template <typename T> H2D_FN inline auto total_order_key(T a) {
    using I = std::conditional_t<sizeof(T) == 4, int32_t, int64_t>;
    return flip_negative(bit_cast<I>(a));
}
template <typename T, typename I> H2D_FN inline T from_total_order_key(I key) {
    return bit_cast<T>(flip_negative(key));
}
// A maximum or minimum reduction in lanes folds the total order keys of its elements,
// flushed first as max_ and min_ flush their results: one integer max or min per element
// in place of a dozen operations, the same bits for every value but NaN. NaNs are kept
// apart: the reduction's code flags them in its lanes and takes a row's first, as max_
// and min_ keep the first NaN they meet.
template <typename T> H2D_FN inline auto order_key(T a) { return total_order_key(flush(a)); }

// ------------------------------------------------------------------ conversion
// Float to integer as XLA converts: NaN -> 0, out of range saturates.
template <typename To, typename From> H2D_FN inline To convert(From x) {
    if constexpr (is_complex<From> && !is_complex<To>) {
        return convert<To>(x.real());
    } else if constexpr (is_complex<To>) {
        using R = typename To::value_type;
        if constexpr (is_complex<From>) return To((R)x.real(), (R)x.imag());
        else return To(convert<R>(x), R(0));
    } else if constexpr (std::is_same_v<To, bool>) {
        return x != From(0);
    } else if constexpr (std::is_same_v<From, bool> && std::is_arithmetic_v<To>) {
        return x ? To(1) : To(0);  // GCC 12 vectorises no (float)bool in a loop with others
    } else if constexpr (is_int<To> && std::is_floating_point_v<From>) {
        if (std::isnan(x)) return 0;
        if (x <= (From)std::numeric_limits<To>::min()) return std::numeric_limits<To>::min();
        if (x >= (From)std::numeric_limits<To>::max()) return std::numeric_limits<To>::max();
        return (To)x;
    } else {
        return (To)x;
    }
}

}  // namespace h2d
