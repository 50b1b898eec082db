// Shared by the shim's translation units: the error slot and the wrapper
// that turns a C++ exception into a status.
#pragma once
#include <exception>
#include <string>

#include "shim.h"

namespace tch_scope {

std::string& last_error_slot();

template <class F>
tch_scope_status guarded(F&& f) noexcept {
  try {
    f();
    last_error_slot().clear();
    return 0;
  } catch (const std::exception& e) {
    try { last_error_slot() = e.what(); } catch (...) {}
    return 1;
  } catch (...) {
    try { last_error_slot() = "unknown C++ exception"; } catch (...) {}
    return 1;
  }
}

}  // namespace tch_scope
