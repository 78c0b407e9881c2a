// Variables: a model's named, shaped float tensors. All weights live in one contiguous arena and
// all gradients in another, so a whole-model reduction, copy or checkpoint is one buffer and
// weights() costs nothing.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "detail/aligned_allocator.hpp"
#include "error.hpp"
#include "tensor.hpp"

namespace convoy {

/// Index of a variable inside its Variables set. Layers keep these instead of pointers because the
/// arena moves while variables are still being added.
struct VariableId {
  std::size_t index = 0;
  friend bool operator==(VariableId, VariableId) = default;
};

/// One variable's place in the arenas.
struct Variable {
  std::string name;    ///< full name, scope included: "mlp/hidden/kernel"
  Shape shape;         ///< outermost first
  std::size_t offset;  ///< first element in the arenas
  std::size_t size;    ///< element count
  /// False for state that no optimizer trains (add_state: BatchNorm's running statistics).
  bool trainable = true;
};

/// Elements [begin, end) of an arena.
struct ArenaRange {
  std::size_t begin = 0;
  std::size_t end = 0;
  friend bool operator==(ArenaRange, ArenaRange) = default;
};

/// How the host reaches arenas it cannot address (device memory): copies `count` floats from
/// `from` to `to`, either way between them and host memory, ordered after the device's queued work
/// on them, and returns once the copy is done. Throws DeviceError (exec::Cuda's copies).
using ArenaCopy = std::function<void(float* to, float const* from, std::size_t count)>;

/// The ordered set of a model's variables. Not thread-safe for concurrent add(); concurrent reads
/// and writes of distinct elements of the arenas are the caller's business (the strategies
/// partition them).
///
/// The arenas are host memory unless bound to a device's (bind_arenas with an ArenaCopy): then
/// weights(), grads(), value() and grad() are device addresses, for the device's math only, and the
/// host reads and writes them through copy(), which get_flat, set_flat, get_weights, set_weights,
/// named, assign_named and copying a set do.
class Variables {
 public:
  static constexpr std::uint64_t default_seed = 0x5eedULL;

  /// `scope` prefixes every name ("gen" makes "gen/dense/kernel"), so two models in one process
  /// can never produce the same name by accident. `seed` drives initialisers.
  explicit Variables(std::string scope = {}, std::uint64_t seed = default_seed)
      : scope_(std::move(scope)), rng_(seed) {}

  /// A copy always owns its arenas in host memory, even when the original is bound to shared or
  /// device storage, so a copy can never write into another set's arena.
  Variables(Variables const& other)
      : scope_(other.scope_),
        list_(other.list_),
        by_name_(other.by_name_),
        own_weights_(other.element_count()),
        own_grads_(other.element_count()),
        rng_(other.rng_) {
    other.copy(own_weights_.data(), other.weights().data(), own_weights_.size());
    other.copy(own_grads_.data(), other.grads().data(), own_grads_.size());
  }
  Variables& operator=(Variables const& other) {
    if (this != &other) *this = Variables(other);
    return *this;
  }
  Variables(Variables&&) noexcept = default;
  Variables& operator=(Variables&&) noexcept = default;
  ~Variables() = default;

  /// Adds a zero-initialised variable named `scope/name`. Throws NameError when that name exists.
  VariableId add(std::string_view name, Shape shape) {
    return add_variable(name, std::move(shape), true);
  }

  /// Adds a zero-initialised state variable: values a model updates itself (BatchNorm's running
  /// statistics), carried by name like any other variable but never trained. Its "gradient" is the
  /// change the replica made, old value minus new, and every engine applies `w -= scale * g` to
  /// it instead of the optimizer: a synchronous step leaves the mean of the replicas' new values
  /// (TensorFlow's MEAN aggregation), an asynchronous update each replica's change in turn.
  VariableId add_state(std::string_view name, Shape shape) {
    return add_variable(name, std::move(shape), false);
  }

  /// The arena ranges of the state variables (add_state), in order, adjacent ones merged.
  std::vector<ArenaRange> state_ranges() const {
    std::vector<ArenaRange> ranges;
    for (auto const& v : list_) {
      if (v.trainable || v.size == 0) continue;
      if (!ranges.empty() && ranges.back().end == v.offset) {
        ranges.back().end += v.size;
      } else {
        ranges.push_back({v.offset, v.offset + v.size});
      }
    }
    return ranges;
  }

 private:
  VariableId add_variable(std::string_view name, Shape shape, bool trainable) {
    std::string full = scope_.empty() ? std::string(name) : scope_ + "/" + std::string(name);
    if (name.empty())
      throw NameError("convoy: a variable needs a non-empty name (scope '" + scope_ + "')");
    if (by_name_.contains(full)) {
      throw NameError("convoy: duplicate variable name '" + full +
                      "'; give each layer a distinct name, or build each model under its own scope "
                      "(convoy::Variables{\"scope\"})");
    }
    if (!external_.empty() || !external_grads_.empty()) {
      throw NameError("convoy: cannot add '" + full +
                      "' after the arenas were bound to shared or device storage");
    }
    std::size_t const size = convoy::element_count(shape);
    std::size_t const offset = own_weights_.size();
    list_.push_back(Variable{full, std::move(shape), offset, size, trainable});
    by_name_.emplace(full, list_.size() - 1);
    own_weights_.resize(offset + size, 0.0f);
    own_grads_.resize(offset + size, 0.0f);
    return VariableId{list_.size() - 1};
  }

 public:
  std::span<float> value(VariableId id) {
    return weights().subspan(list_[id.index].offset, list_[id.index].size);
  }
  std::span<float const> value(VariableId id) const {
    return weights().subspan(list_[id.index].offset, list_[id.index].size);
  }
  std::span<float> grad(VariableId id) {
    return grads().subspan(list_[id.index].offset, list_[id.index].size);
  }
  std::span<float const> grad(VariableId id) const {
    return grads().subspan(list_[id.index].offset, list_[id.index].size);
  }

  /// The whole weights arena, in declaration order (the Ray text's get_flat()).
  std::span<float> weights() { return external_.empty() ? std::span(own_weights_) : external_; }
  std::span<float const> weights() const {
    return external_.empty() ? std::span<float const>(own_weights_)
                             : std::span<float const>(external_);
  }
  /// The whole gradient arena, same layout as weights().
  std::span<float> grads() {
    return external_grads_.empty() ? std::span(own_grads_) : external_grads_;
  }
  std::span<float const> grads() const {
    return external_grads_.empty() ? std::span<float const>(own_grads_)
                                   : std::span<float const>(external_grads_);
  }

  /// Copies of the flat weights (get_flat / set_flat). set_flat throws ShapeError on a size
  /// mismatch.
  std::vector<float> get_flat() const { return to_host(weights()); }
  void set_flat(std::span<float const> flat) {
    if (flat.size() != element_count()) {
      throw ShapeError("convoy: set_flat got " + std::to_string(flat.size()) + " values; '" +
                       scope_ + "' holds " + std::to_string(element_count()));
    }
    copy(weights().data(), flat.data(), flat.size());
  }

  /// Whether the host reads and writes the arenas only through copy() (bound to device memory).
  bool arenas_on_device() const { return static_cast<bool>(copy_); }
  /// Copies `count` floats between this set's arenas (or memory of the same kind: an optimizer's
  /// slots, a staging buffer) and host memory, either way: std::copy_n for host arenas, the
  /// device's copy, ordered after its queued work, for device ones.
  void copy(float* to, float const* from, std::size_t count) const {
    if (count == 0) return;
    if (copy_) {
      copy_(to, from, count);
    } else {
      std::copy_n(from, count, to);
    }
  }
  /// A host copy of `arena` (one of this set's arenas, or memory of the same kind).
  std::vector<float> to_host(std::span<float const> arena) const {
    std::vector<float> out(arena.size());
    copy(out.data(), arena.data(), arena.size());
    return out;
  }

  /// Makes this set read and write its weights in `shared` (CentralStorage: one copy, many
  /// replicas). `shared` must outlive this set and hold element_count() floats.
  void bind_weights(std::span<float> shared) {
    if (shared.size() != element_count()) {
      throw ShapeError("convoy: bind_weights got an arena of " + std::to_string(shared.size()) +
                       " floats for " + std::to_string(element_count()));
    }
    external_ = shared;
    own_weights_ = {};
  }

  /// Moves both arenas into `weights` and `grads` (each element_count() floats), copying the
  /// current values there; `owner` keeps that memory alive while this set uses it. `device_copy`
  /// is how the host reaches memory it cannot address (exec::Cuda::adopt's device arenas); none:
  /// the host reads and writes it directly (page-locked memory). Throws ShapeError on a size
  /// mismatch, changing nothing.
  void bind_arenas(std::span<float> weights, std::span<float> grads, std::shared_ptr<void> owner,
                   ArenaCopy device_copy = {}) {
    if (weights.size() != element_count() || grads.size() != element_count()) {
      throw ShapeError("convoy: bind_arenas got arenas of " + std::to_string(weights.size()) +
                       " and " + std::to_string(grads.size()) + " floats for " +
                       std::to_string(element_count()) + " in '" + scope_ + "'");
    }
    // By way of the host: the current arenas may be a device's too.
    auto const put = [&](std::span<float> to, std::span<float const> from) {
      auto const values = to_host(from);
      if (device_copy) {
        device_copy(to.data(), values.data(), values.size());
      } else {
        std::ranges::copy(values, to.begin());
      }
    };
    put(weights, this->weights());
    put(grads, this->grads());
    external_ = weights;
    external_grads_ = grads;
    storage_owner_ = std::move(owner);
    copy_ = std::move(device_copy);
    own_weights_ = {};
    own_grads_ = {};
  }

  std::size_t size() const { return list_.size(); }
  std::size_t element_count() const {
    return list_.empty() ? 0 : list_.back().offset + list_.back().size;
  }
  std::span<Variable const> list() const { return list_; }
  Variable const& operator[](VariableId id) const { return list_[id.index]; }
  std::string const& scope() const { return scope_; }

  /// Looks a variable up by its full name.
  std::optional<VariableId> find(std::string_view name) const {
    auto it = by_name_.find(std::string(name));
    return it == by_name_.end() ? std::nullopt : std::optional(VariableId{it->second});
  }
  /// Like find(), but throws NameError naming `name` and the scope when it is absent.
  VariableId at(std::string_view name) const {
    if (auto id = find(name)) return *id;
    throw NameError("convoy: no variable named '" + std::string(name) + "' in '" + scope_ + "'");
  }

  /// The generator initialisers draw from; seeded by the constructor.
  std::mt19937_64& rng() { return rng_; }

  /// Every variable as a name -> tensor map (the Ray text's get_weights()).
  std::map<std::string, Tensor> get_weights() const { return named(weights()); }

  /// Sets every variable by name. Checks everything first and throws one LoadError that lists every
  /// unknown, missing and mis-shaped name; on error nothing is changed.
  void set_weights(std::map<std::string, Tensor> const& named_tensors) {
    check_names(named_tensors, "set_weights");
    assign_named(named_tensors, weights());
  }

  /// `arena` (laid out like the weights: a central copy, an optimizer slot) as tensors keyed by
  /// each variable's name followed by `suffix`.
  std::map<std::string, Tensor> named(std::span<float const> arena,
                                      std::string_view suffix = {}) const {
    std::vector<float> staged;
    if (copy_) {
      staged = to_host(arena);
      arena = staged;
    }
    std::map<std::string, Tensor> out;
    for (auto const& v : list_) {
      auto const src = arena.subspan(v.offset, v.size);
      out.emplace(v.name + std::string(suffix),
                  Tensor{v.shape, std::vector<float>(src.begin(), src.end())});
    }
    return out;
  }

  /// The inverse of named(): copies each variable's tensor (key: name + `suffix`) into its place in
  /// `arena`. Call check_names() first; this assumes every key is there with its shape.
  void assign_named(std::map<std::string, Tensor> const& named_tensors, std::span<float> arena,
                    std::string_view suffix = {}) const {
    std::vector<float> staged(copy_ ? arena.size() : 0);
    std::span<float> const to = copy_ ? std::span<float>(staged) : arena;
    for (auto const& v : list_) {
      auto const& t = named_tensors.at(v.name + std::string(suffix));
      std::copy(t.data.begin(), t.data.end(), to.begin() + static_cast<std::ptrdiff_t>(v.offset));
    }
    if (copy_) copy(arena.data(), staged.data(), staged.size());
  }

  /// The check behind set_weights, every loader and the optimizer's slots: `named` maps keys to
  /// something with a `shape` member, and must hold exactly one key per variable and suffix (name +
  /// suffix) with the variable's shape. Throws one LoadError naming every unknown, missing and
  /// mis-shaped key; `what` says who is loading, for the message.
  template <class Map>
  void check_names(Map const& named, std::string_view what,
                   std::span<std::string const> suffixes = no_suffix()) const {
    std::map<std::string, Shape const*> expected;
    for (auto const& suffix : suffixes) {
      for (auto const& v : list_) expected.emplace(v.name + suffix, &v.shape);
    }
    std::string unknown, missing, misshaped;
    auto append = [](std::string& list, std::string const& item) {
      list += (list.empty() ? "" : ", ") + item;
    };
    for (auto const& [name, value] : named) {
      auto it = expected.find(name);
      if (it == expected.end()) {
        append(unknown, "'" + name + "'");
      } else if (value.shape != *it->second || !holds_its_shape(value)) {
        append(misshaped, "'" + name + "' is " + to_string(value.shape) + ", expected " +
                              to_string(*it->second));
      }
    }
    for (auto const& [name, shape] : expected) {
      if (!named.contains(name)) append(missing, "'" + name + "'");
    }
    if (unknown.empty() && missing.empty() && misshaped.empty()) return;
    std::string message = "convoy: " + std::string(what) + " does not match the model's variables";
    if (!unknown.empty()) message += "; unknown: " + unknown;
    if (!missing.empty()) message += "; missing: " + missing;
    if (!misshaped.empty()) message += "; mis-shaped: " + misshaped;
    throw LoadError(message);
  }

 private:
  static std::span<std::string const> no_suffix() {
    static std::string const empty[1] = {""};
    return empty;
  }

  // A Tensor's fields are public, so its data may disagree with its shape; other records are
  // checked by their readers.
  template <class T>
  static constexpr bool has_flat_data = requires(T const& t) {
    t.data.size();
  };
  template <class T>
  static bool holds_its_shape(T const& value) {
    if constexpr (has_flat_data<T>) {
      return value.data.size() == convoy::element_count(value.shape);
    } else {
      return true;
    }
  }

  std::string scope_;
  std::vector<Variable> list_;
  std::unordered_map<std::string, std::size_t> by_name_;
  detail::AlignedVector<float> own_weights_;
  std::span<float> external_;
  detail::AlignedVector<float> own_grads_;
  std::span<float> external_grads_;
  std::shared_ptr<void> storage_owner_;  // keeps bind_arenas' memory alive
  ArenaCopy copy_;                       // set: the arenas are device memory
  std::mt19937_64 rng_;
};

}  // namespace convoy
