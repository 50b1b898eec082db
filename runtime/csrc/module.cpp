// Train/eval modes of TorchScript modules (torch::jit::Module, tch's CModule).
//
// TorchScript's train(on) sets the "training" attribute of the module and of
// every submodule. To restore "the previous mode" exactly, the modes are
// saved per module, in modules() order (the module itself first, then its
// submodules depth-first), and put back one module at a time.
//
// Walking modules() is the expensive part (microseconds), so each call walks
// it once: it collects the modules, checks the count, then reads or writes
// each module's own "training" slot.
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include <torch/csrc/jit/api/module.h>

#include "common.h"

namespace {

// Mode changes made through tch-scope are serialized: two threads entering
// scopes on one shared module must not write the same slots at once.
std::mutex& mode_lock() {
  static std::mutex m;
  return m;
}

// Each module's object and the index of its "training" slot.
struct Flag {
  c10::intrusive_ptr<c10::ivalue::Object> obj;
  size_t slot;
};

std::vector<Flag> flags(const torch::jit::Module& root) {
  std::vector<Flag> out;
  out.reserve(16);
  for (const torch::jit::Module& m : root.modules()) {
    auto obj = m._ivalue();
    auto slot = obj->type()->findAttributeSlot("training");
    if (!slot) throw std::runtime_error("a submodule has no `training` attribute");
    out.push_back({std::move(obj), *slot});
  }
  return out;
}

}  // namespace

extern "C" {

tch_scope_status tch_scope_module_modes(void* module, uint8_t* out, size_t cap, size_t* n) {
  return tch_scope::guarded([&] {
    std::lock_guard<std::mutex> lock(mode_lock());
    auto all = flags(*static_cast<torch::jit::Module*>(module));
    for (size_t i = 0; i < all.size() && i < cap; ++i) {
      out[i] = all[i].obj->getSlot(all[i].slot).toBool() ? 1 : 0;
    }
    *n = all.size();
  });
}

tch_scope_status tch_scope_module_exchange(void* module, bool on, uint8_t* out, size_t cap,
                                           size_t* n) {
  return tch_scope::guarded([&] {
    std::lock_guard<std::mutex> lock(mode_lock());
    auto all = flags(*static_cast<torch::jit::Module*>(module));
    *n = all.size();
    if (all.size() > cap) return;  // nothing changed; the caller asks again with room
    for (size_t i = 0; i < all.size(); ++i) {
      out[i] = all[i].obj->getSlot(all[i].slot).toBool() ? 1 : 0;
      all[i].obj->setSlot(all[i].slot, on);
    }
  });
}

tch_scope_status tch_scope_module_set_training(void* module, bool on) {
  return tch_scope::guarded([&] {
    std::lock_guard<std::mutex> lock(mode_lock());
    static_cast<torch::jit::Module*>(module)->train(on);
  });
}

tch_scope_status tch_scope_module_restore_modes(void* module, const uint8_t* modes, size_t n) {
  return tch_scope::guarded([&] {
    std::lock_guard<std::mutex> lock(mode_lock());
    auto all = flags(*static_cast<torch::jit::Module*>(module));
    if (all.size() != n) {
      throw std::runtime_error("the module has " + std::to_string(all.size()) +
                               " modules, but " + std::to_string(n) + " modes were saved");
    }
    for (size_t i = 0; i < n; ++i) all[i].obj->setSlot(all[i].slot, modes[i] != 0);
  });
}

}  // extern "C"
