// ProcessGroupNCCL for `distributed(backend = nccl)`. A translation unit of
// its own, built by build/distributed.rs only with a CUDA libtorch and the
// CUDA + NCCL headers (scripts/bootstrap-cuda-headers.sh): it needs
// USE_C10D_NCCL/USE_CUDA, which the rest of the shim must not see. The
// code is in libtorch_cuda.so; the headers only declare it.
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>

#include <chrono>
#include <cstdint>

namespace tch_scope {

// As torch.distributed's _new_process_group_helper for the default group.
c10::intrusive_ptr<c10d::Backend> make_nccl(const c10::intrusive_ptr<c10d::Store>& store,
                                            int32_t rank, int32_t world_size,
                                            std::chrono::milliseconds timeout) {
  auto options = c10d::ProcessGroupNCCL::Options::create();
  options->timeout = timeout;
  options->group_name = "0";
  for (int32_t r = 0; r < world_size; ++r) options->global_ranks_in_group.push_back(r);
  return c10::make_intrusive<c10d::ProcessGroupNCCL>(store, rank, world_size, options);
}

}  // namespace tch_scope
