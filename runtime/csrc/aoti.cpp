// AOTInductor packages (aoti.h): torch::inductor::AOTIModelPackageLoader
// (libtorch_cpu) behind the shim's status convention.
//
// What the loader does not say, read from its runner: the number of inputs
// and outputs of the model, through the model library's own C ABI
// (AOTInductorModelContainerGetNumInputs/Outputs). The runner keeps the
// library and the container handle in protected members; a pointer to
// member taken in a derived class reads them without a cast of the object.
// The generated code trusts its input count (it reads input_handles[i] for
// every input it was compiled with), so the count is checked here before
// every run.
#include <ATen/DeviceAccelerator.h>
#include <ATen/DynamicLibrary.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/csrc/inductor/aoti_package/model_package_loader.h>
#include <torch/csrc/inductor/aoti_runtime/interface.h>
#include <torch/library.h>

#include <dlfcn.h>

#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "aoti.h"
#include "common.h"

struct tch_scope_aoti {
  std::unique_ptr<torch::inductor::AOTIModelPackageLoader> loader;
  size_t num_inputs = 0;
  size_t num_outputs = 0;
  std::string metadata;  // "key=value\n", sorted
};

namespace {

using torch::inductor::AOTIModelContainerRunner;

// Reads the runner's protected members (see the top of the file).
struct RunnerAccess : AOTIModelContainerRunner {
  static AOTInductorModelContainerHandle handle(AOTIModelContainerRunner& r) {
    return r.*(&RunnerAccess::container_handle_);
  }
  static at::DynamicLibrary* library(AOTIModelContainerRunner& r) {
    return (r.*(&RunnerAccess::model_so_)).get();
  }
};

using CountFn = AOTIRuntimeError (*)(AOTInductorModelContainerHandle, size_t*);

size_t count(AOTIModelContainerRunner& runner, const char* fn_name) {
  auto* lib = RunnerAccess::library(runner);
  auto handle = RunnerAccess::handle(runner);
  if (lib == nullptr || handle == nullptr) {
    throw std::runtime_error("the package's runner has no model library loaded");
  }
  auto fn = reinterpret_cast<CountFn>(lib->sym(fn_name));
  size_t n = 0;
  if (fn(handle, &n) != AOTI_RUNTIME_SUCCESS) {
    throw std::runtime_error(std::string(fn_name) + " failed");
  }
  return n;
}

// `tch_scope::aoti_run(Tensor[] inputs) -> ()`, an operator that does
// nothing, entered through the dispatcher at the start of every run: an
// open `deadline` that has passed refuses it (deadline.cpp's fallback runs
// before every operator of the thread), and profiles show where runs begin.
// Registered at the first load.
const c10::TypedOperatorHandle<void(at::TensorList)>& entry_op() {
  static const auto op = [] {
    static torch::Library lib(torch::Library::FRAGMENT, "tch_scope", std::nullopt, __FILE__,
                              __LINE__);
    lib.def("aoti_run(Tensor[] inputs) -> ()");
    lib.impl("aoti_run", c10::DispatchKey::CompositeImplicitAutograd,
             torch::CppFunction::makeFromUnboxedFunction(+[](at::TensorList) {}));
    return c10::Dispatcher::singleton()
        .findSchemaOrThrow("tch_scope::aoti_run", "")
        .typed<void(at::TensorList)>();
  }();
  return op;
}

// A package's library needs libtorch.so (and libtorch_cpu.so) by soname,
// and a library opened with dlopen does not search the executable's
// RUNPATH: with `--as-needed` the binary may not have loaded libtorch.so,
// a library of almost no code. Loaded here from libtorch_cpu.so's folder,
// once, for the life of the process.
void preload_libtorch() {
  static const bool done = [] {
    Dl_info info{};
    if (dladdr(reinterpret_cast<void*>(&at::accelerator::deviceCount), &info) == 0 ||
        info.dli_fname == nullptr) {
      return false;  // the loader's own error will say what is missing
    }
    std::string dir = info.dli_fname;
    dir = dir.substr(0, dir.find_last_of('/') + 1);
    return dlopen((dir + "libtorch.so").c_str(), RTLD_NOW | RTLD_GLOBAL) != nullptr;
  }();
  (void)done;
}

void check_device(const std::string& path, const std::string& model_name) {
  auto meta = torch::inductor::AOTIModelPackageLoader::load_metadata_from_package(path, model_name);
  auto it = meta.find("AOTI_DEVICE_KEY");
  std::string device = it == meta.end() ? "cpu" : it->second;
  if (device == "cpu") return;
  auto accel = at::getAccelerator(false);
  bool have = accel.has_value() && c10::DeviceTypeName(*accel, /*lower_case=*/true) == device &&
              at::accelerator::deviceCount() > 0;
  if (!have) {
    throw std::runtime_error("the package was compiled for " + device +
                             ", and this process has no " + device + " device");
  }
}

}  // namespace

extern "C" {

tch_scope_status tch_scope_aoti_load(const char* path, const char* model_name,
                                     size_t num_runners, tch_scope_aoti** out) {
  return tch_scope::guarded([&] {
    *out = nullptr;
    if (num_runners == 0) throw std::invalid_argument("num_runners must be at least 1");
    entry_op();
    preload_libtorch();
    check_device(path, model_name);
    auto pkg = std::make_unique<tch_scope_aoti>();
    pkg->loader = std::make_unique<torch::inductor::AOTIModelPackageLoader>(
        path, model_name, /*run_single_threaded=*/false, num_runners, /*device_index=*/-1);
    auto* runner = pkg->loader->get_runner();
    if (runner == nullptr) throw std::runtime_error("the loader made no runner");
    pkg->num_inputs = count(*runner, "AOTInductorModelContainerGetNumInputs");
    pkg->num_outputs = count(*runner, "AOTInductorModelContainerGetNumOutputs");
    auto meta = pkg->loader->get_metadata();
    std::map<std::string, std::string> sorted(meta.begin(), meta.end());
    for (const auto& [k, v] : sorted) {
      pkg->metadata += k;
      pkg->metadata += '=';
      pkg->metadata += v;
      pkg->metadata += '\n';
    }
    *out = pkg.release();
  });
}

void tch_scope_aoti_free(tch_scope_aoti* pkg) {
  try {
    delete pkg;
  } catch (...) {
    // A destructor that throws (removing the extracted files) leaks, no more.
  }
}

size_t tch_scope_aoti_num_inputs(const tch_scope_aoti* pkg) { return pkg->num_inputs; }

size_t tch_scope_aoti_num_outputs(const tch_scope_aoti* pkg) { return pkg->num_outputs; }

const char* tch_scope_aoti_metadata(const tch_scope_aoti* pkg) { return pkg->metadata.c_str(); }

tch_scope_status tch_scope_aoti_run(tch_scope_aoti* pkg, void* const* inputs, size_t n_inputs,
                                    void** outputs) {
  return tch_scope::guarded([&] {
    if (n_inputs != pkg->num_inputs) {
      throw std::invalid_argument("the package takes " + std::to_string(pkg->num_inputs) +
                                  " input tensors, got " + std::to_string(n_inputs));
    }
    std::vector<at::Tensor> in;
    in.reserve(n_inputs);
    for (size_t i = 0; i < n_inputs; ++i) {
      const auto& t = *static_cast<const at::Tensor*>(inputs[i]);
      if (!t.defined()) throw std::invalid_argument("input " + std::to_string(i) + " is undefined");
      in.push_back(t);
    }
    entry_op().call(in);
    auto out = pkg->loader->run(in);
    if (out.size() != pkg->num_outputs) {
      throw std::runtime_error("the package returned " + std::to_string(out.size()) +
                               " tensors, its model declares " +
                               std::to_string(pkg->num_outputs));
    }
    // All or nothing: `new` may throw halfway.
    std::vector<std::unique_ptr<at::Tensor>> owned;
    owned.reserve(out.size());
    for (auto& t : out) owned.push_back(std::make_unique<at::Tensor>(std::move(t)));
    for (size_t i = 0; i < owned.size(); ++i) outputs[i] = owned[i].release();
  });
}

}  // extern "C"
