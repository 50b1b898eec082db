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
//
// What each input must be (dtype, sizes, strides, device) is written
// nowhere but in the package's own generated input check, the
// `check_input_<i>` functions of its wrapper source, which the package
// ships beside its library: their text is read at load (through
// PyTorchStreamReader, the reader of .pt2 archives) and handed to the Rust
// side, which checks every input against it before a run.
//
// The package's runtime prints every failure of a run to std::cerr
// ("Error: ..." and, for a c10::Error, its backtrace). A filter installed
// on std::cerr at the first load sends what a thread writes to it while
// that thread is inside a run into the run's own string: the error line
// becomes the run's error, anything else is passed on after the run.
#include <ATen/DeviceAccelerator.h>
#include <caffe2/serialize/inline_container.h>
#include <ATen/DynamicLibrary.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/csrc/inductor/aoti_package/model_package_loader.h>
#include <torch/csrc/inductor/aoti_runtime/interface.h>
#include <torch/library.h>

#include <dlfcn.h>

#include <filesystem>
#include <fstream>
#include <iostream>
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
  std::string input_checks;  // the check_input_<i> functions' source, or ""
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


// ---- the package's input check, as source ---------------------------------

// The part of a wrapper source that holds its check_input_<i> functions
// ("" if it has none).
std::string check_section(const std::string& text) {
  auto begin = text.find("static void check_input_0(");
  if (begin == std::string::npos) return {};
  auto end = text.find("_check_aoti_runtime_check_inputs_env", begin);
  return text.substr(begin, end == std::string::npos ? std::string::npos : end - begin);
}

bool is_cpp(const std::string& name) {
  return name.size() > 4 && name.compare(name.size() - 4, 4, ".cpp") == 0;
}

// The input checks of model `model_name` in the package at `path` (a .pt2
// file or an unpacked folder): "" when none are found. Never throws: a
// package whose source cannot be read is still run (the Rust side then
// learns its inputs from the first run that succeeds).
std::string read_input_checks(const std::string& path, const std::string& model_name) try {
  const std::string folder = "data/aotinductor/" + model_name + "/";
  if (std::filesystem::is_directory(path)) {
    for (const auto& entry : std::filesystem::directory_iterator(path + "/" + folder)) {
      if (!entry.is_regular_file() || !is_cpp(entry.path().string())) continue;
      std::ifstream in(entry.path(), std::ios::binary);
      std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      auto found = check_section(text);
      if (!found.empty()) return found;
    }
    return {};
  }
  caffe2::serialize::PyTorchStreamReader reader(path);
  for (const auto& name : reader.getAllRecords()) {
    if (name.rfind(folder, 0) != 0 || !is_cpp(name)) continue;
    auto [data, size] = reader.getRecord(name);
    auto found = check_section(std::string(static_cast<const char*>(data.get()), size));
    if (!found.empty()) return found;
  }
  return {};
} catch (...) {
  return {};
}

// ---- the package's writes to std::cerr ------------------------------------

// Passes writes on to the stream buffer std::cerr had, except on a thread
// inside a run (`sink` set), whose writes go to that run's string. Unbuffered:
// every write goes through at once, as std::cerr's own.
class StderrFilter final : public std::streambuf {
 public:
  explicit StderrFilter(std::streambuf* to) : to_(to) {}
  std::streambuf* target() const { return to_; }
  static thread_local std::string* sink;

 protected:
  int_type overflow(int_type c) override {
    if (traits_type::eq_int_type(c, traits_type::eof())) return traits_type::not_eof(c);
    if (sink != nullptr) {
      sink->push_back(traits_type::to_char_type(c));
      return c;
    }
    return to_->sputc(traits_type::to_char_type(c));
  }
  std::streamsize xsputn(const char* s, std::streamsize n) override {
    if (sink != nullptr) {
      sink->append(s, static_cast<size_t>(n));
      return n;
    }
    return to_->sputn(s, n);
  }
  int sync() override { return sink != nullptr ? 0 : to_->pubsync(); }

 private:
  std::streambuf* to_;
};

thread_local std::string* StderrFilter::sink = nullptr;

// Installed once, at the first load (under the Rust side's load lock), and
// never removed: std::cerr may be written until the process ends. The old
// buffer stays alive and is still written through, so a write racing the
// swap on another thread goes to stderr by either path (the swap itself is
// one pointer store).
StderrFilter* stderr_filter() {
  static StderrFilter* filter = [] {
    auto* f = new StderrFilter(std::cerr.rdbuf());
    std::cerr.rdbuf(f);
    return f;
  }();
  return filter;
}

// While alive, this thread's writes to std::cerr go to `out`.
class CaptureStderr {
 public:
  explicit CaptureStderr(std::string* out) : prev_(StderrFilter::sink) {
    StderrFilter::sink = out;
  }
  ~CaptureStderr() { StderrFilter::sink = prev_; }
  CaptureStderr(const CaptureStderr&) = delete;
  CaptureStderr& operator=(const CaptureStderr&) = delete;

 private:
  std::string* prev_;
};

// Where the package's runtime began printing a failed run's error in
// `captured` (npos if it did not).
size_t error_start(const std::string& captured) {
  for (const char* marker : {"Error: ", "Unknown exception occurred."}) {
    size_t at = 0;
    while ((at = captured.find(marker, at)) != std::string::npos) {
      if (at == 0 || captured[at - 1] == '\n') return at;
      ++at;
    }
  }
  return std::string::npos;
}

// Writes what a run printed that was not its error to stderr, as it would
// have gone.
void pass_on(const StderrFilter* filter, const std::string& text) {
  if (text.empty()) return;
  filter->target()->sputn(text.data(), static_cast<std::streamsize>(text.size()));
  filter->target()->pubsync();
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
    stderr_filter();
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
    pkg->input_checks = read_input_checks(path, model_name);
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

const char* tch_scope_aoti_input_checks(const tch_scope_aoti* pkg) {
  return pkg->input_checks.c_str();
}

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
    std::vector<at::Tensor> out;
    std::string captured;
    const auto* filter = stderr_filter();
    try {
      CaptureStderr capture(&captured);
      out = pkg->loader->run(in);
    } catch (const std::exception& e) {
      // The package's own line says why; the runner's exception may not
      // (libtorch 2.11's says only "API call failed").
      auto at = error_start(captured);
      pass_on(filter, captured.substr(0, at));
      std::string why = e.what();
      if (at != std::string::npos) {
        why = captured.substr(at);
        if (why.rfind("Error: ", 0) == 0) why.erase(0, 7);
      }
      // A c10::Error's text ends with its C++ backtrace: not for clients.
      auto trace = why.find("\nException raised from ");
      if (trace != std::string::npos) why.erase(trace);
      while (!why.empty() && (why.back() == '\n' || why.back() == ' ')) why.pop_back();
      throw std::runtime_error(why);
    }
    pass_on(filter, captured);
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
