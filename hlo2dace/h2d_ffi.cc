// XLA's foreign-function handler for hlo2dace programs called inside jax.jit: XLA hands
// over its own argument and result buffers and the program's entry point is called on
// their data pointers directly, with no copy on either side.
//
//   custom_call @hlo2dace_call(args...) {session, entry, handle, slots, constants}
//
// session: a number drawn once per process, unused here: the addresses below are valid in
// one process only, and with it no other process finds this module in XLA's persistent
// compilation cache;
// entry, handle: addresses of the program's entry point and of its state (its persistent
// arrays: one call at a time per state, so calls of one program are serialised here, and
// with hlo2dace's direct calls of it through h2d_ffi_lock);
// slots: for each C argument after the state, the index of its buffer among the call's
// arguments followed by its results (>= 0) or, as -1 - j, constants[j], the address of a
// constant array the program keeps. XLA's default layouts are row-major, as the program's.
// Built once per machine by hlo2dace/interop.py with the headers of jax.ffi.include_dir().
#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <pthread.h>
#include <unordered_map>
#include <utility>

#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

namespace {

constexpr size_t kMaxPointers = 256;
using P = void *;
using Caller = void (*)(P, P, P *);

template <size_t... I>
void call_with(P entry, P handle, P *p, std::index_sequence<I...>) {
  reinterpret_cast<void (*)(P, decltype((void)I, P())...)>(entry)(handle, p[I]...);
}

template <size_t N>
void call_n(P entry, P handle, P *p) {
  call_with(entry, handle, p, std::make_index_sequence<N>());
}

// callers[n](entry, handle, p) calls entry(handle, p[0], ..., p[n - 1])
template <size_t... N>
constexpr std::array<Caller, sizeof...(N)> make_callers(std::index_sequence<N...>) {
  return {&call_n<N>...};
}

constexpr auto callers = make_callers(std::make_index_sequence<kMaxPointers + 1>());

std::atomic<int64_t> call_count{0};
// the pointers of the latest call, for tests that check XLA's buffers were used in place
std::mutex last_guard;
std::array<P, kMaxPointers> last_pointers;
size_t last_count = 0;

// the lock of a program's state: taken around every call of it here and, through
// h2d_ffi_lock, by hlo2dace's direct calls of the same program (h2d_call.c), which may run
// beside an XLA call on another thread
pthread_mutex_t *lock_of(int64_t handle) {
  static std::mutex guard;
  static std::unordered_map<int64_t, std::unique_ptr<pthread_mutex_t>> locks;
  std::lock_guard<std::mutex> hold(guard);
  auto &lock = locks[handle];
  if (!lock) {
    lock = std::make_unique<pthread_mutex_t>();
    pthread_mutex_init(lock.get(), nullptr);
  }
  return lock.get();
}

ffi::Error Call(int64_t /*session*/, int64_t entry, int64_t handle,
                ffi::Span<const int64_t> slots, ffi::Span<const int64_t> constants,
                ffi::RemainingArgs args, ffi::RemainingRets rets) {
  if (slots.size() > kMaxPointers)
    return ffi::Error::InvalidArgument("hlo2dace_call: too many arguments");
  P pointers[kMaxPointers];
  const int64_t n_args = static_cast<int64_t>(args.size());
  const int64_t n_rets = static_cast<int64_t>(rets.size());
  for (size_t k = 0; k < slots.size(); ++k) {
    const int64_t slot = slots[k];
    if (slot >= 0 && slot < n_args) {
      auto buffer = args.get<ffi::AnyBuffer>(slot);
      if (buffer.has_error()) return buffer.error();
      pointers[k] = buffer->untyped_data();
    } else if (slot >= n_args && slot < n_args + n_rets) {
      auto buffer = rets.get<ffi::AnyBuffer>(slot - n_args);
      if (buffer.has_error()) return buffer.error();
      pointers[k] = (*buffer)->untyped_data();
    } else if (slot < 0 && -1 - slot < static_cast<int64_t>(constants.size())) {
      pointers[k] = reinterpret_cast<P>(constants[-1 - slot]);
    } else {
      return ffi::Error::InvalidArgument("hlo2dace_call: slot out of range");
    }
  }
  pthread_mutex_t *lock = lock_of(handle);
  pthread_mutex_lock(lock);
  callers[slots.size()](reinterpret_cast<P>(entry), reinterpret_cast<P>(handle), pointers);
  pthread_mutex_unlock(lock);
  call_count.fetch_add(1, std::memory_order_relaxed);
  std::lock_guard<std::mutex> hold(last_guard);
  std::copy(pointers, pointers + slots.size(), last_pointers.begin());
  last_count = slots.size();
  return ffi::Error::Success();
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(H2dCall, Call,
                              ffi::Ffi::Bind()
                                  .Attr<int64_t>("session")
                                  .Attr<int64_t>("entry")
                                  .Attr<int64_t>("handle")
                                  .Attr<ffi::Span<const int64_t>>("slots")
                                  .Attr<ffi::Span<const int64_t>>("constants")
                                  .RemainingArgs()
                                  .RemainingRets());

// the lock of the state at `handle`, for the direct calls of its program (h2d_call.c)
extern "C" void *h2d_ffi_lock(int64_t handle) { return lock_of(handle); }

// the number of programs run through this handler: tests tell a DaCe call from XLA's code
extern "C" int64_t h2d_ffi_calls() { return call_count.load(std::memory_order_relaxed); }

// the latest call's pointers into out[0..n); returns how many it had
extern "C" int64_t h2d_ffi_last_pointers(int64_t *out, int64_t n) {
  std::lock_guard<std::mutex> hold(last_guard);
  for (size_t k = 0; k < last_count && static_cast<int64_t>(k) < n; ++k)
    out[k] = reinterpret_cast<int64_t>(last_pointers[k]);
  return static_cast<int64_t>(last_count);
}
