// The thread's current CUDA device, through ATen's device-generic
// accelerator API: it needs no CUDA headers and reaches CUDA only when
// libtorch_cuda is loaded.
#include <ATen/DeviceAccelerator.h>

#include "device.h"

namespace {
bool cuda_is_the_accelerator() {
  auto acc = at::getAccelerator(false);
  return acc.has_value() && *acc == c10::DeviceType::CUDA;
}
}  // namespace

extern "C" {

tch_scope_status tch_scope_cuda_device_count(int32_t* count) {
  return tch_scope::guarded([&] {
    *count = cuda_is_the_accelerator() ? static_cast<int32_t>(at::accelerator::deviceCount()) : 0;
  });
}

tch_scope_status tch_scope_cuda_exchange_device(int32_t index, int32_t* previous) {
  return tch_scope::guarded([&] {
    *previous = static_cast<int32_t>(
        at::accelerator::exchangeDevice(static_cast<c10::DeviceIndex>(index)));
  });
}

tch_scope_status tch_scope_cuda_current_device(int32_t* index) {
  return tch_scope::guarded(
      [&] { *index = static_cast<int32_t>(at::accelerator::getDeviceIndex()); });
}


}  // extern "C"
