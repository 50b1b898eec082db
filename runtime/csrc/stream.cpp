// CUDA streams and events through c10's device-generic interface
// (c10::Stream, c10::Event, the registered CUDA DeviceGuardImpl): what
// c10::cuda::CUDAStreamGuard and torch.cuda.Event do, without CUDA headers.
#include <c10/core/Event.h>
#include <c10/core/Stream.h>
#include <c10/core/impl/VirtualGuardImpl.h>

#include "stream.h"

namespace {

constexpr auto CUDA = c10::DeviceType::CUDA;

c10::impl::VirtualGuardImpl cuda() { return c10::impl::VirtualGuardImpl(CUDA); }

c10::Device cuda_device(int8_t index) { return c10::Device(CUDA, static_cast<c10::DeviceIndex>(index)); }

c10::Stream unpack(tch_scope_stream s) {
  return c10::Stream::unpack3(s.id, static_cast<c10::DeviceIndex>(s.device), CUDA);
}

tch_scope_stream pack(const c10::Stream& s) {
  TORCH_CHECK(s.device_type() == CUDA, "not a CUDA stream: ", s);
  return {s.id(), static_cast<int8_t>(s.device_index())};
}

c10::Event* event(void* e) { return static_cast<c10::Event*>(e); }
const c10::Event* event(const void* e) { return static_cast<const c10::Event*>(e); }

}  // namespace

extern "C" {

tch_scope_status tch_scope_stream_pool(int8_t index, bool high_priority, tch_scope_stream* out) {
  return tch_scope::guarded(
      [&] { *out = pack(cuda().getStreamFromGlobalPool(cuda_device(index), high_priority)); });
}

tch_scope_status tch_scope_stream_current(int8_t index, tch_scope_stream* out) {
  return tch_scope::guarded([&] { *out = pack(cuda().getStream(cuda_device(index))); });
}

tch_scope_status tch_scope_stream_default(int8_t index, tch_scope_stream* out) {
  return tch_scope::guarded([&] { *out = pack(cuda().getDefaultStream(cuda_device(index))); });
}

tch_scope_status tch_scope_stream_enter(tch_scope_stream s, int8_t* previous_device,
                                        tch_scope_stream* previous_stream) {
  return tch_scope::guarded([&] {
    auto impl = cuda();
    auto stream = unpack(s);
    auto before = impl.exchangeDevice(stream.device());
    try {
      *previous_stream = pack(impl.exchangeStream(stream));
    } catch (...) {
      impl.setDevice(before);
      throw;
    }
    *previous_device = static_cast<int8_t>(before.index());
  });
}

tch_scope_status tch_scope_stream_leave(int8_t previous_device, tch_scope_stream previous_stream) {
  return tch_scope::guarded([&] {
    auto impl = cuda();
    impl.exchangeStream(unpack(previous_stream));
    impl.setDevice(cuda_device(previous_device));
  });
}

tch_scope_status tch_scope_stream_synchronize(tch_scope_stream s) {
  return tch_scope::guarded([&] { unpack(s).synchronize(); });
}

tch_scope_status tch_scope_stream_query(tch_scope_stream s, bool* done) {
  return tch_scope::guarded([&] { *done = unpack(s).query(); });
}

tch_scope_status tch_scope_stream_wait(tch_scope_stream waiter, tch_scope_stream other) {
  return tch_scope::guarded([&] {
    c10::Event e(CUDA);
    e.record(unpack(other));
    e.block(unpack(waiter));
  });
}

tch_scope_status tch_scope_event_new(void** out) {
  return tch_scope::guarded([&] { *out = new c10::Event(CUDA, c10::EventFlag::BACKEND_DEFAULT); });
}

void tch_scope_event_free(void* e) { delete event(e); }

tch_scope_status tch_scope_event_record(void* e, int64_t id, int8_t index) {
  return tch_scope::guarded([&] { event(e)->record(unpack({id, index})); });
}

tch_scope_status tch_scope_event_synchronize(const void* e) {
  return tch_scope::guarded([&] { event(e)->synchronize(); });
}

tch_scope_status tch_scope_event_query(const void* e, bool* done) {
  return tch_scope::guarded([&] { *done = event(e)->query(); });
}

tch_scope_status tch_scope_event_elapsed(const void* start, const void* end, double* ms) {
  return tch_scope::guarded([&] {
    event(end)->synchronize();
    *ms = event(start)->elapsedTime(*event(end));
  });
}

}  // extern "C"
