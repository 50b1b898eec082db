// Keeps libtorch_cuda.so loaded in every binary that links tch-scope.
//
// Binaries link with --as-needed, which drops libtorch_cuda.so because
// nothing names a symbol in it; CUDA is then never registered and
// tch::Cuda::is_available() is false even on a GPU machine (tch-rs #907,
// #984). With a CUDA libtorch (TCH_SCOPE_CUDA), this file takes the address
// of one of its functions, so the dependency is real; the Rust side holds a
// #[used] reference to tch_scope_built_with_cuda, which pulls this object
// into every link.
#include "common.h"

#ifdef TCH_SCOPE_CUDA
// Declared by hand: ATen/cuda/CUDAContext.h needs the CUDA toolkit headers.
// The mangled name ignores the return type, so an opaque one is enough.
struct cudaDeviceProp;
namespace at::cuda {
cudaDeviceProp* getCurrentDeviceProperties();
}
namespace {
const void* volatile cuda_anchor = reinterpret_cast<const void*>(&at::cuda::getCurrentDeviceProperties);
}
extern "C" int32_t tch_scope_built_with_cuda(void) { return cuda_anchor != nullptr; }
#else
extern "C" int32_t tch_scope_built_with_cuda(void) { return 0; }
#endif
