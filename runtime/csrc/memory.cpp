// CUDA caching-allocator statistics and device synchronisation, through
// ATen's device-generic accelerator API (no CUDA headers needed). Each call
// fails with a message when CUDA is not the accelerator.
#include <ATen/DeviceAccelerator.h>

#include <stdexcept>

#include "memory.h"

namespace {
void require_cuda() {
  auto acc = at::getAccelerator(false);
  if (!acc.has_value() || *acc != c10::DeviceType::CUDA) {
    throw std::runtime_error("CUDA is not available in this libtorch");
  }
}

constexpr size_t kAggregate = static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE);
}  // namespace

extern "C" {

tch_scope_status tch_scope_cuda_memory_stats(int32_t device, tch_scope_memory_stats* out) {
  return tch_scope::guarded([&] {
    require_cuda();
    auto s = at::accelerator::getDeviceStats(static_cast<c10::DeviceIndex>(device));
    out->allocated = s.allocated_bytes[kAggregate].current;
    out->allocated_peak = s.allocated_bytes[kAggregate].peak;
    out->reserved = s.reserved_bytes[kAggregate].current;
    out->reserved_peak = s.reserved_bytes[kAggregate].peak;
  });
}

tch_scope_status tch_scope_cuda_reset_peak(int32_t device) {
  return tch_scope::guarded([&] {
    require_cuda();
    at::accelerator::resetPeakStats(static_cast<c10::DeviceIndex>(device));
  });
}

tch_scope_status tch_scope_cuda_empty_cache(void) {
  return tch_scope::guarded([&] {
    require_cuda();
    at::accelerator::emptyCache();
  });
}

tch_scope_status tch_scope_cuda_synchronize(int32_t device) {
  return tch_scope::guarded([&] {
    require_cuda();
    at::accelerator::synchronizeDevice(static_cast<c10::DeviceIndex>(device));
  });
}

}  // extern "C"
