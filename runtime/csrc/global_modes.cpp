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

void tch_scope_deterministic_get(bool* enabled, bool* warn_only) {
  *enabled = at::globalContext().deterministicAlgorithms();
  *warn_only = at::globalContext().deterministicAlgorithmsWarnOnly();
}

tch_scope_status tch_scope_deterministic_set(bool enabled, bool warn_only) {
  return tch_scope::guarded(
      [&] { at::globalContext().setDeterministicAlgorithms(enabled, warn_only); });
}

}  // extern "C"
