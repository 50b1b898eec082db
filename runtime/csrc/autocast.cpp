// torch.autocast on libtorch's thread-local autocast state, step for step
// as torch/amp/autocast_mode.py's __enter__ / __exit__ do it.
#include <ATen/autocast_mode.h>

#include "common.h"
#include "context.h"

namespace {
c10::DeviceType device(int8_t d) { return static_cast<c10::DeviceType>(d); }
}  // namespace

extern "C" {

// `cache`: 0 or 1, or -1 to keep the thread's setting (Python's default:
// `cache_enabled=None` reads `torch.is_autocast_cache_enabled()`).
tch_scope_status tch_scope_autocast_enter(int8_t device_type, int8_t dtype, bool enabled, int8_t cache,
                                          tch_scope_autocast_saved* saved) {
  return tch_scope::guarded([&] {
    auto d = device(device_type);
    saved->cache_enabled = at::autocast::is_autocast_cache_enabled();
    saved->enabled = at::autocast::is_autocast_enabled(d);
    saved->dtype = static_cast<int8_t>(at::autocast::get_autocast_dtype(d));
    at::autocast::set_autocast_enabled(d, enabled);
    at::autocast::set_autocast_dtype(d, static_cast<at::ScalarType>(dtype));
    at::autocast::increment_nesting();
    if (cache >= 0) at::autocast::set_autocast_cache_enabled(cache != 0);
  });
}

tch_scope_status tch_scope_autocast_exit(int8_t device_type, const tch_scope_autocast_saved* saved) {
  return tch_scope::guarded([&] {
    auto d = device(device_type);
    // The cast cache lives as long as the outermost autocast.
    if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
    at::autocast::set_autocast_enabled(d, saved->enabled);
    at::autocast::set_autocast_dtype(d, static_cast<at::ScalarType>(saved->dtype));
    at::autocast::set_autocast_cache_enabled(saved->cache_enabled);
  });
}

tch_scope_status tch_scope_autocast_get(int8_t device_type, bool* enabled, int8_t* dtype) {
  return tch_scope::guarded([&] {
    *enabled = at::autocast::is_autocast_enabled(device(device_type));
    *dtype = static_cast<int8_t>(at::autocast::get_autocast_dtype(device(device_type)));
  });
}

bool tch_scope_autocast_cache_enabled() { return at::autocast::is_autocast_cache_enabled(); }

}  // extern "C"
