// place::Gpu in a build with convoy::cuda, on whatever machine runs it: with no device (CI) the
// placement falls back to the host with one line saying the runtime sees none, or throws under
// strict placement; with one, the line names it (index, name, memory). Also: exec::Cuda on a device
// that does not exist throws DeviceError naming the call and the device.
#include <doctest/doctest.h>

#include <convoy/exec/cuda.hpp>
#include <convoy/nn/mlp.hpp>
#include <convoy/strategy.hpp>
#include <cstdlib>
#include <sstream>
#include <string>

using namespace convoy;

namespace {

struct ClogCapture {
  std::ostringstream text;
  std::streambuf* old = std::clog.rdbuf(text.rdbuf());
  ~ClogCapture() { std::clog.rdbuf(old); }
};

using GpuStrategy = Strategy<nn::Mlp, place::Gpu, comm::InProcess, sync::Synchronous>;

}  // namespace

TEST_CASE("place::Gpu says in one line why it runs on the host, naming the device it found") {
  int const count = exec::cuda::device_count();
  ClogCapture capture;
  GpuStrategy const soft(nn::Mlp({4, 2}), place::Gpu{.device = 0});
  std::string const text = capture.text.str();
  if (count == 0) {
    CHECK(text ==
          "convoy: place::Gpu{device 0} cannot be honoured: the CUDA runtime sees no device; "
          "running on the host (/cpu:0) instead\n");
  } else {
    std::string const found = exec::cuda::describe(exec::cuda::device_info(0));
    CHECK(text == "convoy: place::Gpu{device 0} cannot be honoured: " + found +
                      " is there, but the strategies' engines do not compute on devices yet; "
                      "running on the host (/cpu:0) instead\n");
  }
}

TEST_CASE("place::Gpu names the devices there are when asked for one past them") {
  int const count = exec::cuda::device_count();
  ClogCapture capture;
  GpuStrategy const soft(nn::Mlp({4, 2}), place::Gpu{.device = count});
  std::string const seen = count == 0 ? "no device"
                                      : std::to_string(count) + " device" + (count == 1 ? "" : "s") +
                                            " (/gpu:0-" + std::to_string(count - 1) + ")";
  CHECK(capture.text.str() == "convoy: place::Gpu{device " + std::to_string(count) +
                                  "} cannot be honoured: the CUDA runtime sees " + seen +
                                  "; running on the host (/cpu:0) instead\n");
}

TEST_CASE("place::Gpu under strict placement throws PlacementError and prints nothing") {
  ClogCapture capture;
  CHECK_THROWS_WITH_AS(GpuStrategy(nn::Mlp({4, 2}), place::Gpu{.device = 0, .strict = true}),
                       doctest::Contains("cannot be honoured"), PlacementError);
  CHECK(capture.text.str().empty());
}

TEST_CASE("place::Gpu's default device is the local rank the cluster resolver reads") {
  ::setenv("LOCAL_RANK", "3", 1);
  ::setenv("RANK", "3", 1);
  ::setenv("WORLD_SIZE", "4", 1);
  ::setenv("MASTER_ADDR", "127.0.0.1", 1);
  ::setenv("MASTER_PORT", "29500", 1);
  int const ordinal = place::Gpu{}.ordinal();
  for (char const* name : {"LOCAL_RANK", "RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"}) ::unsetenv(name);
  CHECK(ordinal == 3);
  CHECK(place::Gpu{}.ordinal() == 0);
  CHECK(place::Gpu{.device = 2}.ordinal() == 2);
}

TEST_CASE("exec::Cuda on a device that is not there throws DeviceError naming the call") {
  int const count = exec::cuda::device_count();
  std::string const expected = "failed on /gpu:" + std::to_string(count);
  CHECK_THROWS_WITH_AS(exec::Cuda{count}, doctest::Contains(expected.c_str()), DeviceError);
}
