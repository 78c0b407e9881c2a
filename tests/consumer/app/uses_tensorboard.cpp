// Links convoy::tensorboard (installed package or FetchContent) and writes an event file in the
// folder given: a scalar and a histogram. Run by ../run_consumer.cmake, which checks the file is
// there (tests/tensorboard reads such files back with TensorBoard itself).
#include <convoy/tensorboard/event_writer.hpp>
#include <convoy/train/callbacks/tensorboard.hpp>
#include <cstdio>
#include <vector>

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: convoy_uses_tensorboard <existing folder>\n");
    return 2;
  }
  convoy::tensorboard::EventWriter writer{argv[1]};
  writer.add_scalar("loss", 0.5, 1);
  std::vector<float> const values{0.1f, 0.2f, 0.3f};
  writer.add_histogram("weights", values, 1);
  writer.flush();
  std::printf("convoy consumer: 2 events in %s\n", writer.path().string().c_str());
  return 0;
}
