# Configure-only checks of how convoy behaves inside a user's project; nothing is compiled.
#   cmake -DMODE=<mode> -DCONVOY_SOURCE_DIR=... -DCONVOY_BINARY_DIR=... -DWORK_DIR=...
#         [-DBUILD_TYPE=Release] [-DCXX_COMPILER=...] [-DGENERATOR=...] [-DPREFIX_PATH=a|b]
#         [-DCOMPONENTS=gloo,torch,zmq] -P run_configure_checks.cmake
# missing_toplevel      convoy configured alone with each dependency hidden
#                       (CMAKE_DISABLE_FIND_PACKAGE_<name>): fails, naming it and its Debian package.
# missing_fetchcontent  the same through FetchContent (tests/consumer/app).
# missing_find_package  the same through find_package(convoy) of a fresh install.
# snippet               docs/packaging.md's FetchContent snippet, verbatim but for its SOURCE_DIR,
#                       configures; convoy adds its targets and nothing else (tests/consumer/hygiene.cmake),
#                       and builds every component of COMPONENTS (those the build has) but cuda.
# usage                 what convoy::convoy puts on a consumer's compile lines (tests/consumer/usage).
# two_libtorch          an official LibTorch (environment: CONVOY_OFFICIAL_TORCH, its prefix) beside
#                       Debian's (CONVOY_DEBIAN_TORCH_DIR): Debian's config with the other's prefix
#                       in CMAKE_PREFIX_PATH stops naming both; a folder configured with Debian's,
#                       then given the official one's Torch_DIR, takes it whole (headers,
#                       libraries and Caffe2 config), not beside the first search's results.
cmake_minimum_required(VERSION 3.25)

foreach(required MODE CONVOY_SOURCE_DIR CONVOY_BINARY_DIR WORK_DIR)
  if(NOT DEFINED ${required})
    message(FATAL_ERROR "run_configure_checks.cmake: pass -D${required}=...")
  endif()
endforeach()
include("${CMAKE_CURRENT_LIST_DIR}/consumer_steps.cmake")  # PREFIX_PATH, run_step

# expect_in_output(<text>...): each text must appear in the last step's output.
function(expect_in_output)
  foreach(text IN LISTS ARGN)
    string(FIND "${step_output}" "${text}" at)
    if(at EQUAL -1)
      message(FATAL_ERROR "[${MODE}] expected '${text}' in the output:\n${step_output}")
    endif()
  endforeach()
endfunction()

set(configure_args -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF)
if(GENERATOR)
  list(APPEND configure_args -G "${GENERATOR}")
endif()
if(BUILD_TYPE)
  list(APPEND configure_args "-DCMAKE_BUILD_TYPE=${BUILD_TYPE}")
  set(config_args --config "${BUILD_TYPE}")
endif()
if(CXX_COMPILER)
  list(APPEND configure_args "-DCMAKE_CXX_COMPILER=${CXX_COMPILER}")
endif()

# hidden_dependency_checks(<source dir> <args>...): configures the project in <source dir> once per
# dependency, with that one hidden; each must fail and name it with the package that provides it.
# One build folder for all of them, so the compiler is detected once. The caller's extra_expected
# lists more text each output must hold.
function(hidden_dependency_checks source_dir)
  set(cases
    "cereal|libcereal-dev"
    "ZLIB|zlib1g-dev"
    "BLAS|libopenblas-dev"
    "OpenMP|libomp-14-dev"
    "cppzmq|cppzmq-dev")
  if(MODE STREQUAL "missing_toplevel")
    list(APPEND cases "doctest|doctest-dev")  # only convoy's own tests need it
  endif()
  set(hidden_before "")
  foreach(case IN LISTS cases)
    string(REPLACE "|" ";" case "${case}")
    list(GET case 0 package)
    list(GET case 1 provider)
    set(reset "")
    if(hidden_before)
      set(reset "-DCMAKE_DISABLE_FIND_PACKAGE_${hidden_before}=OFF")
    endif()
    run_step("${package} hidden" EXPECT_FAILURE
      COMMAND "${CMAKE_COMMAND}" -S "${source_dir}" -B "${WORK_DIR}/build" ${configure_args} ${ARGN}
              ${reset} "-DCMAKE_DISABLE_FIND_PACKAGE_${package}=ON")
    expect_in_output("convoy needs ${package}, which was not found" "${provider}" ${extra_expected})
    set(hidden_before "${package}")
  endforeach()
endfunction()

file(REMOVE_RECURSE "${WORK_DIR}")
set(app_dir "${CMAKE_CURRENT_LIST_DIR}/app")
if(MODE STREQUAL "missing_toplevel")
  hidden_dependency_checks("${CONVOY_SOURCE_DIR}"
    -DCONVOY_BUILD_TESTS=ON -DCONVOY_BUILD_EXAMPLES=OFF -DCONVOY_BUILD_BENCHMARKS=OFF)
elseif(MODE STREQUAL "missing_fetchcontent")
  hidden_dependency_checks("${app_dir}"
    -DCONVOY_CONSUME=fetchcontent "-DCONVOY_SOURCE_DIR=${CONVOY_SOURCE_DIR}")
elseif(MODE STREQUAL "missing_find_package")
  set(prefix "${WORK_DIR}/prefix")
  run_step("install convoy into ${prefix}"
    COMMAND "${CMAKE_COMMAND}" --install "${CONVOY_BINARY_DIR}" --prefix "${prefix}" ${config_args})
  # find_package(convoy REQUIRED) reports the reason as the package's own.
  set(extra_expected "${prefix}/share/cmake/convoy/convoy-config.cmake" "set convoy_FOUND to FALSE")
  hidden_dependency_checks("${app_dir}" -DCONVOY_CONSUME=find_package "-DCMAKE_PREFIX_PATH=${prefix}")
elseif(MODE STREQUAL "snippet")
  # The fenced block right under the marker line is the snippet; its placeholder path becomes this
  # checkout. The project around it records the variables before and after (hygiene.cmake).
  doc_block("${CONVOY_SOURCE_DIR}/docs/packaging.md"
    "<!-- tested: tests/consumer/run_configure_checks.cmake MODE=snippet -->" cmake snippet)
  set(placeholder "/path/to/convoy")
  string(FIND "${snippet}" "${placeholder}" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "[snippet] the snippet in docs/packaging.md no longer says ${placeholder}:\n${snippet}")
  endif()
  string(REPLACE "${placeholder}" "${CONVOY_SOURCE_DIR}" snippet "${snippet}")
  set(project_dir "${WORK_DIR}/project")
  file(WRITE "${project_dir}/main.cpp" "int main() { return 0; }\n")
  file(WRITE "${project_dir}/CMakeLists.txt"
    "cmake_minimum_required(VERSION 3.25)\n"
    "project(convoy_snippet LANGUAGES CXX)\n"
    "enable_testing()  # so convoy's folder would list any test it added\n"
    "get_cmake_property(convoy_hygiene_before VARIABLES)\n"
    "# ---- docs/packaging.md ----\n"
    "${snippet}\n"
    "# ---- end of the snippet ----\n"
    "include(\"${CMAKE_CURRENT_LIST_DIR}/hygiene.cmake\")\n")
  run_step("configure the snippet"
    COMMAND "${CMAKE_COMMAND}" -S "${project_dir}" -B "${WORK_DIR}/build" ${configure_args})
  expect_in_output("convoy hygiene: ok")
  # The parts are AUTO in a subproject, as at the top level: each component the build under test
  # has is built here too with no option set, but convoy::cuda, which stays opt-in.
  string(REPLACE "," ";" components "${COMPONENTS}")
  list(REMOVE_ITEM components cuda zmq)
  foreach(component IN LISTS components)
    expect_in_output("convoy: convoy::${component} is built")
  endforeach()
  string(CONCAT cuda_off "convoy: convoy::cuda is not built: CONVOY_ENABLE_CUDA is OFF, its default "
                         "where convoy is a subproject")
  expect_in_output("${cuda_off}")
  # What only the generated files show: no install rules, no tests from convoy's folder.
  set(convoy_build "${WORK_DIR}/build/_deps/convoy-build")
  file(READ "${convoy_build}/cmake_install.cmake" install_script)
  if(install_script MATCHES "file\\(INSTALL")
    message(FATAL_ERROR "[snippet] convoy added install rules to the consumer (${convoy_build}/cmake_install.cmake)")
  endif()
  if(EXISTS "${convoy_build}/CTestTestfile.cmake")
    file(READ "${convoy_build}/CTestTestfile.cmake" ctest_script)
    if(ctest_script MATCHES "add_test|subdirs")
      message(FATAL_ERROR "[snippet] convoy added tests to the consumer (${convoy_build}/CTestTestfile.cmake)")
    endif()
  endif()
elseif(MODE STREQUAL "usage")
  run_step("configure tests/consumer/usage"
    COMMAND "${CMAKE_COMMAND}" -S "${CMAKE_CURRENT_LIST_DIR}/usage" -B "${WORK_DIR}/build"
            ${configure_args} "-DCONVOY_SOURCE_DIR=${CONVOY_SOURCE_DIR}" -DCMAKE_EXPORT_COMPILE_COMMANDS=ON)
  file(READ "${WORK_DIR}/build/compile_commands.json" commands)
  # command_for(<file name> <out>): the compile line of the source file named so.
  function(command_for name out)
    string(JSON count LENGTH "${commands}")
    math(EXPR last "${count} - 1")
    foreach(i RANGE ${last})
      string(JSON file GET "${commands}" ${i} file)
      if(file MATCHES "/${name}$")
        string(JSON command GET "${commands}" ${i} command)
        set(${out} "${command}" PARENT_SCOPE)
        return()
      endif()
    endforeach()
    message(FATAL_ERROR "[usage] no compile command for ${name} in ${WORK_DIR}/build/compile_commands.json")
  endfunction()
  # defines_of(<command> <out>): its -D definitions, sorted, but NDEBUG (from the build type).
  function(defines_of command out)
    string(REGEX MATCHALL "(^| )-D[^ ]+" defines "${command}")
    list(TRANSFORM defines STRIP)
    list(REMOVE_ITEM defines -DNDEBUG)
    list(SORT defines)
    set(${out} "${defines}" PARENT_SCOPE)
  endfunction()
  # A plain C++ consumer gets no define from convoy, only OpenMP and C++20.
  command_for(plain.cpp command)
  defines_of("${command}" defines)
  if(NOT defines STREQUAL "")
    message(FATAL_ERROR "[usage] plain.cpp: expected no define from convoy, got '${defines}':\n${command}")
  endif()
  if(NOT command MATCHES "-fopenmp" OR NOT command MATCHES "-std=(c|gnu)\\+\\+(20|2a)")
    message(FATAL_ERROR "[usage] plain.cpp: expected OpenMP and C++20 flags:\n${command}")
  endif()
  # With a CUDA compiler: a CUDA file in a target that also links Thrust for CUDA keeps its system.
  file(STRINGS "${WORK_DIR}/build/CMakeCache.txt" has_cuda REGEX "^CONVOY_USAGE_CUDA:BOOL=ON$")
  if(has_cuda)
    command_for(kernel.cu command)
    if(command MATCHES "THRUST_DEVICE_SYSTEM_OMP" OR NOT command MATCHES "THRUST_DEVICE_SYSTEM_CUDA")
      message(FATAL_ERROR "[usage] kernel.cu: expected Thrust's CUDA system and no OMP define:\n${command}")
    endif()
    message(STATUS "[usage] kernel.cu keeps THRUST_DEVICE_SYSTEM_CUDA")
  else()
    message(STATUS "[usage] no CUDA compiler: the CUDA consumer part was not checked")
  endif()
elseif(MODE STREQUAL "two_libtorch")
  set(official "$ENV{CONVOY_OFFICIAL_TORCH}")
  set(debian "$ENV{CONVOY_DEBIAN_TORCH_DIR}")
  set(app_args -DCONVOY_CONSUME=fetchcontent "-DCONVOY_SOURCE_DIR=${CONVOY_SOURCE_DIR}"
               -DCONVOY_LINK_COMPONENTS=torch)
  unset(ENV{CMAKE_PREFIX_PATH})  # only what each step names
  # Debian's TorchConfig.cmake looks for libtorch and libc10 where CMAKE_PREFIX_PATH points first.
  run_step("Debian's Torch_DIR, the other LibTorch in CMAKE_PREFIX_PATH" EXPECT_FAILURE
    COMMAND "${CMAKE_COMMAND}" -S "${app_dir}" -B "${WORK_DIR}/mixed" ${configure_args} ${app_args}
            "-DTorch_DIR=${debian}" "-DCMAKE_PREFIX_PATH=${official}")
  expect_in_output("two LibTorch installations are mixed" "-DTorch_DIR=" "${official}")
  # Debian's, then in the same folder, its cache holding Debian's Caffe2 config and libraries, the
  # official one by Torch_DIR alone: taken whole, not beside what the first configure found.
  run_step("Debian's LibTorch"
    COMMAND "${CMAKE_COMMAND}" -S "${app_dir}" -B "${WORK_DIR}/switch" ${configure_args} ${app_args}
            "-DTorch_DIR=${debian}")
  expect_in_output("convoy::torch is built (LibTorch")
  run_step("then the official LibTorch's Torch_DIR"
    COMMAND "${CMAKE_COMMAND}" -S "${app_dir}" -B "${WORK_DIR}/switch" ${configure_args} ${app_args}
            "-DTorch_DIR=${official}/share/cmake/Torch")
  expect_in_output("convoy::torch is built (LibTorch")
  expect_in_output("from ${official})")
else()
  message(FATAL_ERROR "run_configure_checks.cmake: unknown MODE '${MODE}'")
endif()
message(STATUS "[${MODE}] ok")
