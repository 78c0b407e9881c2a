// The doctest main of every unit test program and of tests/cluster's, with two guards. A command
// line "--task <suite>/<scenario> <dir>" is not a test run: it runs a task of the file that
// registered that suite (testing::TaskSuite), which its tests start once per task.
//
// A test case whose code ends the process through std::exit (a parameter-server task's run()
// does, by default, once its shard is done) would leave with the status it was given, 0 most
// often, and every case after it unrun: the program would pass having checked less. Such an exit
// fails the program instead, saying so. Forked children leave through _exit, which this guard does
// not see.
//
// Each ctest runs a concern's program on one file's cases (--source-file, tests/CMakeLists.txt):
// a run in which no case passed the filters fails, so that a renamed or moved file is not a test
// that passes having run nothing.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdio>
#include <cstdlib>

#include "processes.hpp"

namespace {

bool cases_running = false;
bool run_ended = false;
unsigned cases_selected = 0;

// A listener (no output of its own) that keeps how many cases passed the filters.
struct CaseCount : doctest::IReporter {
  explicit CaseCount(doctest::ContextOptions const&) {}
  void report_query(doctest::QueryData const&) override {}
  void test_run_start() override {}
  void test_run_end(doctest::TestRunStats const& stats) override {
    run_ended = true;
    cases_selected = stats.numTestCasesPassingFilters;
  }
  void test_case_start(doctest::TestCaseData const&) override {}
  void test_case_reenter(doctest::TestCaseData const&) override {}
  void test_case_end(doctest::CurrentTestCaseStats const&) override {}
  void test_case_exception(doctest::TestCaseException const&) override {}
  void subcase_start(doctest::SubcaseSignature const&) override {}
  void subcase_end() override {}
  void log_assert(doctest::AssertData const&) override {}
  void log_message(doctest::MessageData const&) override {}
  void test_case_skipped(doctest::TestCaseData const&) override {}
};

}  // namespace

REGISTER_LISTENER("convoy_case_count", 1, CaseCount);

int main(int argc, char** argv) {
  // A task of a program whose tests start it once per task (tests/cluster): not a test run.
  if (auto const status = convoy::testing::TaskSuite::run_if_asked(argc, argv)) return *status;
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
  if (status == 0 && run_ended && cases_selected == 0) {
    std::fputs("convoy tests: no test case passed the filters given; nothing was checked\n",
               stderr);
    return EXIT_FAILURE;
  }
  return status;
}
