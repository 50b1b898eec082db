// Anomaly detection and deterministic algorithms: process-wide flags in
// libtorch (every thread sees them).
#include <ATen/Context.h>
#include <torch/csrc/autograd/anomaly_mode.h>

#include "common.h"
#include "context.h"

using torch::autograd::AnomalyMode;

extern "C" {

void tch_scope_anomaly_get(bool* enabled, bool* check_nan) {
  *enabled = AnomalyMode::is_enabled();
  *check_nan = AnomalyMode::should_check_nan();
}

void tch_scope_anomaly_set(bool enabled, bool check_nan) {
  AnomalyMode::set_enabled(enabled, check_nan);
}

// get, then set: a first scope's one call. The mode it found comes back as
// bits (1 enabled, 2 check_nan), in a register.
uint32_t tch_scope_anomaly_swap(bool enabled, bool check_nan) {
  uint32_t was = (AnomalyMode::is_enabled() ? 1u : 0u) | (AnomalyMode::should_check_nan() ? 2u : 0u);
  AnomalyMode::set_enabled(enabled, check_nan);
  return was;
}

void tch_scope_deterministic_get(bool* enabled, bool* warn_only) {
  *enabled = at::globalContext().deterministicAlgorithms();
  *warn_only = at::globalContext().deterministicAlgorithmsWarnOnly();
}

tch_scope_status tch_scope_deterministic_set(bool enabled, bool warn_only) {
  return tch_scope::guarded(
      [&] { at::globalContext().setDeterministicAlgorithms(enabled, warn_only); });
}

// get, then set: a first scope's one call. `*was` gets the flags found as
// bits (1 enabled, 2 warn_only). Faults are injected under the setter's
// name, which is what fails.
tch_scope_status tch_scope_deterministic_swap(bool enabled, bool warn_only, uint32_t* was) {
  auto& ctx = at::globalContext();
  *was = (ctx.deterministicAlgorithms() ? 1u : 0u) |
         (ctx.deterministicAlgorithmsWarnOnly() ? 2u : 0u);
  return tch_scope::guarded([&] { ctx.setDeterministicAlgorithms(enabled, warn_only); },
                            "tch_scope_deterministic_set");
}

}  // extern "C"
