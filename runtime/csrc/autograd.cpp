// Custom autograd functions written in Rust (autograd.h).
//
// The node is a subclass of libtorch's `CppNode` (what
// `torch::autograd::Function<T>` makes), so the engine, saved variables,
// `mark_dirty` / `mark_non_differentiable` and output wrapping
// (`_wrap_outputs`) behave exactly as for a C++ custom function; it
// overrides `name()` (the Rust type's name, in the engine's messages) and
// `apply()` (materializes absent gradients, then calls Rust). Apply is split
// in two around the forward, which the Rust side runs itself with grad mode
// off: begin (node, edges, input metadata) and finish (wrap outputs, save
// variables), the steps of `Function<T>::apply`.
#include <ATen/SequenceNumber.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/csrc/autograd/functions/accumulate_grad.h>

#include <atomic>
#include <memory>
#include <string>
#include <type_traits>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "autograd.h"
#include "common.h"

namespace {

using torch::autograd::variable_list;
using torch::autograd::Variable;

// Only the type CppNode is instantiated with; RustNode::apply replaces the
// generic apply that would call this backward.
struct RustTag : torch::autograd::Function<RustTag> {
  static variable_list backward(torch::autograd::AutogradContext*, variable_list) {
    TORCH_CHECK(false, "tch-scope: a Rust custom function's node was applied generically");
  }
};

struct Out {
  variable_list grads;
  std::string error;
};

// How libtorch owns autograd nodes: `c10::intrusive_ptr` since the node
// became an `intrusive_ptr_target`, `std::shared_ptr` before (libtorch 2.11,
// tch 0.24). Named through the node type, so one source builds against both.
constexpr bool kIntrusiveNodes = std::is_base_of_v<c10::intrusive_ptr_target, torch::autograd::Node>;
template <class N>
using Ptr = std::conditional_t<kIntrusiveNodes, c10::intrusive_ptr<N>, std::shared_ptr<N>>;
using NodePtr = Ptr<torch::autograd::Node>;

template <class T>
NodePtr make_node() {
  if constexpr (std::is_base_of_v<c10::intrusive_ptr_target, T>) {
    return c10::make_intrusive<T>();
  } else {
    return std::make_shared<T>();
  }
}

struct RustNode final : torch::autograd::CppNode<RustTag> {
  std::string name_;
  bool executable_ = false;
  bool materialize_ = true;
  // The inputs, between begin and finish only.
  variable_list inputs_;
  void* state_ = nullptr;
  // The reference the Rust side holds, from begin until node_free: the node
  // owns itself until then (a cycle broken by node_free).
  NodePtr keep_;
  tch_scope_autograd_backward_fn backward_ = nullptr;
  tch_scope_autograd_drop_fn drop_ = nullptr;

  RustNode() = default;
  RustNode(const RustNode&) = delete;
  RustNode& operator=(const RustNode&) = delete;

  ~RustNode() override {
    if (state_ != nullptr && drop_ != nullptr) drop_(state_);
  }

  std::string name() const override { return name_; }

  variable_list apply(variable_list&& grads) override {
    // As CppNode::apply: Rust's backward may read the context.
    std::lock_guard<std::mutex> lock(mutex_);
    TORCH_CHECK(state_ != nullptr && backward_ != nullptr, "tch-scope: the node of ", name_,
                " has no backward");
    at::OptionalDeviceGuard device_guard;
    std::vector<void*> handles;
    handles.reserve(grads.size());
    // Until Rust takes them, the handles are ours.
    struct Handles {
      std::vector<void*>& h;
      bool given = false;
      ~Handles() {
        if (!given)
          for (void* p : h) delete static_cast<at::Tensor*>(p);
      }
    } owned{handles};
    for (size_t i = 0; i < grads.size(); ++i) {
      at::Tensor g;
      if (grads[i].defined() || !materialize_) {
        g = std::move(grads[i]);
      } else {
        TORCH_CHECK(i < output_info_.size(), "tch-scope: ", name_, " got more gradients than outputs");
        g = output_info_[i].zeros(device_guard);
      }
      handles.push_back(new at::Tensor(std::move(g)));
    }
    Out out;
    owned.given = true;
    int32_t rc = backward_(state_, handles.data(), handles.size(), &out);
    if (rc != 0) {
      // c10::Error without a C++ backtrace: the message is Rust's.
      throw c10::Error(out.error.empty() ? "backward of " + name_ + " failed" : out.error);
    }
    TORCH_CHECK(out.grads.size() == is_variable_input_.size(), "function ", name_,
                " returned an incorrect number of gradients (expected ", is_variable_input_.size(),
                ", got ", out.grads.size(), ")");
    return std::move(out.grads);
  }
};

RustNode* node_of(void* p) { return static_cast<RustNode*>(p); }
const RustNode* node_of(const void* p) { return static_cast<const RustNode*>(p); }

variable_list tensors(void* const* ts, size_t n) {
  variable_list out;
  out.reserve(n);
  for (size_t i = 0; i < n; ++i) out.push_back(*static_cast<const at::Tensor*>(ts[i]));
  return out;
}

// Recompute's cut between a recomputed body and the graph before it, for a
// backward with create_graph: the grad_fn of a recomputed input, an identity
// into the input's own graph that passes nothing on until opened (after the
// nested backward through the body, which must stop at the cut: its
// gradients go on through the recompute node), so that a double backward
// through the gradients' graph goes on into the inputs' graph. The edge is
// there from the start: libtorch fixes a node's topological number when it
// gets a parent.
struct RecomputeInputNode final : torch::autograd::Node {
  std::atomic<bool> open_{false};
  std::string name() const override { return "tch_scope::RecomputeInput"; }
  variable_list apply(variable_list&& grads) override {
    if (open_.load(std::memory_order_acquire)) return std::move(grads);
    return variable_list(grads.size());
  }
};

using RecomputeCut = std::vector<NodePtr>;

struct EdgeKey {
  const torch::autograd::Node* fn;
  uint32_t nr;
  bool operator==(const EdgeKey& o) const { return fn == o.fn && nr == o.nr; }
};
struct EdgeKeyHash {
  size_t operator()(const EdgeKey& k) const { return std::hash<const void*>()(k.fn) ^ (size_t{k.nr} * 0x9e3779b97f4a7c15ULL); }
};

// A tensor whose gradient edge is `edge`: the parameter itself for a leaf's
// accumulator, else a one-element stand-in (stride 0, not a view) of the
// shape, dtype and device the edge's node expects.
at::Tensor tensor_of_edge(const torch::autograd::Edge& edge) {
  if (auto* acc = dynamic_cast<torch::autograd::AccumulateGrad*>(edge.function.get())) return acc->variable;
  const auto& meta = edge.function->input_metadata(edge.input_nr);
  TORCH_CHECK(!meta.is_nested_tensor() && !meta.is_tensor_subclass(),
              "recompute: a tensor the recomputed function captures is a nested tensor or a tensor subclass");
  std::vector<int64_t> sizes;
  for (const c10::SymInt& d : meta.shape_as_dim_vector()) sizes.push_back(d.expect_int());
  at::Tensor t = at::empty_strided(sizes, std::vector<int64_t>(sizes.size(), 0), meta.options());
  torch::autograd::impl::set_gradient_edge(t, edge);
  return t;
}

}  // namespace

extern "C" {

tch_scope_status tch_scope_autograd_begin(const char* name, void* const* inputs, size_t n, void** node,
                                          bool* executable) {
  return tch_scope::guarded([&] {
    NodePtr keep = make_node<RustNode>();
    auto* rn = static_cast<RustNode*>(keep.get());
    rn->name_ = name;
    variable_list input_vars = tensors(inputs, n);
    rn->is_variable_input_.assign(n, true);
    bool exec = at::GradMode::is_enabled() && torch::autograd::any_variable_requires_grad(input_vars);
    auto edges = exec ? torch::autograd::collect_next_edges(input_vars) : torch::autograd::edge_list();
    rn->set_ctx_grad_fn(keep);
    rn->set_next_edges(std::move(edges));
    rn->clear_input_metadata();
    rn->input_info_.reserve(n);
    for (auto& var : input_vars) rn->input_info_.emplace_back(var);
    rn->inputs_ = std::move(input_vars);
    rn->executable_ = exec;
    *executable = exec;
    rn->keep_ = std::move(keep);
    *node = rn;
  });
}

tch_scope_status tch_scope_autograd_finish(void* node, void* const* outputs, size_t n, void* state,
                                           tch_scope_autograd_backward_fn backward,
                                           tch_scope_autograd_drop_fn drop, void** wrapped) {
  // Owned from here on, even if the rest fails.
  RustNode* rn = node_of(node);
  rn->state_ = state;
  rn->backward_ = backward;
  rn->drop_ = drop;
  return tch_scope::guarded([&] {
    std::vector<std::optional<Variable>> raw;
    raw.reserve(n);
    for (size_t i = 0; i < n; ++i) raw.emplace_back(*static_cast<const at::Tensor*>(outputs[i]));
    torch::autograd::_jvp_fn_t jvp_fn = [](const variable_list&, const variable_list&) -> variable_list {
      TORCH_CHECK(false, "forward-mode AD (jvp) is not implemented for tch-scope custom functions");
    };
    auto view_as_self_fn = [](const at::Tensor& x) -> at::Tensor { return x.view_as(x); };
    bool exec = rn->executable_;
    NodePtr cdata;
    if (exec) cdata = rn->keep_;
    auto out = torch::autograd::_wrap_outputs(rn->inputs_, rn->ctx_.get_non_differentiable(),
                                              rn->ctx_.get_and_bump_dirty(), raw, cdata, jvp_fn, {},
                                              view_as_self_fn, false);
    rn->inputs_.clear();
    if (exec) {
      rn->output_info_.reserve(out.size());
      for (auto& o : out) {
        if (o.has_value()) {
          rn->output_info_.emplace_back(o.value());
        } else {
          rn->output_info_.emplace_back();
        }
      }
      rn->save_variables_to_ctx();
    }
    // All or nothing: no handle leaks if an allocation fails halfway.
    std::vector<std::unique_ptr<at::Tensor>> made;
    made.reserve(out.size());
    for (auto& o : out) made.push_back(std::make_unique<at::Tensor>(o.has_value() ? *o : at::Tensor()));
    for (size_t i = 0; i < made.size(); ++i) wrapped[i] = made[i].release();
  });
}

void tch_scope_autograd_node_free(void* node) {
  // Drops the reference begin made: the graph's own references, if any,
  // keep the node alive.
  NodePtr self = std::move(node_of(node)->keep_);
}

tch_scope_status tch_scope_autograd_save_for_backward(void* node, void* const* ts, size_t n) {
  return tch_scope::guarded([&] { node_of(node)->ctx_.save_for_backward(tensors(ts, n)); });
}

tch_scope_status tch_scope_autograd_mark_dirty(void* node, void* const* ts, size_t n) {
  return tch_scope::guarded([&] { node_of(node)->ctx_.mark_dirty(tensors(ts, n)); });
}

tch_scope_status tch_scope_autograd_mark_non_differentiable(void* node, void* const* ts, size_t n) {
  return tch_scope::guarded([&] { node_of(node)->ctx_.mark_non_differentiable(tensors(ts, n)); });
}

void tch_scope_autograd_set_materialize_grads(void* node, bool value) {
  node_of(node)->materialize_ = value;
}

tch_scope_status tch_scope_autograd_needs_input_grad(const void* node, size_t i, bool* out) {
  return tch_scope::guarded([&] {
    const RustNode* rn = node_of(node);
    TORCH_CHECK(i < rn->is_variable_input_.size(), "needs_input_grad(", i, ") of ", rn->name_, ": it has ",
                rn->is_variable_input_.size(), " inputs");
    *out = rn->executable_ && rn->ctx_.needs_input_grad(i);
  });
}

tch_scope_status tch_scope_autograd_saved(const void* node, void** out, size_t cap, size_t* n) {
  return tch_scope::guarded([&] {
    variable_list saved = node_of(node)->ctx_.get_saved_variables();
    *n = saved.size();
    if (saved.size() > cap) return;
    std::vector<std::unique_ptr<at::Tensor>> made;
    made.reserve(saved.size());
    for (auto& t : saved) made.push_back(std::make_unique<at::Tensor>(std::move(t)));
    for (size_t i = 0; i < made.size(); ++i) out[i] = made[i].release();
  });
}

tch_scope_status tch_scope_autograd_out_push(void* out, const void* tensor) {
  return tch_scope::guarded([&] {
    auto* o = static_cast<Out*>(out);
    o->grads.push_back(tensor == nullptr ? at::Tensor() : *static_cast<const at::Tensor*>(tensor));
  });
}

void tch_scope_autograd_out_fail(void* out, const char* msg, size_t len) {
  try {
    static_cast<Out*>(out)->error.assign(msg, len);
  } catch (...) {
  }
}

tch_scope_status tch_scope_autograd_grad(void* const* outputs, void* const* grad_outputs, size_t n_outputs,
                                         void* const* inputs, size_t n_inputs, bool retain_graph,
                                         bool create_graph, void** out) {
  return tch_scope::guarded([&] {
    auto g = torch::autograd::grad(tensors(outputs, n_outputs), tensors(inputs, n_inputs),
                                   tensors(grad_outputs, n_outputs), retain_graph, create_graph,
                                   /*allow_unused=*/true);
    TORCH_CHECK(g.size() == n_inputs, "autograd::grad returned ", g.size(), " gradients for ", n_inputs,
                " inputs");
    std::vector<std::unique_ptr<at::Tensor>> made;
    made.reserve(n_inputs);
    for (auto& t : g) made.push_back(std::make_unique<at::Tensor>(std::move(t)));
    for (size_t i = 0; i < made.size(); ++i) out[i] = made[i].release();
  });
}

uint64_t tch_scope_autograd_sequence_peek() { return at::sequence_number::peek(); }

tch_scope_status tch_scope_recompute_frontier(void* const* outputs, size_t n_outputs, void* const* inputs,
                                              size_t n_inputs, uint64_t first, uint64_t end, void** list,
                                              size_t* n) {
  return tch_scope::guarded([&] {
    using torch::autograd::Edge;
    using torch::autograd::Node;
    // The inputs' accumulators: gradients reaching them go through the
    // recompute node's own inputs.
    std::unordered_set<const Node*> input_acc;
    std::vector<NodePtr> held;
    for (size_t i = 0; i < n_inputs; ++i) {
      const auto& t = *static_cast<const at::Tensor*>(inputs[i]);
      // Made if the body used none yet (an output that is an input); held
      // for the walk, so that the output's edge finds the same one.
      if (t.defined() && t.requires_grad()) {
        held.push_back(torch::autograd::impl::grad_accumulator(t));
        input_acc.insert(held.back().get());
      }
    }
    // Nodes the body made (sequence numbers taken on this thread while it
    // ran; accumulators have none) are walked; an edge to any other node
    // leaves the body.
    auto made_here = [&](const Node* f) {
      uint64_t s = f->sequence_nr();
      return s >= first && s < end;
    };
    std::unordered_set<const Node*> seen;
    std::unordered_set<EdgeKey, EdgeKeyHash> out_seen;
    std::vector<Node*> stack;
    std::vector<Edge> frontier;
    auto visit = [&](const Edge& e) {
      if (!e.is_valid()) return;
      Node* f = e.function.get();
      if (input_acc.count(f) != 0) return;
      if (made_here(f)) {
        if (seen.insert(f).second) stack.push_back(f);
      } else if (out_seen.insert(EdgeKey{f, e.input_nr}).second) {
        frontier.push_back(e);
      }
    };
    for (size_t i = 0; i < n_outputs; ++i) {
      const auto& t = *static_cast<const at::Tensor*>(outputs[i]);
      if (t.defined() && t.requires_grad()) visit(torch::autograd::impl::gradient_edge(t));
    }
    while (!stack.empty()) {
      Node* f = stack.back();
      stack.pop_back();
      for (const Edge& e : f->next_edges()) visit(e);
    }
    // The backward through the body asks the engine for the gradients at
    // these edges; it would run a captured tensor's own graph (outside the
    // body) if that graph led to another of them, counting that path twice.
    std::unordered_set<const Node*> targets;
    for (const Edge& e : frontier) targets.insert(e.function.get());
    std::unordered_set<const Node*> walked;
    for (const Edge& e : frontier) {
      if (dynamic_cast<const torch::autograd::AccumulateGrad*>(e.function.get()) != nullptr) continue;
      stack.assign(1, e.function.get());
      while (!stack.empty()) {
        Node* f = stack.back();
        stack.pop_back();
        for (const Edge& next : f->next_edges()) {
          if (!next.is_valid() || !walked.insert(next.function.get()).second) continue;
          TORCH_CHECK(targets.count(next.function.get()) == 0,
                      "recompute: the function captures a tensor that requires grad and is not a leaf (",
                      e.function->name(), "), and the graph that made it reaches another tensor the ",
                      "function uses (a parameter or captured tensor, through ", next.function->name(),
                      "): pass the captured tensor as an input of recompute instead");
          stack.push_back(next.function.get());
        }
      }
    }
    auto tensors = std::make_unique<variable_list>();
    tensors->reserve(frontier.size());
    for (const Edge& e : frontier) tensors->push_back(tensor_of_edge(e));
    *n = tensors->size();
    *list = tensors.release();
  });
}

void tch_scope_tensor_list_take(void* list, void** out) {
  std::unique_ptr<variable_list> tensors(static_cast<variable_list*>(list));
  for (size_t i = 0; i < tensors->size(); ++i) out[i] = new at::Tensor(std::move((*tensors)[i]));
}

tch_scope_status tch_scope_recompute_cut(void* const* inputs, size_t n, bool create_graph, void** out,
                                         void** cut) {
  return tch_scope::guarded([&] {
    auto pending = std::make_unique<RecomputeCut>();
    std::vector<std::unique_ptr<at::Tensor>> made;
    made.reserve(n);
    for (size_t i = 0; i < n; ++i) {
      const auto& x = *static_cast<const at::Tensor*>(inputs[i]);
      if (!x.defined()) {
        made.push_back(std::make_unique<at::Tensor>());
        continue;
      }
      at::Tensor d = x.detach();
      if (x.requires_grad()) {
        if (create_graph) {
          NodePtr node = make_node<RecomputeInputNode>();
          node->set_next_edges(torch::autograd::collect_next_edges(x));
          node->add_input_metadata(d);
          torch::autograd::impl::set_gradient_edge(d, torch::autograd::Edge(node, 0));
          pending->push_back(std::move(node));
        } else {
          d.requires_grad_(true);
        }
      }
      made.push_back(std::make_unique<at::Tensor>(std::move(d)));
    }
    for (size_t i = 0; i < n; ++i) out[i] = made[i].release();
    *cut = pending.release();
  });
}

void tch_scope_recompute_open(void* cut) {
  std::unique_ptr<RecomputeCut> pending(static_cast<RecomputeCut*>(cut));
  for (auto& node : *pending) static_cast<RecomputeInputNode*>(node.get())->open_.store(true, std::memory_order_release);
}

}  // extern "C"
