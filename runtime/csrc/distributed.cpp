// c10d process groups for the `distributed` scope. Compiled with Gloo only
// when build.rs found gloo's headers (TCH_SCOPE_GLOO); the code itself is
// in libtorch_cpu.so, the headers are needed only to declare it.
#include "distributed.h"

#include <stdexcept>
#include <string>

#ifdef TCH_SCOPE_GLOO
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty_like.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <chrono>
#include <cstdlib>
#include <sstream>
#include <vector>

struct tch_scope_dist_group {
  c10::intrusive_ptr<c10d::Store> store;
  c10::intrusive_ptr<c10d::Backend> pg;
};

#ifdef TCH_SCOPE_NCCL
namespace tch_scope {
// nccl.cpp: built apart, with the CUDA defines the rest must not see.
c10::intrusive_ptr<c10d::Backend> make_nccl(const c10::intrusive_ptr<c10d::Store>& store,
                                            int32_t rank, int32_t world_size,
                                            std::chrono::milliseconds timeout);
}  // namespace tch_scope
#endif

namespace {

bool is_loopback(const std::string& host) {
  return host == "localhost" || host.rfind("127.", 0) == 0 || host == "::1";
}

// The transport devices, chosen as PyTorch's ProcessGroupGloo binding does
// (GLOO_SOCKET_IFNAME, else the address this host's name resolves to),
// except that a group meeting on a loopback address stays on loopback.
std::vector<std::shared_ptr<gloo::transport::Device>> devices(const std::string& host) {
  std::vector<std::shared_ptr<gloo::transport::Device>> out;
  const char* ifnames = std::getenv("GLOO_SOCKET_IFNAME");
  if (ifnames != nullptr && std::string(ifnames).size() > 1) {
    std::stringstream list(ifnames);
    std::string ifname;
    while (std::getline(list, ifname, ',')) {
      out.push_back(c10d::ProcessGroupGloo::createDeviceForInterface(ifname));
    }
  } else if (is_loopback(host)) {
    out.push_back(c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
  } else {
    out.push_back(c10d::ProcessGroupGloo::createDefaultDevice());
  }
  return out;
}

at::Tensor& tensor(void* t) { return *static_cast<at::Tensor*>(t); }

// Runs a collective on a contiguous view of `t` (gloo needs dense memory),
// writing the result back when that view had to be a copy.
template <class F>
void on_contiguous(at::Tensor& t, F&& run) {
  std::vector<at::Tensor> one{t.contiguous()};
  run(one);
  if (!one[0].is_same(t)) t.copy_(one[0]);
}

c10d::ReduceOp reduce_op(int32_t op) {
  switch (op) {
    case 0: return c10d::ReduceOp::SUM;
    case 1: return c10d::ReduceOp::MAX;
    case 2: return c10d::ReduceOp::MIN;
    case 3: return c10d::ReduceOp::PRODUCT;
    default: throw std::invalid_argument("unknown reduce op " + std::to_string(op));
  }
}

}  // namespace

extern "C" {

int32_t tch_scope_dist_has_backend(int32_t backend) {
#ifdef TCH_SCOPE_NCCL
  return backend == 0 || backend == 1 ? 1 : 0;
#else
  return backend == 0 ? 1 : 0;
#endif
}

tch_scope_status tch_scope_dist_init(int32_t backend, const char* host, uint16_t port,
                                     int32_t rank, int32_t world_size, bool store_server,
                                     const char* prefix, int64_t timeout_ms,
                                     tch_scope_dist_group** out) {
  return tch_scope::guarded([&] {
    if (tch_scope_dist_has_backend(backend) == 0) {
      throw std::invalid_argument("this shim was built without the nccl backend");
    }
    auto timeout = std::chrono::milliseconds(timeout_ms);
    // As torch.distributed.rendezvous._create_c10d_store.
    c10d::TCPStoreOptions opts;
    opts.port = port;
    opts.isServer = store_server;
    opts.numWorkers = static_cast<size_t>(world_size);
    opts.timeout = timeout;
    opts.multiTenant = true;
    auto tcp = c10::make_intrusive<c10d::TCPStore>(host, opts);
    // As init_process_group + _new_process_group_helper for the first
    // (default) group: "default_pg", group name "0", device "cpu" (gloo)
    // or "cuda" (nccl).
    c10::intrusive_ptr<c10d::Store> store = tcp;
    // torchrun's agent store outlives a group it restarts: the keys of the
    // attempt before (its ranks' addresses) would be read as this one's.
    if (prefix != nullptr && prefix[0] != '\0') {
      store = c10::make_intrusive<c10d::PrefixStore>(prefix, store);
    }
    store = c10::make_intrusive<c10d::PrefixStore>("default_pg", store);
    store = c10::make_intrusive<c10d::PrefixStore>("0/", store);
#ifdef TCH_SCOPE_NCCL
    if (backend == 1) {
      store = c10::make_intrusive<c10d::PrefixStore>("cuda/", store);
      auto pg = tch_scope::make_nccl(store, rank, world_size, timeout);
      pg->setSequenceNumberForGroup();
      *out = new tch_scope_dist_group{tcp, pg};
      return;
    }
#endif
    store = c10::make_intrusive<c10d::PrefixStore>("cpu/", store);
    auto options = c10d::ProcessGroupGloo::Options::create(timeout);
    options->devices = devices(host);
    options->threads = static_cast<int>(options->devices.size() * 2);
    options->group_name = "0";
    for (int32_t r = 0; r < world_size; ++r) options->global_ranks_in_group.push_back(r);
    auto pg = c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank, world_size, options);
    pg->setSequenceNumberForGroup();
    *out = new tch_scope_dist_group{tcp, pg};
  });
}

void tch_scope_dist_free(tch_scope_dist_group* group) {
  // The destructors join gloo's worker threads; nothing may escape.
  try {
    if (group != nullptr) group->pg.reset();
  } catch (...) {
  }
  try {
    delete group;
  } catch (...) {
  }
}

tch_scope_status tch_scope_dist_all_reduce(tch_scope_dist_group* group, void* t, int32_t op) {
  return tch_scope::guarded([&] {
    c10d::AllreduceOptions opts;
    opts.reduceOp = reduce_op(op);
    on_contiguous(tensor(t), [&](std::vector<at::Tensor>& v) { group->pg->allreduce(v, opts)->wait(); });
  });
}

tch_scope_status tch_scope_dist_broadcast(tch_scope_dist_group* group, void* t, int32_t root) {
  return tch_scope::guarded([&] {
    c10d::BroadcastOptions opts;
    opts.rootRank = root;
    on_contiguous(tensor(t), [&](std::vector<at::Tensor>& v) { group->pg->broadcast(v, opts)->wait(); });
  });
}

tch_scope_status tch_scope_dist_all_gather(tch_scope_dist_group* group, void* input,
                                           void* const* outputs, size_t n) {
  return tch_scope::guarded([&] {
    std::vector<at::Tensor> in{tensor(input).contiguous()};
    std::vector<std::vector<at::Tensor>> outs(1);
    for (size_t i = 0; i < n; ++i) outs[0].push_back(at::empty_like(in[0]));
    group->pg->allgather(outs, in)->wait();
    for (size_t i = 0; i < n; ++i) tensor(outputs[i]).copy_(outs[0][i]);
  });
}

tch_scope_status tch_scope_dist_barrier(tch_scope_dist_group* group) {
  return tch_scope::guarded([&] { group->pg->barrier()->wait(); });
}

}  // extern "C"

#else  // no gloo headers: every entry point says why

struct tch_scope_dist_group {};

extern "C" {

int32_t tch_scope_dist_has_backend(int32_t) { return 0; }

tch_scope_status tch_scope_dist_init(int32_t, const char*, uint16_t, int32_t, int32_t, bool,
                                     const char*, int64_t, tch_scope_dist_group**) {
  return tch_scope::guarded([] {
    throw std::runtime_error(
        "tch-scope was built without gloo's headers; run scripts/bootstrap-gloo.sh (or set "
        "TCH_SCOPE_GLOO_INCLUDE) and rebuild");
  });
}

void tch_scope_dist_free(tch_scope_dist_group*) {}

#define TCH_SCOPE_NO_GLOO \
  tch_scope::guarded([] { throw std::runtime_error("built without gloo"); })
tch_scope_status tch_scope_dist_all_reduce(tch_scope_dist_group*, void*, int32_t) { return TCH_SCOPE_NO_GLOO; }
tch_scope_status tch_scope_dist_broadcast(tch_scope_dist_group*, void*, int32_t) { return TCH_SCOPE_NO_GLOO; }
tch_scope_status tch_scope_dist_all_gather(tch_scope_dist_group*, void*, void* const*, size_t) { return TCH_SCOPE_NO_GLOO; }
tch_scope_status tch_scope_dist_barrier(tch_scope_dist_group*) { return TCH_SCOPE_NO_GLOO; }

}  // extern "C"

#endif
