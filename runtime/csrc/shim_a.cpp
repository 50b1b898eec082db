// One of the shim's two translation units (build.rs compiles both, one per
// core): each source below would otherwise parse libtorch's headers again,
// about 13 s of the compiler's time apiece, where the code itself takes a
// fraction of that. The sources keep their own file and line in messages.
// Names private to a source (its anonymous namespace) must be unique
// across the sources of one unit.
#include "common.cpp"
#include "grad.cpp"
#include "device.cpp"
#include "memory.cpp"
#include "tensor_memory.cpp"
#include "rng.cpp"
#include "autocast.cpp"
#include "global_modes.cpp"
#include "backends.cpp"
#include "stream.cpp"
#include "cuda_link.cpp"
#include "deadline.cpp"
