// The shim's error slot and test-only fault injection (common.h).
#include <cstring>

#include "common.h"

namespace tch_scope {
std::string& last_error_slot() {
  static thread_local std::string slot;
  return slot;
}

namespace {
// Armed per thread, so parallel tests don't trip each other. Plain types:
// no thread_local constructor runs on the normal path.
thread_local int32_t fault_remaining = 0;
thread_local char fault_op[96] = {0};
}  // namespace

bool injected_fault(const char* op) noexcept {
  if (fault_remaining <= 0) return false;
  if (std::strcmp(fault_op, "*") != 0 && std::strcmp(op, fault_op) != 0) return false;
  --fault_remaining;
  try {
    last_error_slot() = std::string("injected fault in ") + op;
  } catch (...) {
  }
  return true;
}
}  // namespace tch_scope

extern "C" void tch_scope_fault_inject(const char* op, int32_t times) {
  std::strncpy(tch_scope::fault_op, op, sizeof tch_scope::fault_op - 1);
  tch_scope::fault_op[sizeof tch_scope::fault_op - 1] = 0;
  tch_scope::fault_remaining = times;
}

extern "C" const char* tch_scope_last_error(void) {
  return tch_scope::last_error_slot().c_str();
}
