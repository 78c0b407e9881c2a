// The NCCL communicator on a device, with one rank (NCCL refuses two ranks on one GPU): an
// allreduce, the bucketed exchange over it, the grouped start-up and allreduce of for_devices, and
// a start-up whose second rank never joins, which must end in an abort and an error within the
// timeout, not a hang. Without a CUDA device the program says so and exits 77 (ctest: skipped).
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <chrono>
#include <convoy/comm/buckets/bucket_plan.hpp>
#include <convoy/comm/buckets/bucket_reducer.hpp>
#include <convoy/comm/nccl/bucket_allreduce.hpp>
#include <convoy/comm/nccl/communicator.hpp>
#include <convoy/comm/nccl/unique_id_bootstrap.hpp>
#include <cstdio>
#include <vector>

using namespace convoy;
using namespace convoy::comm::nccl;
using namespace std::chrono_literals;

namespace {

// Device memory for `n` floats, freed at the end of the scope.
struct DeviceFloats {
  float* data = nullptr;
  std::size_t size = 0;
  explicit DeviceFloats(std::size_t n) : size(n) {
    check(cudaMalloc(&data, n * sizeof(float)), "cudaMalloc", Caller{0, 0});
  }
  ~DeviceFloats() { (void)cudaFree(data); }
  DeviceFloats(DeviceFloats const&) = delete;
  DeviceFloats& operator=(DeviceFloats const&) = delete;
  std::span<float> span() { return {data, size}; }
  void put(std::vector<float> const& host) {
    check(cudaMemcpy(data, host.data(), size * sizeof(float), cudaMemcpyHostToDevice), "cudaMemcpy",
          Caller{0, 0});
  }
  std::vector<float> get() const {
    std::vector<float> host(size);
    check(cudaMemcpy(host.data(), data, size * sizeof(float), cudaMemcpyDeviceToHost), "cudaMemcpy",
          Caller{0, 0});
    return host;
  }
};

std::vector<float> pattern(std::size_t n) {
  std::vector<float> out(n);
  for (std::size_t i = 0; i < n; ++i) out[i] = static_cast<float>(i % 1000) * 0.5f - 7.0f;
  return out;
}

// The id as a run of one would get it: through the bootstrap, which for a single process only
// calls make_unique_id.
std::vector<std::byte> run_id() {
  return share_unique_id(Cluster::local(), sizeof(ncclUniqueId), make_unique_id);
}

}  // namespace

TEST_CASE("one rank on the device: an in-place allreduce") {
  Communicator comm(run_id(), 0, 1, 0, {.timeout = 60s});
  CHECK(comm.world_size() == 1);
  cudaStream_t stream = nullptr;
  REQUIRE(cudaStreamCreate(&stream) == cudaSuccess);
  DeviceFloats buffer(1 << 20);
  auto const values = pattern(buffer.size);
  buffer.put(values);
  comm.allreduce_sum(buffer.span(), stream);
  comm.wait(stream, "the test's allreduce");
  CHECK(buffer.get() == values);  // the sum over one rank
  (void)cudaStreamDestroy(stream);
}

TEST_CASE("the bucketed exchange over NCCL sums every bucket once") {
  Variables layout("m");
  layout.add("a", {300});
  layout.add("b", {40, 50});
  layout.add("c", {7});
  layout.add("d", {1000});
  comm::BucketPlan const plan(layout, 4096);
  REQUIRE(plan.size() >= 2);
  Communicator comm(run_id(), 0, 1, 0, {.timeout = 60s});
  cudaStream_t compute = nullptr;
  REQUIRE(cudaStreamCreate(&compute) == cudaSuccess);
  DeviceFloats grads(layout.element_count());
  auto const values = pattern(grads.size);
  BucketAllreduce exchange(comm, compute);
  comm::BucketReducer reducer(plan, grads.span(), exchange);
  for (int step = 0; step < 3; ++step) {
    reducer.begin_step();
    check(cudaMemcpyAsync(grads.data, values.data(), grads.size * sizeof(float),
                          cudaMemcpyHostToDevice, compute),
          "cudaMemcpyAsync", Caller{0, 0});
    // Buckets of at least 4096 bytes from the last variable back: bucket 0 is {b, c, d} (d and c
    // alone hold 4028 bytes), bucket 1 is {a}. Reporting b..d starts bucket 0 alone.
    REQUIRE(plan[0].first_variable == 1);
    reducer.ready(VariableId{1}, VariableId{3});
    CHECK(reducer.started() == 1);
    reducer.finish();
    CHECK(reducer.started() == plan.size());
    CHECK(grads.get() == values);
  }
  (void)cudaStreamDestroy(compute);
}

TEST_CASE("for_devices starts its communicators in one group and reduces in one group") {
  int const devices[] = {0};
  auto comms = Communicator::for_devices(run_id(), 0, 1, devices, {.timeout = 60s});
  REQUIRE(comms.size() == 1);
  cudaStream_t stream = nullptr;
  REQUIRE(cudaStreamCreate(&stream) == cudaSuccess);
  DeviceFloats buffer(4096);
  auto const values = pattern(buffer.size);
  buffer.put(values);
  std::span<float> const data[] = {buffer.span()};
  cudaStream_t const streams[] = {stream};
  Communicator::allreduce_sum(comms, data, streams);
  comms[0].wait(stream, "the grouped allreduce");
  CHECK(buffer.get() == values);
  (void)cudaStreamDestroy(stream);
}

TEST_CASE("a start-up whose other rank never joins is aborted at the timeout") {
  auto const start = std::chrono::steady_clock::now();
  CHECK_THROWS_WITH_AS(Communicator(run_id(), 0, 2, 0, {.timeout = 3s}),
                       doctest::Contains("rank 0 (device 0) of 2"), TimeoutError);
  CHECK(std::chrono::steady_clock::now() - start < 60s);
}

TEST_CASE("an id of the wrong size and a rank outside the world are refused") {
  std::vector<std::byte> const short_id(16);
  CHECK_THROWS_WITH_AS(Communicator(short_id, 0, 1, 0), doctest::Contains("not 16"), Error);
  CHECK_THROWS_WITH_AS(Communicator(run_id(), 3, 2, 0), doctest::Contains("outside [0, 2)"), Error);
}

int main(int argc, char** argv) {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::puts("test_nccl_communicator: no CUDA device here; skipped");
    return 77;
  }
  doctest::Context context(argc, argv);
  return context.run();
}
