// What every part of the shim's C ABI shares (common.cpp): the status type,
// the last error's message, test-only fault injection and the CUDA link
// anchor. Calls that can fail return a tch_scope_status (0 = ok) and leave
// a message for tch_scope_last_error(); calls that only move bits in memory
// cannot fail and return their value. No C++ exception crosses the ABI.
//
// For the shim's own C++ translation units, the part below the C ABI holds
// the error slot and `guarded`, which turns an exception into a status.
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef int32_t tch_scope_status;  // 0 = ok, 1 = error (see last_error)

// Message of the last failed call on this thread ("" if none).
const char* tch_scope_last_error(void);

// Test-only fault injection: the next `times` calls on this thread of the
// status-returning shim function named `op` (e.g. "tch_scope_rng_restore")
// fail with "injected fault in <op>" without doing anything; `op` = "*"
// matches every such function; `times` = 0 disarms. Reached from Rust only
// through tch_scope::__private.
void tch_scope_fault_inject(const char* op, int32_t times);

// 1 when this build of the shim linked libtorch_cuda (see cuda_link.cpp).
int32_t tch_scope_built_with_cuda(void);

#ifdef __cplusplus
}  // extern "C"

#include <exception>
#include <string>

#include <c10/util/Exception.h>

namespace tch_scope {

std::string& last_error_slot();

// Test-only fault injection (see tch_scope_fault_inject above): true when
// the calling shim function `op` is to fail this time. One thread-local
// integer is read when nothing is armed.
bool injected_fault(const char* op) noexcept;

// Runs `f`, turning an exception into status 1 and a message. `op` is the
// calling function's name (filled in at the call site), for fault injection.
template <class F>
tch_scope_status guarded(F&& f, const char* op = __builtin_FUNCTION()) noexcept {
  if (injected_fault(op)) [[unlikely]] {
    return 1;
  }
  try {
    f();
    last_error_slot().clear();
    return 0;
  } catch (const c10::Error& e) {
    // The message alone: what() appends a C++ backtrace of 20-odd lines.
    try { last_error_slot() = e.what_without_backtrace(); } catch (...) {}
    return 1;
  } catch (const std::exception& e) {
    try { last_error_slot() = e.what(); } catch (...) {}
    return 1;
  } catch (...) {
    try { last_error_slot() = "unknown C++ exception"; } catch (...) {}
    return 1;
  }
}

}  // namespace tch_scope
#endif  // __cplusplus
