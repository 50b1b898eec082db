// Train/eval modes of TorchScript modules (torch::jit::Module, tch's CModule).
//
// TorchScript's train(on) sets the "training" attribute of the module and of
// every submodule. To restore "the previous mode" exactly, the modes are
// saved per module, in modules() order (the module itself first, then its
// submodules depth-first), and put back one module at a time.
//
// The modules are found by walking the object graph directly (each module's
// c10::ivalue::Object and the slots its ClassType marks as modules), in the
// order modules() visits them: modules() itself copies a Module (building a
// c10::Dict) at every step, and costs microseconds. A scope walks once, on
// entry: tch_scope_module_enter keeps the list of (object, slot, old flag),
// with strong references to the objects, in a handle that the Rust guard
// owns and hands to tch_scope_module_leave, then frees. The same handle is
// what Trainable::modes() returns for a module: restoring puts each flag
// back on the object it was read from.
#include <memory>
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

// Each module's object (a strong reference: it can't go away while held),
// the index of its "training" slot, and (in a Saved) its flag on entry.
struct Flag {
  c10::intrusive_ptr<c10::ivalue::Object> obj;
  size_t slot;
  bool was = false;
};

const std::string& training_name() {
  static const std::string name("training");
  return name;
}

// Appends `obj` and its submodules, depth-first pre-order: the order of
// Module::modules() (slot_iterator_impl: the module itself, then each slot
// whose type is a module, recursively, in slot order).
void collect(c10::intrusive_ptr<c10::ivalue::Object> obj, std::vector<Flag>& out) {
  const std::shared_ptr<c10::ClassType> type = obj->type();
  auto slot = type->findAttributeSlot(training_name());
  if (!slot) throw std::runtime_error("a submodule has no `training` attribute");
  const size_t at = out.size();
  out.push_back({std::move(obj), *slot});
  const size_t n = type->numAttributes();
  for (size_t i = 0; i < n; ++i) {
    if (!type->getAttribute(i)->is_module()) continue;
    const c10::IValue& v = out[at].obj->getSlot(i);
    if (!v.isObject()) throw std::runtime_error("a submodule slot holds no module");
    collect(v.toObject(), out);
  }
}

std::vector<Flag> flags(const torch::jit::Module& root) {
  std::vector<Flag> out;
  out.reserve(16);
  collect(root._ivalue(), out);
  return out;
}

bool flag(const Flag& f) { return f.obj->getSlot(f.slot).toBool(); }

// What tch_scope_module_enter saved, for tch_scope_module_leave.
struct Saved {
  std::vector<Flag> flags;
};

}  // namespace

extern "C" {

tch_scope_status tch_scope_module_save(void* module, void** saved) {
  return tch_scope::guarded([&] {
    std::lock_guard<std::mutex> lock(mode_lock());
    auto s = std::make_unique<Saved>();
    s->flags = flags(*static_cast<torch::jit::Module*>(module));
    for (Flag& f : s->flags) f.was = flag(f);
    *saved = s.release();
  });
}

tch_scope_status tch_scope_module_enter(void* module, bool on, void** saved) {
  return tch_scope::guarded([&] {
    std::lock_guard<std::mutex> lock(mode_lock());
    auto s = std::make_unique<Saved>();
    s->flags = flags(*static_cast<torch::jit::Module*>(module));
    for (Flag& f : s->flags) f.was = flag(f);
    for (Flag& f : s->flags) f.obj->setSlot(f.slot, on);
    *saved = s.release();
  });
}

tch_scope_status tch_scope_module_set_training(void* module, bool on) {
  return tch_scope::guarded([&] {
    std::lock_guard<std::mutex> lock(mode_lock());
    static_cast<torch::jit::Module*>(module)->train(on);
  });
}

tch_scope_status tch_scope_module_leave(const void* saved) {
  return tch_scope::guarded([&] {
    std::lock_guard<std::mutex> lock(mode_lock());
    for (const Flag& f : static_cast<const Saved*>(saved)->flags) f.obj->setSlot(f.slot, f.was);
  });
}

size_t tch_scope_module_saved_modes(const void* saved, uint8_t* out, size_t cap) {
  const auto& flags = static_cast<const Saved*>(saved)->flags;
  for (size_t i = 0; i < flags.size() && i < cap; ++i) out[i] = flags[i].was ? 1 : 0;
  return flags.size();
}

void tch_scope_module_saved_free(void* saved) { delete static_cast<Saved*>(saved); }

}  // extern "C"
