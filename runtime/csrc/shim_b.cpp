// The shim's other translation unit (see shim_a.cpp): the sources that
// pull in the heaviest headers (TorchScript modules, the profiler,
// AOTInductor's runner, autograd's nodes).
#include "module.cpp"
#include "profile.cpp"
#include "context.cpp"
#include "aoti.cpp"
#include "autograd.cpp"
