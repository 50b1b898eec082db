// Train/eval modes of TorchScript modules (torch::jit::Module, tch's CModule).
//
// TorchScript's train(on) sets the "training" attribute of the module and of
// every submodule. To restore "the previous mode" exactly, the modes are
// saved per module, in modules() order (the module itself first, then its
// submodules depth-first), and put back one module at a time.
//
// The floor of a mode switch is one flag write per module, so the walk does
// no per-module lookup by name and no reference counting: what a module's
// class says (the index of its "training" slot, which slots hold submodules
// and their classes) is worked out once per class and kept (`Info`, with a
// reference to the class, never to a module); the walk follows the object
// graph with raw pointers from the root, which the saved handle holds a
// strong reference to. Restoring walks again from the root and writes only
// modules still reachable there, so a submodule swapped out meanwhile (and
// maybe freed) is never touched, and one swapped in is left alone.
// modules() itself copies a Module (building a c10::Dict) at every step,
// and costs microseconds.
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <new>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include <torch/csrc/jit/api/module.h>

#include "module.h"

namespace {

using Object = c10::ivalue::Object;

// Mode changes made through tch-scope are serialized per model: two
// threads entering scopes on one shared module must not write the same
// slots at once, while scopes on two models go on side by side. The lock
// is one of 64, picked by the root module object (two models that share a
// submodule object are not kept apart: TorchScript does not share them
// unless asked to).
std::mutex& model_lock(const void* root) {
  static std::mutex locks[64];
  auto p = reinterpret_cast<uintptr_t>(root);
  return locks[((p >> 4) ^ (p >> 10)) % 64];
}

// What one module class says, worked out once: its "training" slot, and its
// submodule slots with their classes. Never changed once published (a
// class that grew attributes gets a new Info), so walks read it unlocked.
struct Info {
  c10::TypePtr keep;  // keeps the class, and so the cache key, alive
  size_t attrs = 0;   // the class's attribute count when worked out
  size_t training = 0;
  std::vector<std::pair<size_t, Info*>> children;
  std::atomic<size_t> modules_seen{16};  // a reserve hint, for a root
};

// The class cache and its lock (held only while looking up or adding).
std::recursive_mutex& cache_lock() {
  static std::recursive_mutex m;
  return m;
}

std::unordered_map<const c10::ClassType*, Info*>& infos() {
  static auto* m = new std::unordered_map<const c10::ClassType*, Info*>();
  return *m;
}

const std::string& training_name() {
  static const std::string name("training");
  return name;
}

// The class's Info, worked out again if attributes were added since.
// Infos are never freed (a replaced one may still be read by a walk), so
// Info pointers stay valid.
Info& info_locked(const c10::ClassType* ct, const c10::TypePtr& t);

Info& info(const c10::TypePtr& t) {
  const auto* ct = t->castRaw<c10::ClassType>();
  if (!ct) throw std::runtime_error("a submodule is not a class object");
  // This thread's last answer, without the lock: an Info is never freed and
  // keeps its class alive (so no other class takes its address), and one
  // whose attribute count is still its class's is the current one.
  thread_local const c10::ClassType* last_ct = nullptr;
  thread_local Info* last = nullptr;
  if (ct == last_ct && last->attrs == ct->numAttributes()) return *last;
  Info& in = info_locked(ct, t);
  last_ct = ct;
  last = &in;
  return in;
}

Info& info_locked(const c10::ClassType* ct, const c10::TypePtr& t) {
  std::lock_guard<std::recursive_mutex> lock(cache_lock());
  auto& m = infos();
  auto it = m.find(ct);
  if (it != m.end() && it->second->attrs == ct->numAttributes()) return *it->second;
  auto* in = new Info();
  in->keep = t;
  in->attrs = ct->numAttributes();
  auto slot = ct->findAttributeSlot(training_name());
  if (!slot) {
    delete in;
    throw std::runtime_error("a submodule has no `training` attribute");
  }
  in->training = *slot;
  try {
    for (size_t i = 0; i < in->attrs; ++i) {
      const c10::TypePtr& a = ct->getAttribute(i);
      if (a->is_module()) in->children.emplace_back(i, &info(a));
    }
  } catch (...) {
    delete in;
    throw;
  }
  if (it != m.end()) in->modules_seen.store(it->second->modules_seen.load());
  m[ct] = in;
  return *in;
}

[[gnu::noinline]] Info* recheck(Object* obj) {
  Info* in = &info(c10::TypePtr(obj->type()));
  if (obj->slots().size() < in->attrs || !obj->getSlot(in->training).isBool())
    throw std::runtime_error("a submodule's `training` attribute is not a bool");
  return in;
}

// A module's Info, checked against the object: the class a slot declares
// is the class of the module in it, but an object whose class grew
// attributes since (or any mismatch) gets its own class looked at.
inline Info* checked(Object* obj, Info* in) {
  if (obj->slots().size() != in->attrs || !obj->getSlot(in->training).isBool()) [[unlikely]]
    return recheck(obj);
  return in;
}

// Writes a bool into a slot that holds a bool (`checked` made sure). The
// old value is swapped into storage whose destructor is never run: a Bool
// IValue owns nothing, and skipping IValue's out-of-line destroy() halves
// the cost of a flag write.
inline void set_bool(Object* obj, size_t slot, bool on) {
  alignas(c10::IValue) unsigned char storage[sizeof(c10::IValue)];
  auto* v = new (storage) c10::IValue(on);
  const_cast<c10::IValue&>(obj->getSlot(slot)).swap(*v);
}

// One module's flag on entry.
struct Flag {
  Object* obj;
  bool was;
};

// Puts back the flags of a walk that wrote some of them and then failed:
// every module in `flags` was checked before its write, so its `training`
// slot is the one `checked` found.
void undo(const std::vector<Flag>& flags) noexcept {
  for (const Flag& f : flags) {
    try {
      set_bool(f.obj, checked(f.obj, &info(c10::TypePtr(f.obj->type())))->training, f.was);
    } catch (...) {
      // Checked once already; nothing else can be done for this one.
    }
  }
}

// Appends `obj` and its submodules, depth-first pre-order: the order of
// Module::modules() (slot_iterator_impl: the module itself, then each slot
// whose type is a module, recursively, in slot order); with `set`, writes
// `on` into each.
void walk(Object* obj, Info* in, std::vector<Flag>& out, bool set, bool on) {
  in = checked(obj, in);
  // Test-only: a switch that fails at the third module, after two writes.
  if (set && out.size() == 2 && tch_scope::injected_fault("tch_scope_module_walk")) [[unlikely]]
    throw std::runtime_error("injected fault in tch_scope_module_walk");
  out.push_back({obj, obj->getSlot(in->training).toBool()});
  if (set) set_bool(obj, in->training, on);
  for (const auto& [slot, child] : in->children) {
    const c10::IValue& v = obj->getSlot(slot);
    if (!v.isObject()) throw std::runtime_error("a submodule slot holds no module");
    walk(&v.toObjectRef(), child, out, set, on);
  }
}

// What tch_scope_module_enter saved, for tch_scope_module_leave.
struct Saved {
  c10::intrusive_ptr<Object> root;  // keeps the walk's starting point alive
  Info* root_info;
  std::vector<Flag> flags;
};

std::unique_ptr<Saved> save(c10::intrusive_ptr<Object> root, bool set, bool on) {
  auto s = std::make_unique<Saved>();
  s->root = std::move(root);
  s->root_info = &info(c10::TypePtr(s->root->type()));
  s->flags.reserve(s->root_info->modules_seen.load(std::memory_order_relaxed));
  try {
    walk(s->root.get(), s->root_info, s->flags, set, on);
  } catch (...) {
    // A switch that fails partway leaves the model as it was.
    if (set) undo(s->flags);
    throw;
  }
  s->root_info->modules_seen.store(s->flags.size(), std::memory_order_relaxed);
  return s;
}

// Restores the flags of the modules still where they were, in modules()
// order; returns false at the first that is not (then `restore_moved`).
bool restore_in_place(Object* obj, Info* in, const std::vector<Flag>& flags, size_t& k) {
  in = checked(obj, in);
  if (k >= flags.size() || flags[k].obj != obj) return false;
  set_bool(obj, in->training, flags[k++].was);
  for (const auto& [slot, child] : in->children) {
    const c10::IValue& v = obj->getSlot(slot);
    if (!v.isObject()) throw std::runtime_error("a submodule slot holds no module");
    if (!restore_in_place(&v.toObjectRef(), child, flags, k)) return false;
  }
  return true;
}

// The model changed shape: each module reachable now gets its own saved
// flag back, if it had one.
void restore_moved(Object* obj, Info* in, const std::unordered_map<Object*, bool>& was) {
  in = checked(obj, in);
  if (auto it = was.find(obj); it != was.end()) set_bool(obj, in->training, it->second);
  for (const auto& [slot, child] : in->children) {
    const c10::IValue& v = obj->getSlot(slot);
    if (v.isObject()) restore_moved(&v.toObjectRef(), child, was);
  }
}

void restore(const Saved& s) {
  size_t k = 0;
  if (restore_in_place(s.root.get(), s.root_info, s.flags, k) && k == s.flags.size()) return;
  std::unordered_map<Object*, bool> was;
  for (const Flag& f : s.flags) was.emplace(f.obj, f.was);
  restore_moved(s.root.get(), s.root_info, was);
}

// The module object a `torch::jit::Module*` stands for: the lock's key and
// the walk's start (`_ivalue()` copies a counted pointer: taken once).
c10::intrusive_ptr<Object> root_of(void* module) {
  return static_cast<torch::jit::Module*>(module)->_ivalue();
}

}  // namespace

extern "C" {

tch_scope_status tch_scope_module_save(void* module, void** saved) {
  return tch_scope::guarded([&] {
    auto root = root_of(module);
    std::lock_guard<std::mutex> lock(model_lock(root.get()));
    *saved = save(std::move(root), false, false).release();
  });
}

tch_scope_status tch_scope_module_enter(void* module, bool on, void** saved) {
  return tch_scope::guarded([&] {
    auto root = root_of(module);
    std::lock_guard<std::mutex> lock(model_lock(root.get()));
    *saved = save(std::move(root), true, on).release();
  });
}

tch_scope_status tch_scope_module_set_training(void* module, bool on) {
  return tch_scope::guarded([&] {
    auto root = root_of(module);
    std::lock_guard<std::mutex> lock(model_lock(root.get()));
    // Through the same walk as a scope's switch, so a failure partway is
    // undone (Module::train would leave the modules it reached switched).
    save(std::move(root), true, on);
  });
}

tch_scope_status tch_scope_module_leave(const void* saved) {
  return tch_scope::guarded([&] {
    std::lock_guard<std::mutex> lock(
        model_lock(static_cast<const Saved*>(saved)->root.get()));
    restore(*static_cast<const Saved*>(saved));
  });
}

size_t tch_scope_module_saved_modes(const void* saved, uint8_t* out, size_t cap) {
  const auto& flags = static_cast<const Saved*>(saved)->flags;
  for (size_t i = 0; i < flags.size() && i < cap; ++i) out[i] = flags[i].was ? 1 : 0;
  return flags.size();
}

void tch_scope_module_saved_free(void* saved) { delete static_cast<const Saved*>(saved); }

}  // extern "C"
