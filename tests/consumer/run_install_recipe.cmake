# Runs the install recipe of docs/packaging.md ("Install, then find_package") as a user would: the
# shell block under its '<!-- tested: tests/consumer/run_install_recipe.cmake -->' line, with its
# commands unchanged but for the prefix, in a fresh WORK_DIR where 'convoy' is this checkout; then
# checks what the install must hold. The build under test only lends the compiler and generator,
# through CMake's environment variables (CXX, CMAKE_GENERATOR), so the command lines stay the doc's.
#   cmake -DMODE=install_recipe -DCONVOY_SOURCE_DIR=... -DWORK_DIR=... [-DCXX_COMPILER=...]
#         [-DGENERATOR=...] [-DPREFIX_PATH=a|b] -P run_install_recipe.cmake
cmake_minimum_required(VERSION 3.25)

foreach(required MODE CONVOY_SOURCE_DIR WORK_DIR)
  if(NOT DEFINED ${required})
    message(FATAL_ERROR "run_install_recipe.cmake: pass -D${required}=...")
  endif()
endforeach()
# PREFIX_PATH, run_step, doc_block, expect_installed
include("${CMAKE_CURRENT_LIST_DIR}/consumer_steps.cmake")

doc_block("${CONVOY_SOURCE_DIR}/docs/packaging.md"
  "<!-- tested: tests/consumer/run_install_recipe.cmake -->" sh recipe)
set(placeholder "/opt/convoy")
string(FIND "${recipe}" "${placeholder}" at)
if(at EQUAL -1)
  message(FATAL_ERROR "[${MODE}] the install recipe in docs/packaging.md no longer installs to "
                      "${placeholder}, which this test replaces with its own prefix:\n${recipe}")
endif()
set(prefix "${WORK_DIR}/prefix")
string(REPLACE "${placeholder}" "${prefix}" recipe "${recipe}")

file(REMOVE_RECURSE "${WORK_DIR}")
file(MAKE_DIRECTORY "${WORK_DIR}")
# The recipe names the checkout 'convoy', relative to where it runs.
file(CREATE_LINK "${CONVOY_SOURCE_DIR}" "${WORK_DIR}/convoy" SYMBOLIC)
if(CXX_COMPILER)
  set(ENV{CXX} "${CXX_COMPILER}")
endif()
if(GENERATOR)
  set(ENV{CMAKE_GENERATOR} "${GENERATOR}")
endif()
# 'cmake --build' without -j: the environment gives it this machine's cores (the test runs alone).
cmake_host_system_information(RESULT cores QUERY NUMBER_OF_LOGICAL_CORES)
set(ENV{CMAKE_BUILD_PARALLEL_LEVEL} "${cores}")

find_program(shell sh REQUIRED)
run_step("the recipe, in ${WORK_DIR}"
  COMMAND "${shell}" -e -x -c "cd '${WORK_DIR}'\n${recipe}")

expect_installed("${prefix}" "${step_output}")  # what "Install, then find_package" says it holds
message(STATUS "[${MODE}] ok")
