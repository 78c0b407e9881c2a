// The doctest main of every unit test program, with one guard: a test case whose code ends the
// process through std::exit (a parameter-server task's run() does, by default, once its shard is
// done) would leave with the status it was given, 0 most often, and every case after it unrun: the
// program would pass having checked less. Such an exit fails the program instead, saying so.
// Forked children leave through _exit, which this guard does not see.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdio>
#include <cstdlib>

namespace {
bool cases_running = false;
}  // namespace

int main(int argc, char** argv) {
  doctest::Context context(argc, argv);
  std::atexit([] {
    if (!cases_running) return;
    std::fputs(
        "convoy tests: the program exited inside a test case (std::exit); the cases after it "
        "never ran\n",
        stderr);
    std::_Exit(EXIT_FAILURE);
  });
  cases_running = true;
  int const status = context.run();
  cases_running = false;
  return status;
}
