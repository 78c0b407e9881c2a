// Placement policies: replica counts, the opt-in placement log, and the GPU placement's fallback to
// the host in a build without CUDA (an error under strict placement).
#include <doctest/doctest.h>
#include <sched.h>
#include <sys/wait.h>
#include <unistd.h>

#include <convoy/nn/mlp.hpp>
#include <convoy/strategy.hpp>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <synthetic.hpp>
#include <temp_dir.hpp>
#include <thread>

#include "clog_capture.hpp"

namespace test_place_placement {

using namespace convoy;

TEST_CASE("replica counts: Host one, Mirrored and CentralStorage one per usable CPU unless told") {
  CHECK(place::Host{}.replica_count() == 1);
  CHECK(place::Mirrored{.replicas = 3}.replica_count() == 3);
  // Restricted to one CPU, the process gets one replica by default, whatever the machine has. In a
  // child, so the test's own affinity is left alone.
  pid_t const child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(0, &one);
    bool const ok = sched_setaffinity(0, sizeof one, &one) == 0 &&
                    place::Mirrored{}.replica_count() == 1 &&
                    place::CentralStorage{}.replica_count() == 1;
    std::_Exit(ok ? 0 : 1);
  }
  int status = 0;
  REQUIRE(waitpid(child, &status, 0) == child);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
}

TEST_CASE("a cgroup CPU quota caps the default replica count") {
  testing::TempDir root("cgroup");
  auto write = [](std::filesystem::path const& file, std::string const& text) {
    std::filesystem::create_directories(file.parent_path());
    std::ofstream(file) << text;
  };
  CHECK(place::detail::cgroup_cpu_limit(root.path.string()) == 0);  // no files: no quota
  write(root.path / "cpu" / "cpu.cfs_quota_us", "250000\n");        // cgroup v1: 2.5 CPUs
  write(root.path / "cpu" / "cpu.cfs_period_us", "100000\n");
  CHECK(place::detail::cgroup_cpu_limit(root.path.string()) == 3);
  write(root.path / "cpu.max", "max 100000\n");  // cgroup v2 wins, and says: no quota
  CHECK(place::detail::cgroup_cpu_limit(root.path.string()) == 0);
  write(root.path / "cpu.max", "150000 100000\n");
  CHECK(place::detail::cgroup_cpu_limit(root.path.string()) == 2);
}

TEST_CASE("the placement log names every variable, where it lives, and who computes") {
  testing::ClogCapture capture;
  Strategy<nn::Mlp, place::Mirrored, comm::InProcess, sync::Synchronous> mirrored(
      nn::Mlp({4, 3, 2}), place::Mirrored{.replicas = 2, .log_placement = true});
  std::string const text = capture.text.str();
  CHECK(text.find("Strategy<Mirrored, InProcess, Synchronous>, 2 replica(s)") != std::string::npos);
  CHECK(text.find("mlp/layer1/kernel {4, 3} -> mirrored on /cpu:0 replicas 0-1") !=
        std::string::npos);
  CHECK(text.find("mlp/layer2/bias {2} -> mirrored") != std::string::npos);
  CHECK(text.find("replica 1 computes forward_backward on /cpu:0 thread 1") != std::string::npos);
  // And the host's GEMM kernels, with who chose them.
  CHECK(text.find("convoy placement: host math: " + math::host_blas_kernels().describe() + "\n") !=
        std::string::npos);
}

TEST_CASE("central storage logs one central copy; the log is off by default") {
  testing::ClogCapture capture;
  Strategy<nn::Mlp, place::CentralStorage, comm::InProcess, sync::Synchronous> quiet(
      nn::Mlp({4, 2}), place::CentralStorage{.replicas = 2});
  CHECK(capture.text.str().empty());
  Strategy<nn::Mlp, place::CentralStorage, comm::InProcess, sync::Synchronous> central(
      nn::Mlp({4, 2}), place::CentralStorage{.replicas = 2, .log_placement = true});
  CHECK(capture.text.str().find(
            "mlp/layer1/kernel {4, 2} -> /cpu:0 (one central copy; replicas read it)") !=
        std::string::npos);
  // Replicas of a central-storage strategy share one arena.
  auto& group = central.engine().state();
  CHECK(group.replica(0).variables().weights().data() ==
        group.replica(1).variables().weights().data());
  CHECK(group.central().data() == group.replica(1).variables().weights().data());
}

TEST_CASE("a GPU placement falls back to the host with one log line, or fails when strict") {
  {
    testing::ClogCapture capture;
    Strategy<nn::Mlp, place::Gpu, comm::InProcess, sync::Synchronous> soft(nn::Mlp({4, 2}),
                                                                           place::Gpu{.device = 1});
    std::string const text = capture.text.str();
    CHECK(text ==
          "convoy: place::Gpu{device 1} cannot be honoured: this build has no CUDA backend; "
          "running on the "
          "host (/cpu:0) instead\n");
    CHECK(soft.replicas() == 1);
  }
  using Strict = Strategy<nn::Mlp, place::Gpu, comm::InProcess, sync::Synchronous>;
  CHECK_THROWS_WITH_AS(Strict(nn::Mlp({4, 2}), place::Gpu{.device = 0, .strict = true}),
                       doctest::Contains("strict placement"), PlacementError);
}

TEST_CASE("place::MirroredGpus in a build without CUDA: one host replica and one line, or strict") {
  {
    testing::ClogCapture capture;
    place::MirroredGpus soft{.devices = {0, 1}};
    soft.resolve();
    CHECK(capture.text.str() ==
          "convoy: place::MirroredGpus cannot be honoured: this build has no CUDA backend; one "
          "replica runs on the host (/cpu:0) instead\n");
    CHECK(soft.replica_count() == 1);
  }
  place::MirroredGpus const strict{.strict = true};
  CHECK_THROWS_WITH_AS(strict.resolve(),
                       doctest::Contains("(strict placement); use place::Mirrored"),
                       PlacementError);
}

TEST_CASE(
    "place::CentralStorageGpus in a build without CUDA trains one host replica like "
    "CentralStorage") {
  auto const data = testing::synthetic_classes(400, 6, 3);
  nn::Mlp const model({6, 8, 3});
  RunPlan plan{.until = 10,
               .batch =
                   [&](std::size_t, std::int64_t step) {
                     return data.slice(static_cast<std::size_t>(step) * 40, 40);
                   },
               .after_step = {}};
  std::string line;
  std::vector<float> on_gpus;
  {
    testing::ClogCapture capture;
    Strategy<nn::Mlp, place::CentralStorageGpus, comm::InProcess, sync::Synchronous> soft(model);
    line = capture.text.str();
    CHECK(soft.replicas() == 1);
    soft.run(plan);
    on_gpus = soft.weights();
  }
  CHECK(line ==
        "convoy: place::CentralStorageGpus cannot be honoured: this build has no CUDA backend; one "
        "replica runs on the host (/cpu:0) instead\n");
  Strategy<nn::Mlp, place::CentralStorage, comm::InProcess, sync::Synchronous> host(
      model, place::CentralStorage{.replicas = 1});
  host.run(plan);
  CHECK(on_gpus == host.weights());
  place::CentralStorageGpus const strict{.strict = true};
  CHECK_THROWS_WITH_AS(strict.resolve(),
                       doctest::Contains("(strict placement); use place::CentralStorage"),
                       PlacementError);
}

}  // namespace test_place_placement
