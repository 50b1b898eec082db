// Shared by the shim's translation units: the error slot and the wrapper
// that turns a C++ exception into a status.
#pragma once
#include <exception>
#include <string>

#include <c10/util/Exception.h>

#include "shim.h"

namespace tch_scope {

std::string& last_error_slot();

// Test-only fault injection (see tch_scope_fault_inject in shim.h): true
// when the calling shim function `op` is to fail this time. One
// thread-local integer is read when nothing is armed.
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
