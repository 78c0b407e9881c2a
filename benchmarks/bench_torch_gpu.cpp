// Training throughput of LibTorch models on one GPU: convoy's libtorch::Model under place::Gpu
// against a plain LibTorch CUDA loop with the same module, batch, optimizer (SGD) and precision
// (float32; LibTorch's defaults, cuDNN's autotuner on), and, when --eager names its figures,
// PyTorch eager in Python on the same GPU (benchmarks/torch_eager.py, run first by
// tools/gpu-check). Two models: the third source text's ResNet (ResNet-18's layout, 224x224x3, 10
// classes; synthetic batches) and examples/09_torch_resnet's Fashion-MNIST ResNet (1x28x28). Every
// loop copies each batch from page-locked host memory to the device and reads each step's loss on
// the host, as a training loop that logs does. Each figure is the best of --repeats runs,
// interleaved; ratios are to the plain loop of the same run.
//
// convoy's row times the steps after the warm-up within one run(); a second row times a run() of
// the same steps from its start: each run() starts its replica threads, and LibTorch keeps its
// cuDNN plans per thread, so a run's first steps plan (and autotune) every convolution again.
// --diagnose adds rows that take convoy's differences one at a time into the plain loop: its
// parameters as views of one device-memory arena (exec::Cuda::adopt's), and the loop on a thread
// and stream of its own.
//
// Run: build/benchmarks/bench_torch_gpu [--repeats N] [--quick] [--diagnose] [--eager PATH]
//                                       [--json PATH]
#include <c10/cuda/CUDAStream.h>

#include <convoy/torch/model.hpp>
// (LibTorch first: its logging defines CHECK macros, which no convoy header uses.)
#include <chrono>
#include <convoy/convoy.hpp>
#include <cstdio>
#include <fstream>
#include <functional>
#include <map>
#include <memory_resource>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "options.hpp"
#include "report.hpp"
#include "resnet18.hpp"

using namespace convoy;

namespace {

constexpr float learning_rate = 0.01f;

struct Workload {
  std::string name, key;
  std::vector<std::int64_t> row_shape;
  std::size_t batch;
  std::int64_t warmup, steps;
};

// `count` batches of random images and labels in page-locked host memory, taken in turn, so that
// no loop reads one buffer over and over.
class PinnedBatches {
 public:
  PinnedBatches(Workload const& w, std::size_t count) : rows_(w.batch), count_(count) {
    per_row_ = 1;
    for (auto d : w.row_shape) per_row_ *= static_cast<std::size_t>(d);
    features_.resize(count * rows_ * per_row_);
    labels_.resize(count * rows_);
    std::mt19937 random(1);
    std::normal_distribution<float> pixel;
    std::uniform_int_distribution<std::int32_t> label(0, 9);
    for (auto& f : features_) f = pixel(random);
    for (auto& l : labels_) l = label(random);
  }
  Batch at(std::int64_t step) const {
    auto const k = static_cast<std::size_t>(step) % count_;
    return Batch{std::span<float const>(features_).subspan(k * rows_ * per_row_, rows_ * per_row_),
                 std::span<std::int32_t const>(labels_).subspan(k * rows_, rows_),
                 {},
                 rows_};
  }

 private:
  std::size_t rows_, count_, per_row_;
  std::pmr::vector<float> features_{exec::cuda::pinned_memory()};
  std::pmr::vector<std::int32_t> labels_{exec::cuda::pinned_memory()};
};

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

void synchronize() { exec::cuda::check(cudaDeviceSynchronize(), "cudaDeviceSynchronize", 0); }

// How the plain loop keeps its parameters and where it runs (--diagnose).
enum class Variant { plain, arena, own_thread, own_stream, own_thread_and_stream };

// The module's parameters as views of one cudaMalloc'd arena holding their values, as a replica's
// on place::Gpu. The arena outlives the module (declared first).
template <class Net>
std::shared_ptr<float> into_arena(Net& net) {
  std::int64_t count = 0;
  for (auto const& p : net->parameters()) count += p.numel();
  void* memory = nullptr;
  exec::cuda::check(cudaMalloc(&memory, static_cast<std::size_t>(count) * sizeof(float)),
                    "cudaMalloc", 0);
  std::shared_ptr<float> arena(static_cast<float*>(memory), [](float* q) { (void)cudaFree(q); });
  torch::NoGradGuard no_grad;
  std::int64_t at = 0;
  for (auto& p : net->parameters()) {
    auto view = at::for_blob(arena.get() + at, p.sizes())
                    .options(torch::TensorOptions().dtype(torch::kFloat).device(p.device()))
                    .target_device(p.device())
                    .make_tensor();
    view.copy_(p);
    p.set_data(view);
    at += p.numel();
  }
  synchronize();
  return arena;
}

// What a user writes without convoy: the module on the GPU, torch::optim::SGD, each batch copied
// to the device without waiting, the loss read each step.
template <class Net>
double plain_loop(std::function<Net()> const& make, Workload const& w, PinnedBatches const& data,
                  Variant variant = Variant::plain) {
  if (variant == Variant::own_thread || variant == Variant::own_thread_and_stream) {
    double rate = 0.0;
    auto const there = variant == Variant::own_thread ? Variant::plain : Variant::own_stream;
    std::thread([&] { rate = plain_loop(make, w, data, there); }).join();
    return rate;
  }
  if (variant == Variant::own_stream) {
    exec::Cuda const gpu(0);
    auto const scope = gpu.enter();
    c10::cuda::CUDAStreamGuard const on(c10::cuda::getStreamFromExternal(gpu.stream(), 0));
    return plain_loop(make, w, data);
  }
  torch::manual_seed(1);
  std::shared_ptr<float> arena;
  auto net = make();
  net->to(torch::kCUDA);
  if (variant == Variant::arena) arena = into_arena(net);
  net->train();
  torch::optim::SGD sgd(net->parameters(), torch::optim::SGDOptions(learning_rate));
  std::vector<std::int64_t> sizes{static_cast<std::int64_t>(w.batch)};
  sizes.insert(sizes.end(), w.row_shape.begin(), w.row_shape.end());
  auto const step = [&](std::int64_t k) {
    auto const b = data.at(k);
    auto const x = torch::from_blob(const_cast<float*>(b.features.data()), sizes)
                       .to(torch::kCUDA, /*non_blocking=*/true);
    sgd.zero_grad();
    auto const loss = libtorch::cross_entropy(net->forward(x), b);
    loss.backward();
    sgd.step();
    return loss.template item<float>();
  };
  for (std::int64_t k = 0; k < w.warmup; ++k) step(k);
  synchronize();
  auto const start = std::chrono::steady_clock::now();
  for (std::int64_t k = 0; k < w.steps; ++k) step(w.warmup + k);
  synchronize();
  return static_cast<double>(w.steps * static_cast<std::int64_t>(w.batch)) / seconds_since(start);
}

// The same module as a convoy model on place::Gpu, one replica, the in-process engine: the steps
// after the warm-up of one run(), or a second run() from its start.
template <class Net>
double with_convoy(std::function<Net()> const& make, Workload const& w, PinnedBatches const& data,
                   bool from_run_start = false) {
  using S = Strategy<libtorch::Model<Net>, place::Gpu, comm::InProcess, sync::Synchronous>;
  torch::manual_seed(1);
  S strategy{libtorch::Model<Net>(make, {.row_shape = w.row_shape}),
             place::Gpu{.device = 0, .strict = true}};
  strategy.set_optimizer(optim::Sgd{.learning_rate = learning_rate});
  RunPlan plan;
  plan.batch = [&](std::size_t, std::int64_t k) { return data.at(k); };
  auto start = std::chrono::steady_clock::now();
  if (from_run_start) {
    plan.until = w.warmup;
    strategy.run(plan);
    synchronize();
    start = std::chrono::steady_clock::now();
  } else {
    plan.after_step = [&](StepReport const& report) {
      if (report.global_step == w.warmup) start = std::chrono::steady_clock::now();
      return true;  // the step's update may still be queued: the end waits for the device
    };
  }
  plan.until = w.warmup + w.steps;
  strategy.run(plan);
  synchronize();
  return static_cast<double>(w.steps * static_cast<std::int64_t>(w.batch)) / seconds_since(start);
}

// "eager <key> <images/s>" lines that benchmarks/torch_eager.py wrote.
std::map<std::string, double> read_eager(std::string const& path) {
  std::map<std::string, double> figures;
  if (path.empty()) return figures;
  std::ifstream in(path);
  std::string word, key;
  double value = 0.0;
  while (in >> word >> key >> value) {
    if (word == "eager") figures[key] = value;
  }
  if (figures.empty()) std::fprintf(stderr, "bench_torch_gpu: no figures in '%s'\n", path.c_str());
  return figures;
}

template <class Net>
bench::Record bench_model(Workload const& w, std::function<Net()> const& make, int repeats,
                          std::map<std::string, double> const& eager, bool diagnose) {
  PinnedBatches const data(w, 4);
  std::vector<std::function<double()>> runs{[&] { return plain_loop(make, w, data); },
                                            [&] { return with_convoy(make, w, data); },
                                            [&] { return with_convoy(make, w, data, true); }};
  std::vector<std::pair<char const*, Variant>> const variants{
      {"plain, arena params", Variant::arena},
      {"plain, own thread", Variant::own_thread},
      {"plain, own stream", Variant::own_stream},
      {"plain, own thread+stream", Variant::own_thread_and_stream}};
  if (diagnose) {
    for (auto const& [label, v] : variants) {
      runs.push_back([&, v] { return plain_loop(make, w, data, v); });
    }
  }
  auto const best = bench::best_of(runs, repeats);
  double const plain = best[0], convoy_rate = best[1], from_start = best[2];
  auto const found = eager.find(w.key);
  double const python = found == eager.end() ? 0.0 : found->second;
  std::printf("%s, batch %zu, %lld steps after %lld, best of %d\n", w.name.c_str(), w.batch,
              static_cast<long long>(w.steps), static_cast<long long>(w.warmup), repeats);
  std::printf("%-26s %12s %10s\n", "config", "images/s", "vs plain");
  std::printf("%-26s %12.0f %10.3f\n", "plain LibTorch loop", plain, 1.0);
  std::printf("%-26s %12.0f %10.3f\n", "convoy place::Gpu", convoy_rate, convoy_rate / plain);
  std::printf("%-26s %12.0f %10.3f\n", "convoy, from run() start", from_start, from_start / plain);
  if (python > 0.0) std::printf("%-26s %12.0f %10.3f\n", "PyTorch eager", python, python / plain);
  for (std::size_t d = 3; d < best.size(); ++d) {
    std::printf("%-26s %12.0f %10.3f\n", variants[d - 3].first, best[d], best[d] / plain);
  }
  std::printf("convoy against the plain loop: %+.1f%%", 100.0 * (convoy_rate / plain - 1.0));
  if (python > 0.0) std::printf("   against PyTorch eager: %.3f", convoy_rate / python);
  std::printf("\n\n");
  bench::Record record;
  record.set("benchmark", "torch_gpu").set("model", w.name).set("key", w.key);
  record.set("batch", w.batch).set("steps", w.steps);
  record.set("plain_loop", plain).set("convoy_gpu", convoy_rate);
  record.set("convoy_vs_plain", convoy_rate / plain);
  record.set("convoy_from_run_start", from_start)
      .set("from_run_start_vs_plain", from_start / plain);
  for (std::size_t d = 3; d < best.size(); ++d) {
    record.add("diagnosis", bench::Record{}
                                .set("config", variants[d - 3].first)
                                .set("images_per_second", best[d])
                                .set("vs_plain", best[d] / plain));
  }
  if (python > 0.0)
    record.set("pytorch_eager", python).set("convoy_vs_eager", convoy_rate / python);
  return record;
}

}  // namespace

int main(int argc, char** argv) {
  int repeats = 3;
  bool quick = false, diagnose = false;
  std::string eager_path;
  bench::CommandLine cli("bench_torch_gpu",
                         "Training images/s of LibTorch models on one GPU through convoy, against "
                         "a plain LibTorch loop and PyTorch eager.");
  cli.integer("--repeats", "N", repeats, 1, "runs of each configuration, best kept (default 3)");
  cli.flag("--quick", quick, "a smoke run: few steps, 1 repeat");
  cli.flag("--diagnose", diagnose, "also the plain loop with each of convoy's differences");
  cli.option("--eager", "PATH", "PyTorch eager's figures, as benchmarks/torch_eager.py wrote them",
             [&eager_path](std::string_view v) {
               eager_path = std::string(v);
               return v.empty() ? std::string("a file name") : std::string();
             });
  if (auto const status = cli.parse(argc, argv)) return *status;
  bench::Results results(cli);
  if (!results.ok()) return 2;
  if (exec::cuda::device_count() == 0 || !torch::cuda::is_available()) {
    std::puts("bench_torch_gpu: no CUDA device; nothing to measure");
    return 77;
  }
  std::printf("bench_torch_gpu: %s, LibTorch %s\n",
              exec::cuda::describe(exec::cuda::device_info(0)).c_str(), TORCH_VERSION);
  at::globalContext().setBenchmarkCuDNN(true);
  if (quick) repeats = 1;
  auto const eager = read_eager(eager_path);
  Workload const resnet18{"ResNet-18 224x224x3", "resnet18",    {3, 224, 224}, 64,
                          quick ? 2 : 10,        quick ? 3 : 40};
  Workload const small{"Fashion-MNIST ResNet", "fmnist_resnet", {1, 28, 28}, 64,
                       quick ? 2 : 20,         quick ? 5 : 300};
  results.add(bench_model(resnet18, std::function<zoo::ResNet18()>([] { return zoo::ResNet18(); }),
                          repeats, eager, diagnose));
  results.add(bench_model(small,
                          std::function<examples::ResNet()>([] { return examples::ResNet(); }),
                          repeats, eager, diagnose));
  return results.write() ? 0 : 1;
}
