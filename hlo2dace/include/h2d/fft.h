// stablehlo.fft through FFTW (see fft.py). Included once per program, after h2d/ops.h.
//
// Plans are made with FFTW_ESTIMATE, which picks the same algorithm every time and never
// touches the arrays while planning, so a plan is made on the call's own arrays the first
// time a transform is seen and run with FFTW's new-array execute functions afterwards
// (cached by the transform and the arrays' alignment, as those functions require).
// The cache is under a mutex, and FFTW's planner is made thread-safe (programs share it).
#ifndef H2D_FFT_H
#define H2D_FFT_H

#include <fftw3.h>
#include <omp.h>

#include <algorithm>
#include <complex>
#include <cstdint>
#include <map>
#include <mutex>
#include <vector>

namespace h2d::fft {

enum Kind { FFT = 0, IFFT = 1, RFFT = 2, IRFFT = 3 };
enum Step { C2C_FORWARD = 0, C2C_BACKWARD = 1, R2C = 2, C2R = 3 };

// transforms of fewer elements (times log2 of the length) run on one thread
constexpr int64_t PARALLEL_FFT_WORK = int64_t(1) << 18;

inline bool parallel(int64_t count, int64_t n) {
    int64_t work = count * n;
    for (int64_t m = n; m > 1; m /= 2) work += count * n;
    return work >= PARALLEL_FFT_WORK;
}

template <typename T> struct Fftw;

#define H2D_FFTW(T, P)                                                                     \
    template <> struct Fftw<T> {                                                           \
        using Plan = P##_plan;                                                             \
        using Complex = P##_complex;                                                       \
        static void init() {                                                               \
            P##_init_threads();                                                            \
            P##_make_planner_thread_safe();                                                \
        }                                                                                  \
        static void* malloc(size_t bytes) { return P##_malloc(bytes); }                    \
        static void free(void* p) { P##_free(p); }                                         \
        static int alignment(void* p) { return P##_alignment_of(static_cast<T*>(p)); }     \
        static Plan plan(Step step, int rank, const fftw_iodim64* dims, int loops,         \
                         const fftw_iodim64* loop_dims, void* in, void* out, int threads) { \
            P##_plan_with_nthreads(threads);                                               \
            const unsigned flags = FFTW_ESTIMATE | (step == C2R ? FFTW_DESTROY_INPUT : 0); \
            switch (step) {                                                                \
            case R2C:                                                                      \
                return P##_plan_guru64_dft_r2c(rank, dims, loops, loop_dims,               \
                                               static_cast<T*>(in),                        \
                                               static_cast<Complex*>(out), flags);         \
            case C2R:                                                                      \
                return P##_plan_guru64_dft_c2r(rank, dims, loops, loop_dims,               \
                                               static_cast<Complex*>(in),                  \
                                               static_cast<T*>(out), flags);               \
            default:                                                                       \
                return P##_plan_guru64_dft(rank, dims, loops, loop_dims,                   \
                                           static_cast<Complex*>(in),                      \
                                           static_cast<Complex*>(out),                     \
                                           step == C2C_FORWARD ? FFTW_FORWARD              \
                                                               : FFTW_BACKWARD, flags);    \
            }                                                                              \
        }                                                                                  \
        static void execute(Step step, Plan plan, void* in, void* out) {                   \
            if (step == R2C)                                                               \
                P##_execute_dft_r2c(plan, static_cast<T*>(in), static_cast<Complex*>(out)); \
            else if (step == C2R)                                                          \
                P##_execute_dft_c2r(plan, static_cast<Complex*>(in), static_cast<T*>(out)); \
            else                                                                           \
                P##_execute_dft(plan, static_cast<Complex*>(in),                           \
                                static_cast<Complex*>(out));                               \
        }                                                                                  \
    };
H2D_FFTW(float, fftwf)
H2D_FFTW(double, fftw)
#undef H2D_FFTW

inline std::mutex& plans_mutex() {
    static std::mutex mutex;
    return mutex;
}

// One FFTW transform along `dim` (n, input stride, output stride), repeated over `loops`,
// strides in elements of the input's and the output's type, on `threads` threads.
template <typename T>
void execute(Step step, fftw_iodim64 dim, std::vector<fftw_iodim64> loops, void* in, void* out,
             int threads) {
    using F = Fftw<T>;
    static std::map<std::vector<int64_t>, typename F::Plan> plans;
    static std::once_flag ready;
    std::vector<int64_t> key = {step, F::alignment(in), F::alignment(out), in == out, threads,
                                dim.n, dim.is, dim.os};
    for (const auto& d : loops) key.insert(key.end(), {d.n, d.is, d.os});
    typename F::Plan plan;
    {
        std::lock_guard<std::mutex> lock(plans_mutex());
        std::call_once(ready, F::init);
        auto found = plans.find(key);
        if (found == plans.end()) {
            found = plans.emplace(key, F::plan(step, 1, &dim, int(loops.size()), loops.data(),
                                               in, out, threads)).first;
        }
        plan = found->second;
    }
    F::execute(step, plan, in, out);
}

// Transforms of `count` contiguous rows of length `n` (real elements for R2C and C2R),
// FFTW's threads sharing a large batch or a long transform.
template <typename T> void rows(Step step, int64_t n, int64_t count, void* in, void* out) {
    const int64_t in_n = step == C2R ? n / 2 + 1 : n, out_n = step == R2C ? n / 2 + 1 : n;
    execute<T>(step, {n, 1, 1}, {{count, in_n, out_n}}, in, out,
               parallel(count, n) ? omp_get_max_threads() : 1);
}

// Complex transforms along the middle dimension of [outer, n, inner] arrays, from `in` to
// `out` (which may be the same): blocks of columns are gathered into a contiguous buffer,
// transformed and scattered back, in parallel over the blocks (FFTW's own plans for
// strided transforms run several times slower).
template <typename T>
void columns(Step step, int64_t outer, int64_t n, int64_t inner, const std::complex<T>* in,
             std::complex<T>* out) {
    using F = Fftw<T>;
    constexpr int64_t B = 64 / sizeof(T);  // columns per block: two cache lines of a row
    const int64_t blocks = (inner + B - 1) / B;
#pragma omp parallel if (parallel(outer * inner, n))
    {
        auto* buffer = static_cast<std::complex<T>*>(F::malloc(sizeof(std::complex<T>) * B * n));
#pragma omp for schedule(static)
        for (int64_t item = 0; item < outer * blocks; ++item) {
            const int64_t j0 = (item % blocks) * B, base = (item / blocks) * n * inner + j0;
            const int64_t width = std::min(B, inner - j0);
            for (int64_t i = 0; i < n; ++i)
                for (int64_t j = 0; j < width; ++j) buffer[j * n + i] = in[base + i * inner + j];
            execute<T>(step, {n, 1, 1}, {{width, n, n}}, buffer, buffer, 1);
            for (int64_t i = 0; i < n; ++i)
                for (int64_t j = 0; j < width; ++j) out[base + i * inner + j] = buffer[j * n + i];
        }
        F::free(buffer);
    }
}

template <typename T> void scale(T* data, int64_t n, T factor) {
#pragma omp parallel for schedule(static) if (n >= PARALLEL_FFT_WORK)
    for (int64_t i = 0; i < n; ++i) data[i] *= factor;
}

// stablehlo.fft of `batch` contiguous arrays over the trailing dimensions `lengths`, as
// XLA's CPU runtime computes it (ducc0): one dimension at a time, the inverse transforms
// scaled by 1 / prod(lengths). RFFT transforms the last dimension first (real to complex);
// IRFFT transforms the others from the input into `scratch` (of the input's shape) and the
// last one from there (complex to real, reading only the real parts of the zero and
// Nyquist frequencies), so an input that is not Hermitian gives XLA's result.
template <typename T>
void run(Kind kind, std::vector<int64_t> lengths, int64_t batch, const void* input,
         void* output, std::complex<T>* scratch) {
    using C = std::complex<T>;
    auto* in = static_cast<C*>(const_cast<void*>(input));  // FFTW's types; only read
    const int rank = int(lengths.size());
    const int64_t last = lengths.back();
    int64_t total = 1;
    for (int64_t n : lengths) total *= n;
    std::vector<int64_t> complex_shape = lengths;  // the complex side's dimensions
    if (kind == RFFT || kind == IRFFT) complex_shape.back() = last / 2 + 1;
    int64_t complex_size = batch;
    for (int64_t n : complex_shape) complex_size *= n;
    auto leading = [&](Step step, const C* from, C* to) {
        int64_t inner = complex_shape.back();
        for (int d = rank - 1; d-- > 0;) {
            const int64_t n = lengths[d];
            columns<T>(step, complex_size / (n * inner), n, inner, from, to);
            from = to;
            inner *= n;
        }
    };
    const int64_t count = batch * (total / last);
    auto* out = static_cast<C*>(output);
    switch (kind) {
    case FFT:
    case IFFT: {
        const Step step = kind == FFT ? C2C_FORWARD : C2C_BACKWARD;
        rows<T>(step, last, count, in, out);
        leading(step, out, out);
        break;
    }
    case RFFT:
        rows<T>(R2C, last, count, in, out);
        leading(C2C_FORWARD, out, out);
        break;
    case IRFFT:
        if (rank == 1) std::copy_n(in, complex_size, scratch);
        leading(C2C_BACKWARD, in, scratch);
        rows<T>(C2R, last, count, scratch, output);
        break;
    }
    if (kind == IFFT || kind == IRFFT) {
        const int64_t values = kind == IFFT ? 2 * complex_size : batch * total;
        scale(static_cast<T*>(output), values, T(1.0 / double(total)));
    }
}

}  // namespace h2d::fft

#endif  // H2D_FFT_H
