// Smallest use of convoy from another project: one variable, its element count printed.
// ../run_consumer.cmake checks the output line.
#include <convoy/core/variables.hpp>
#include <convoy/version.hpp>
#include <cstdio>

int main() {
  convoy::Variables variables{"consumer"};
  variables.add("kernel", convoy::Shape{2, 3});
  std::printf("convoy %s consumer: %zu variable, %zu elements\n", convoy::version, variables.size(),
              variables.element_count());
  return variables.element_count() == 6 ? 0 : 1;
}
