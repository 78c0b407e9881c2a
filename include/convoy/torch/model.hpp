// libtorch::Model<Net>: any LibTorch module as a convoy model. Its parameters and gradients are
// views of convoy's two arenas, named as named_parameters() names them, so every strategy trains
// it, every file speaks LibTorch's names, and a step copies no weight (each gradient once, into
// the arena). Part of the optional component convoy::torch; convoy.hpp does not include it.
#pragma once

#include <omp.h>
#include <torch/torch.h>

#include <algorithm>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "../core/batch.hpp"
#include "../core/concepts.hpp"
#include "../core/error.hpp"
#include "../core/gradient_places.hpp"
#include "../core/gradients_ready.hpp"
#include "../core/tensor.hpp"
#include "../core/variables.hpp"
#include "detail/autocast.hpp"
#include "detail/tensors.hpp"

// The device path: a program that links convoy::cuda (place::Gpu computes on a device) and a
// LibTorch built with CUDA (convoy::torch defines CONVOY_TORCH_WITH_CUDA then) runs the module on
// its replica's device and stream. Without either, the model computes on the host and says why.
#if defined(CONVOY_WITH_CUDA) && defined(CONVOY_TORCH_WITH_CUDA)
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#define CONVOY_TORCH_ON_DEVICE 1
#endif

// The namespace is libtorch, not torch: inside namespace convoy, or after `using namespace
// convoy`, a convoy::torch would hide or clash with LibTorch's own ::torch.
namespace convoy::libtorch {

namespace detail {

// to[i].copy_(from[i]) and to[i].sub_(from[i]) for every i: on a device, one multi-tensor kernel
// (LibTorch's foreach operations; copy since 2.1) instead of a launch per tensor, which for a
// ResNet's dozens of BatchNorm buffers cost more than its convolutions' share of a step; on the
// host, a loop.
inline void copy_each(std::vector<::torch::Tensor> const& to,
                      std::vector<::torch::Tensor> const& from) {
#if __has_include(<ATen/ops/_foreach_copy.h>)
  if (!to.empty() && to.front().is_cuda()) return at::_foreach_copy_(to, from);
#endif
  for (std::size_t i = 0; i < to.size(); ++i) to[i].copy_(from[i]);
}
inline void subtract_each(std::vector<::torch::Tensor> const& to,
                          std::vector<::torch::Tensor> const& from) {
  if (!to.empty() && to.front().is_cuda()) return at::_foreach_sub_(to, from);
  for (std::size_t i = 0; i < to.size(); ++i) to[i].sub_(from[i]);
}

}  // namespace detail

/// A batch's loss: a scalar tensor, the mean over the batch's rows, from the module's output and
/// the batch (labels or targets). Called on the replica's own thread.
using Loss = std::function<::torch::Tensor(::torch::Tensor const& output, Batch const& batch)>;

/// The batch's labels as a LibTorch int64 tensor on `device` (a copy of `rows` integers; to a GPU
/// without waiting for it when the batch is in page-locked memory). A Loss passes its output's
/// device: `labels_of(batch, output.device())`.
inline ::torch::Tensor labels_of(Batch const& batch, ::torch::Device device = ::torch::kCPU) {
  auto const rows = static_cast<std::int64_t>(batch.labels.size());
  return ::torch::from_blob(const_cast<std::int32_t*>(batch.labels.data()), {rows}, ::torch::kInt)
      .to(device, ::torch::kLong, /*non_blocking=*/true);
}

/// The default Loss: softmax cross-entropy of the output's logits against the batch's labels.
inline ::torch::Tensor cross_entropy(::torch::Tensor const& logits, Batch const& batch) {
  return ::torch::nn::functional::cross_entropy(logits, labels_of(batch, logits.device()));
}

/// A module holder (or pointer) whose module takes one tensor: `net->forward(tensor)`.
template <class Net>
concept has_tensor_forward = requires(Net& net, ::torch::Tensor const& input) {
  { net->forward(input) } -> std::convertible_to<::torch::Tensor>;
};

/// Options of a libtorch::Model beyond its factory.
struct ModelOptions {
  /// The shape of one row of a Batch's features, e.g. {1, 28, 28}: a batch becomes a tensor of
  /// {rows, 1, 28, 28} viewing the features in place. Empty: {columns}.
  std::vector<std::int64_t> row_shape{};
  /// The loss; the default is cross_entropy against the batch's labels.
  Loss loss = cross_entropy;
  /// LibTorch intra-op threads of each replica's forward and backward passes. A Strategy runs one
  /// replica per core, so more would oversubscribe the cores (docs/torch.md measures it).
  int threads = 1;
  /// Rows per forward pass in evaluate(): a larger batch is evaluated in slices of this many (0:
  /// whole). A slice's activations stay in the caches, where those of 1000 rows of a convolutional
  /// network do not: the torch_resnet example evaluates its test set 1.6x (LibTorch 1.13) to 2.3x
  /// (2.11) faster on one thread in slices of 128 than in the Trainer's batches of 1000
  /// (docs/torch.md).
  std::size_t evaluate_rows = 128;
  /// Mixed precision: a training pass's forward and loss under LibTorch's autocast to this type
  /// (::torch::kBFloat16, on the device the model computes on, the host included), so matrix
  /// products and convolutions compute in it; the weights, gradients, buffers and the optimizer
  /// stay float32, and evaluate() computes in float32. Empty: float32 throughout.
  std::optional<::torch::ScalarType> autocast{};
};

/// A convoy model made of the LibTorch module `Net` that `factory` builds: a module holder such as
/// torch::nn::Sequential or one declared with TORCH_MODULE, or a std::shared_ptr to a module.
///
/// Its variables are the module's parameters, named as named_parameters() names them
/// ("layer1.0.conv1.weight"), followed by its buffers as state variables (Variables::add_state:
/// BatchNorm's running statistics), which a synchronous step sets to the mean of the replicas'
/// new values. A copy builds a new module with the factory and takes every value by name, so a
/// module need not be Cloneable. Training runs the module in train() mode, evaluate() in eval()
/// mode without autograd. Under a placement on a GPU (place::Gpu in a program that links
/// convoy::cuda, with a LibTorch built with CUDA) the module computes on the replica's device and
/// stream, its parameters and gradients views of the arenas there (docs/torch.md). One replica per
/// thread: not thread-safe.
template <class Net>
class Model {
 public:
  using Factory = std::function<Net()>;

  /// Builds the module with `factory` and takes its initial values. Throws Error when the module
  /// has no parameters or a parameter or buffer is not on the CPU.
  explicit Model(Factory factory, ModelOptions options = {})
      : factory_(std::make_shared<Factory const>(std::move(factory))),
        options_(std::make_shared<ModelOptions const>(std::move(options))),
        net_((*factory_)()) {
    for (auto const& item : torch_module().named_parameters()) {
      auto const& t = item.value();
      check_host(item.key(), t);
      auto id = vars_.add(item.key(), detail::shape_of(t));
      copy_into(t, vars_.value(id));
    }
    for (auto const& item : torch_module().named_buffers()) {
      auto const& t = item.value();
      check_host(item.key(), t);
      auto id = vars_.add_state(item.key(), detail::shape_of(t));
      copy_into(t, vars_.value(id));
    }
    if (vars_.size() == 0 || vars_.list().front().trainable == false) {
      throw Error("convoy: the LibTorch module from the factory has no parameters to train");
    }
    adopt();
  }

  /// A new module from the same factory, with `other`'s values (copied by name) in arenas of its
  /// own. Throws LoadError naming the difference when the factory now builds another architecture.
  Model(Model const& other)
      : factory_(other.factory_),
        options_(other.options_),
        net_((*factory_)()),
        vars_(other.vars_) {
    adopt();
  }
  Model(Model&&) noexcept = default;
  Model& operator=(Model const&) = delete;
  Model& operator=(Model&&) noexcept = default;
  ~Model() = default;

  Variables& variables() { return vars_; }
  Variables const& variables() const { return vars_; }

#if !defined(CONVOY_TORCH_ON_DEVICE)
  /// Why this model computes on the host whatever the placement, in a program without the device
  /// path. A GPU placement (place::Gpu) hears it before it resolves, and falls back to the host in
  /// one line or refuses under strict placement.
  static std::string device_refusal() {
    return at::hasCUDA() ? "libtorch::Model computes on the host: link convoy::cuda (and compile "
                           "the program as CUDA) to put it on a GPU"
                         : "libtorch::Model computes on the host: this LibTorch has no CUDA";
  }
#endif

  /// The module, whose parameters view this model's weights. Use it to inspect or to run the
  /// module yourself; changing its parameters' shapes or devices breaks the views.
  Net const& net() const { return net_; }

  /// The batch's mean loss; overwrites every gradient. `ready` hears of each parameter as autograd
  /// finishes its gradient, so a collective engine exchanges it while the backward pass goes on.
  template <class Context>
  float forward_backward(Batch const& batch, Context const& ctx, GradientsReady ready = {}) {
    return train_on(batch, ctx, ready, nullptr);
  }
  float forward_backward(Batch const& batch, GradientsReady ready = {}) {
    return forward_backward(batch, host_context{}, ready);
  }
  /// The same for an engine that reads each gradient where it is (the lock-step sum): on the host,
  /// a parameter's gradient stays in the tensor autograd made for it and `places` says where,
  /// instead of being copied into the gradient arena, a write and a read of every gradient a step
  /// less (docs/torch.md measures it); the tensors live until the next forward_backward.
  template <class Context>
  float forward_backward(Batch const& batch, Context const& ctx, GradientPlaces& places) {
    return train_on(batch, ctx, {}, &places);
  }

  /// Loss sum and correct predictions over the batch, in eval() mode (BatchNorm normalizes with
  /// its running statistics) and without autograd, where the module last computed (the Trainer
  /// evaluates a copy, on the host), in slices of ModelOptions::evaluate_rows rows (the loss is a
  /// mean over its rows); touches no gradient.
  Metrics evaluate(Batch const& batch) {
    auto const slice = options_->evaluate_rows;
    // Targets that do not divide into rows go whole to the loss, which names what it expected.
    if (slice == 0 || batch.rows <= slice || batch.targets.size() % batch.rows != 0) {
      return evaluate_slice(batch);
    }
    check_rows(batch);
    Metrics total;
    for (std::size_t begin = 0; begin < batch.rows; begin += slice) {
      total += evaluate_slice(rows_of(batch, begin, std::min(slice, batch.rows - begin)));
    }
    return total;
  }

 private:
  // Rows [begin, begin + rows) of `batch`, a view: its features and labels fit its rows
  // (check_rows) and so do its targets.
  static Batch rows_of(Batch const& batch, std::size_t begin, std::size_t rows) {
    auto const cols = batch.cols();
    auto const target_cols = batch.targets.size() / batch.rows;
    Batch part{.features = batch.features.subspan(begin * cols, rows * cols),
               .labels = {},
               .targets = batch.targets.subspan(begin * target_cols, rows * target_cols),
               .rows = rows};
    if (!batch.labels.empty()) part.labels = batch.labels.subspan(begin, rows);
    return part;
  }

  Metrics evaluate_slice(Batch const& batch) {
#if defined(CONVOY_TORCH_ON_DEVICE)
    std::optional<c10::cuda::CUDAGuard> on_device;
    if (device_.is_cuda()) on_device.emplace(device_.index());
#endif
    Pass pass("evaluate", input_of(batch));
    return in_torch(pass, batch, [&] {
      bind(device_);
      torch_module().eval();
      ::torch::NoGradGuard no_grad;
      load_buffers();
      auto const output = forward(pass);
      pass.stage = Stage::loss;
      Metrics m;
      m.count = batch.rows;
      m.loss_sum = static_cast<double>(options_->loss(output, batch).template item<float>()) *
                   static_cast<double>(batch.rows);
      pass.stage = Stage::metrics;
      if (!batch.labels.empty() && output.dim() == 2) {
        m.correct = static_cast<std::size_t>(output.argmax(1)
                                                 .eq(labels_of(batch, output.device()))
                                                 .sum()
                                                 .template item<std::int64_t>());
      }
      return m;
    });
  }

  struct host_context {};

  // forward_backward, the gradients told to `ready` as they arrive, or left where autograd put
  // them when `places` is given and the module computes on the host.
  template <class Context>
  float train_on(Batch const& batch, Context const& ctx, GradientsReady ready,
                 GradientPlaces* places) {
    Placed const placed(*this, ctx);
    Pass pass("forward_backward", input_of(batch));
    return in_torch(pass, batch, [&] {
      use_threads();
      torch_module().train();
      load_buffers();
      gradients_->start(ready, arrival_for(ready, places));
      ::torch::Tensor loss;
      {
        detail::Autocast const mixed(options_->autocast, device_);
        auto const output = forward(pass);
        pass.stage = Stage::loss;
        loss = options_->loss(output, batch);
      }
      // The buffers' change, old minus new (Variables::add_state), is known once the forward
      // pass ran.
      {
        ::torch::NoGradGuard no_grad;
        detail::copy_each(buffer_views_.changes, buffer_views_.values);
        detail::subtract_each(buffer_views_.changes, buffer_views_.buffers);
      }
      for (auto const& [id, buffer] : buffers_) gradients_->tell(id.index);
      pass.stage = Stage::backward;
      {
        Backward const backward(*this);
        loss.backward();
        gradients_->gather(params_, places);
      }
      gradients_->finish();
      return loss.template item<float>();
    });
  }
  // How the gradients reach the engine. As they come: each parameter's hook copies the gradient
  // into the gradient arena and tells the engine at once, so a collective engine exchanges it
  // while the backward pass goes on. A hook on a leaf sees the gradient autograd has summed for
  // it, once, before AccumulateGrad; with the parameter's grad left undefined for the pass,
  // AccumulateGrad then keeps that tensor without a copy. The arena is written once, by the copy,
  // where zeroing it and letting autograd add into it wrote it twice and read it once more:
  // LibTorch 2.x's zero_grad() sets gradients to none, so a plain loop pays neither. After the
  // pass: one multi-tensor copy of them all (a device, nobody to tell). Left in place: no copy at
  // all; the engine reads the tensors autograd kept (docs/torch.md measures each).
  enum class Arrival { as_they_come, after_the_pass, left_in_place };
  Arrival arrival_for(GradientsReady const& ready, GradientPlaces const* places) const {
    if (places != nullptr && device_.is_cpu()) return Arrival::left_in_place;
    // Nobody to tell as gradients arrive (one replica on a device): copy them all at once after
    // the pass, in one multi-tensor kernel rather than one copy per parameter.
    if (!ready && device_.is_cuda()) return Arrival::after_the_pass;
    return Arrival::as_they_come;
  }
  struct GradientSink {
    GradientsReady ready;
    std::vector<::torch::Tensor> arena;  // by variable id: a parameter's gradient in the arena
    std::vector<char> told;
    bool active = false;
    Arrival arrival = Arrival::as_they_come;
    std::vector<::torch::Tensor> kept;  // the tensors left in place, alive until the next pass

    void start(GradientsReady r, Arrival how) {
      ready = r;
      arrival = how;
      kept.clear();
      told.assign(arena.size(), 0);
    }
    // Called by a parameter's hook; outside forward_backward (a backward pass the user runs), the
    // gradient accumulates into the arena view as autograd's own does.
    void arrived(std::size_t id, ::torch::Tensor const& grad) {
      if (!active || arrival != Arrival::as_they_come || told[id]) return;
      arena[id].copy_(grad);
      tell(id);
    }
    // After the pass: the gradients autograd left in the parameters' grads (undefined for the
    // pass, so it kept its own tensors), into the arena at once, or left where they are, which
    // `places` (given when left_in_place) then names.
    void gather(std::vector<std::pair<VariableId, ::torch::Tensor>> const& params,
                GradientPlaces* places) {
      if (arrival == Arrival::as_they_come) return;
      std::vector<::torch::Tensor> to, from;
      for (auto const& [id, param] : params) {
        auto const& grad = param.grad();
        if (!grad.defined()) continue;  // not reached: finish() zeroes it
        told[id.index] = 1;
        if (arrival == Arrival::left_in_place && leavable(grad, arena[id.index])) {
          kept.push_back(grad);
          places->leave(id, grad.template data_ptr<float>());
          continue;
        }
        to.push_back(arena[id.index]);
        from.push_back(grad);
      }
      ::torch::NoGradGuard no_grad;
      detail::copy_each(to, from);
    }
    // Whether the engine can read `grad` as it reads `home`, its place in the arena: host floats,
    // dense, of the same length, in the same order.
    static bool leavable(::torch::Tensor const& grad, ::torch::Tensor const& home) {
      return grad.device().is_cpu() && grad.scalar_type() == ::torch::kFloat &&
             grad.layout() == ::torch::kStrided && grad.is_contiguous() &&
             grad.sizes() == home.sizes();
    }
    void tell(std::size_t id) {
      if (told[id]) return;
      told[id] = 1;
      ready(VariableId{id}, VariableId{id});
    }
    // Parameters the loss did not reach have a zero gradient.
    void finish() {
      for (std::size_t id = 0; id < told.size(); ++id) {
        if (!told[id] && arena[id].defined()) arena[id].zero_();
        tell(id);
      }
    }
  };

  // The backward pass's scope: the parameters' grads are undefined within it, so that the hooks
  // take every gradient, and views of the arena again after it, as a user who runs backward()
  // outside forward_backward, or reads a parameter's grad() between runs, expects (during a
  // lock-step run the arena gets the gradients left in place only when the run ends).
  class Backward {
   public:
    explicit Backward(Model& model) : model_(model) {
      for (auto& [id, param] : model_.params_) param.mutable_grad() = ::torch::Tensor();
      model_.gradients_->active = true;
    }
    Backward(Backward const&) = delete;
    Backward& operator=(Backward const&) = delete;
    ~Backward() {
      model_.gradients_->active = false;
      for (auto& [id, param] : model_.params_)
        param.mutable_grad() = model_.gradients_->arena[id.index];
    }

   private:
    Model& model_;
  };

  ::torch::nn::Module& torch_module() { return *net_; }

  // A forward_backward's device: the context's device and stream while it lives, the module and
  // the views of the arenas moved there, or the host.
  class Placed {
   public:
    template <class Context>
    Placed(Model& model, Context const& ctx) {
      ::torch::Device device = ::torch::kCPU;
      if constexpr (may_compute_on_device<Context>) {
        if (ctx.on_device()) {
#if defined(CONVOY_TORCH_ON_DEVICE)
          device = ::torch::Device(::torch::kCUDA, static_cast<c10::DeviceIndex>(ctx.device()));
          stream_.emplace(c10::cuda::getStreamFromExternal(ctx.stream(), device.index()));
#else
          throw PlacementError("convoy: " + device_refusal() +
                               "; or use place::Host, place::Mirrored or place::CentralStorage");
#endif
        }
      }
      model.bind(device);
    }

   private:
#if defined(CONVOY_TORCH_ON_DEVICE)
    std::optional<c10::cuda::CUDAStreamGuard> stream_;
#endif
  };

  // Where a pass is, so that a LibTorch error names the part that refused: a shape mistake shows
  // in LibTorch's message only as the sizes of some internal tensor.
  enum class Stage { forward, loss, backward, metrics };
  struct Pass {
    Pass(char const* call_name, ::torch::Tensor module_input)
        : call(call_name), input(std::move(module_input)) {}
    char const* call;  // "forward_backward" or "evaluate"
    Stage stage = Stage::forward;
    // The module's input and, once it returned, its output: handles, not copies, whose shapes
    // are put in words only when a pass fails, so that a step that succeeds formats nothing.
    ::torch::Tensor input;
    ::torch::Tensor output{};
  };

  // Runs `f`, turning LibTorch's errors into convoy::Error: a first line of convoy's naming the
  // stage that failed, the shapes and the labels, then LibTorch's message without its stack trace.
  template <class F>
  auto in_torch(Pass const& pass, Batch const& batch, F&& f) const {
    try {
      return f();
    } catch (c10::Error const& e) {
      throw Error(failure(pass, batch) + "\nLibTorch: " + e.what_without_backtrace());
    }
  }

  std::string failure(Pass const& pass, Batch const& batch) const {
    std::string const rows = "the module's input was " + to_string(detail::shape_of(pass.input)) +
                             " (rows, then row_shape " + row_shape_text() + ")";
    std::string const output =
        "the module's output " + (pass.output.defined() ? to_string(detail::shape_of(pass.output))
                                                        : std::string("(none yet)"));
    std::string text = std::string("convoy: libtorch::Model::") + pass.call + ": ";
    switch (pass.stage) {
      case Stage::forward:
        text += "the module's forward pass failed; " + rows + ", " + labels_text(batch) +
                "; check row_shape against the input the module's first layer takes";
        break;
      case Stage::loss:
        text += "the loss failed on " + output + "; " + rows + ", " + labels_text(batch) +
                "; check that the loss takes that output (the default, cross_entropy, takes "
                "{rows, classes} logits and labels 0..classes-1)";
        break;
      case Stage::backward:
        text += "the backward pass failed; " + rows + ", " + output + ", " + labels_text(batch);
        break;
      case Stage::metrics:
        text += "counting correct predictions failed on " + output + "; " + rows + ", " +
                labels_text(batch);
        break;
    }
    return text;
  }

  static std::string labels_text(Batch const& batch) {
    if (batch.labels.empty()) return "the batch has no labels";
    auto const [low, high] = std::ranges::minmax(batch.labels);
    return "the batch's labels " + std::to_string(low) + ".." + std::to_string(high);
  }

  static void check_host(std::string const& name, ::torch::Tensor const& t) {
    if (!t.device().is_cpu()) {
      throw Error("convoy: '" + name + "' of the LibTorch module is on " + t.device().str() +
                  "; build the module on the CPU: libtorch::Model moves it to the device its "
                  "placement gives");
    }
  }
  static void copy_into(::torch::Tensor const& t, std::span<float> out) {
    ::torch::NoGradGuard no_grad;
    ::torch::from_blob(out.data(), t.sizes(), ::torch::kFloat).copy_(t);
  }
  // A float tensor of `like`'s shape over `span`'s memory, on the device the model computes on
  // (named, so that LibTorch does not ask the driver where the memory is).
  ::torch::Tensor view(std::span<float> span, ::torch::Tensor const& like) const {
    return at::for_blob(span.data(), like.sizes())
        .options(::torch::TensorOptions().dtype(::torch::kFloat).device(device_))
        .target_device(device_)
        .make_tensor();
  }

  // Matches the new module's parameters and buffers to the variables by name and makes the
  // parameters views of the arenas; hooks report their gradients. Throws LoadError naming every
  // unknown, missing and mis-shaped tensor when the factory built another architecture.
  void adopt() {
    struct Shaped {
      Shape shape;
    };
    std::map<std::string, Shaped> built;
    for (auto const& item : torch_module().named_parameters())
      built.emplace(item.key(), Shaped{detail::shape_of(item.value())});
    for (auto const& item : torch_module().named_buffers())
      built.emplace(item.key(), Shaped{detail::shape_of(item.value())});
    vars_.check_names(built, "the module the LibTorch factory built");
    params_.clear();
    buffers_.clear();
    for (auto const& item : torch_module().named_parameters())
      params_.emplace_back(vars_.at(item.key()), item.value());
    for (auto const& item : torch_module().named_buffers())
      buffers_.emplace_back(vars_.at(item.key()), item.value());
    bound_weights_ = nullptr;
    bind(device_);
    for (auto& [id, param] : params_) {
      param.register_hook([sink = gradients_, index = id.index](::torch::Tensor const& grad) {
        sink->arrived(index, grad);
      });
    }
  }

  // Points every parameter at its place in the arenas on `device`, again whenever a strategy
  // moved them (CentralStorage binds the weights to its central copy after the replicas are
  // built, a GPU placement moves them to its device); the buffers go to `device` too.
  void bind(::torch::Device device) {
    if (vars_.weights().data() == bound_weights_ && vars_.grads().data() == bound_grads_ &&
        device == device_) {
      return;
    }
    ::torch::NoGradGuard no_grad;
    device_ = device;
    for (auto& [id, buffer] : buffers_) {
      if (buffer.device() != device) buffer.set_data(buffer.to(device));
    }
    gradients_->arena.assign(vars_.size(), ::torch::Tensor());
    for (auto& [id, param] : params_) {
      param.set_data(view(vars_.value(id), param));
      gradients_->arena[id.index] = view(vars_.grad(id), param);
      param.mutable_grad() = gradients_->arena[id.index];
    }
    buffer_views_ = {};
    for (auto& [id, buffer] : buffers_) {
      buffer_views_.buffers.push_back(buffer);
      buffer_views_.values.push_back(view(vars_.value(id), buffer));
      buffer_views_.changes.push_back(view(vars_.grad(id), buffer));
    }
    bound_weights_ = vars_.weights().data();
    bound_grads_ = vars_.grads().data();
  }

  // The buffers' values from the weights arena: what the engine holds for them (the replicas'
  // mean after a synchronous step, or what a load or restore wrote).
  void load_buffers() {
    ::torch::NoGradGuard no_grad;
    detail::copy_each(buffer_views_.buffers, buffer_views_.values);
  }

  // The batch's features as the module's input: {rows, ...row_shape}, a view without a copy.
  // Throws ShapeError when the rows do not fit row_shape or the labels the rows.
  ::torch::Tensor input_of(Batch const& batch) const {
    auto const sizes = check_rows(batch);
    // A view of the caller's features: nothing writes to it, as it needs no gradient. To a device,
    // a copy that the host does not wait for when the batch is in page-locked memory (the
    // Trainer's batches are: Strategy::batch_memory); the pass's loss waits for it.
    auto features =
        ::torch::from_blob(const_cast<float*>(batch.features.data()), sizes, ::torch::kFloat);
    return device_.is_cpu() ? features : features.to(device_, /*non_blocking=*/true);
  }

  // The module input's sizes for `batch`: {rows, ...row_shape}. Throws ShapeError when the rows
  // do not fit row_shape or the labels the rows.
  std::vector<std::int64_t> check_rows(Batch const& batch) const {
    std::vector<std::int64_t> sizes{static_cast<std::int64_t>(batch.rows)};
    if (options_->row_shape.empty()) {
      sizes.push_back(static_cast<std::int64_t>(batch.cols()));
    } else {
      sizes.insert(sizes.end(), options_->row_shape.begin(), options_->row_shape.end());
    }
    std::size_t per_row = 1;
    for (std::size_t d = 1; d < sizes.size(); ++d) per_row *= static_cast<std::size_t>(sizes[d]);
    if (batch.rows == 0 || batch.features.size() != batch.rows * per_row) {
      throw ShapeError("convoy: libtorch::Model takes rows of " + std::to_string(per_row) +
                       " features (row shape " + row_shape_text() + "); the batch has " +
                       std::to_string(batch.features.size()) + " values for " +
                       std::to_string(batch.rows) + " rows");
    }
    if (!batch.labels.empty() && batch.labels.size() != batch.rows) {
      throw ShapeError("convoy: libtorch::Model needs one label per row; the batch has " +
                       std::to_string(batch.labels.size()) + " labels for " +
                       std::to_string(batch.rows) + " rows");
    }
    return sizes;
  }

  // The module's forward pass on the pass's input; the pass keeps the output for a later error.
  ::torch::Tensor forward(Pass& pass) {
    pass.output = module_forward(pass.input);
    return pass.output;
  }

  ::torch::Tensor module_forward(::torch::Tensor const& input) {
    if constexpr (has_tensor_forward<Net>) {
      return net_->forward(input);
    } else {  // the message alone, without the errors of a call that cannot compile
      static_assert(has_tensor_forward<Net>,
                    "convoy: libtorch::Model<Net> needs 'torch::Tensor forward(torch::Tensor)' on "
                    "the module");
      return {};
    }
  }

  std::string row_shape_text() const {
    std::string text = "{";
    for (std::size_t d = 0; d < options_->row_shape.size(); ++d)
      text += (d ? ", " : "") + std::to_string(options_->row_shape[d]);
    return text + "}";
  }

  // ATen sets a thread's intra-op thread count on its first parallel operation; after that, the
  // replica's own count holds for every operation of this thread.
  void use_threads() const {
    static_cast<void>(at::get_num_threads());
    if (omp_get_max_threads() != options_->threads) omp_set_num_threads(options_->threads);
  }

  std::shared_ptr<Factory const> factory_;
  std::shared_ptr<ModelOptions const> options_;
  Net net_;
  Variables vars_;
  std::vector<std::pair<VariableId, ::torch::Tensor>> params_;
  std::vector<std::pair<VariableId, ::torch::Tensor>> buffers_;
  // The buffers, and float views of their values and changes in the arenas, in buffers_' order:
  // lists for the multi-tensor copies of load_buffers() and forward_backward.
  struct BufferViews {
    std::vector<::torch::Tensor> buffers, values, changes;
  } buffer_views_;
  std::shared_ptr<GradientSink> gradients_ = std::make_shared<GradientSink>();
  float const* bound_weights_ = nullptr;
  float const* bound_grads_ = nullptr;
  ::torch::Device device_ = ::torch::kCPU;  // where the module computes and the views point
};

}  // namespace convoy::libtorch
