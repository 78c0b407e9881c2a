# Builds and runs tests/consumer/app against convoy, the way a user project would.
#   cmake -DMODE=install|fetchcontent -DCONVOY_SOURCE_DIR=... -DCONVOY_BINARY_DIR=... -DWORK_DIR=...
#         [-DBUILD_TYPE=Release] [-DCXX_COMPILER=...] [-DGENERATOR=...] [-DPREFIX_PATH=a|b]
#         [-DCOMPONENTS=cuda,nccl,zmq] [-DTORCH_VERSION=2.11] [-DSKIP_PROGRAMS=torch]
#         -P run_consumer.cmake
# install:      cmake --install CONVOY_BINARY_DIR into WORK_DIR/prefix, check the components
#               mechanism against COMPONENTS (those the build has), then find_package(convoy) from
#               there; the app links a program to each of cuda, nccl, gloo, tensorboard and
#               torch in COMPONENTS, and runs the gloo, tensorboard and torch ones.
# fetchcontent: FetchContent_Declare(convoy SOURCE_DIR CONVOY_SOURCE_DIR) and no option set; the
#               app links a program to each of gloo, nccl, tensorboard and torch in COMPONENTS
#               (AUTO in a subproject; cuda is opt-in there) and runs the same ones as install.
# SKIP_PROGRAMS (','-separated) leaves those components' programs out (their install is still
# checked). Every step runs with execute_process; the first that fails stops the script with its
# output.
cmake_minimum_required(VERSION 3.25)

foreach(required MODE CONVOY_SOURCE_DIR CONVOY_BINARY_DIR WORK_DIR)
  if(NOT DEFINED ${required})
    message(FATAL_ERROR "run_consumer.cmake: pass -D${required}=...")
  endif()
endforeach()
if(NOT MODE MATCHES "^(install|fetchcontent)$")
  message(FATAL_ERROR "run_consumer.cmake: MODE is '${MODE}'; use install or fetchcontent")
endif()
set(app_dir "${CMAKE_CURRENT_LIST_DIR}/app")
set(prefix "${WORK_DIR}/prefix")
set(build "${WORK_DIR}/build")
include("${CMAKE_CURRENT_LIST_DIR}/consumer_steps.cmake")  # PREFIX_PATH, run_step, expect_installed

# Same compiler, build type and generator as the build under test; never the user package registry.
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
# The app shows that the package configures, compiles, links and runs; its programs run a few
# steps, so they are compiled without optimization (-O3 made this test the longest of the suite)
# and on every core (the test runs alone). The build type still picks the package's configuration.
if(BUILD_TYPE)
  string(TOUPPER "${BUILD_TYPE}" config)
  list(APPEND configure_args "-DCMAKE_CXX_FLAGS_${config}=-O0")
endif()
cmake_host_system_information(RESULT cores QUERY NUMBER_OF_LOGICAL_CORES)

file(REMOVE_RECURSE "${WORK_DIR}")
# The app also links a program to each of these components the build has: the device ones are
# built, not run; the tensorboard one writes an event file. Through FetchContent, convoy::cuda is
# built only when the project asks for it (CONVOY_ENABLE_CUDA), which this one, as most, does not.
string(REPLACE "," ";" link_components "${COMPONENTS}")
if(MODE STREQUAL "install")
  list(FILTER link_components INCLUDE REGEX "^(cuda|gloo|nccl|tensorboard|torch)$")
else()
  list(FILTER link_components INCLUDE REGEX "^(gloo|nccl|tensorboard|torch)$")
endif()
string(REPLACE "," ";" skipped_programs "${SKIP_PROGRAMS}")
foreach(component IN LISTS skipped_programs)
  list(REMOVE_ITEM link_components ${component})
endforeach()
foreach(component gloo tensorboard torch)
  if(component IN_LIST link_components)
    set(run_${component} TRUE)
  else()
    set(run_${component} FALSE)
  endif()
endforeach()
list(JOIN link_components "," link_components)
if(MODE STREQUAL "install")
  run_step("install convoy into ${prefix}"
    COMMAND "${CMAKE_COMMAND}" --install "${CONVOY_BINARY_DIR}" --prefix "${prefix}" ${config_args})
  expect_installed("${prefix}" "")
  run_step("components (${COMPONENTS})"
    COMMAND "${CMAKE_COMMAND}" -S "${CMAKE_CURRENT_LIST_DIR}/components" -B "${WORK_DIR}/components"
            ${configure_args} "-DCMAKE_PREFIX_PATH=${prefix}" "-DCONVOY_EXPECTED_COMPONENTS=${COMPONENTS}")
  if(run_tensorboard)
    # A copy of the install whose TensorBoard headers claim another protoc: the component must be
    # refused with both versions named, not left to fail in protoc's code.
    set(other "${WORK_DIR}/other_protobuf")
    file(COPY "${prefix}/" DESTINATION "${other}")
    set(targets_file "${other}/share/cmake/convoy/convoy-tensorboard-targets.cmake")
    file(READ "${targets_file}" text)
    string(REGEX REPLACE "CONVOY_PROTOBUF_VERSION \"[^\"]*\"" "CONVOY_PROTOBUF_VERSION \"1.2.3\""
           text "${text}")
    file(WRITE "${targets_file}" "${text}")
    run_step("tensorboard refuses another protobuf"
      COMMAND "${CMAKE_COMMAND}" -S "${CMAKE_CURRENT_LIST_DIR}/components"
              -B "${WORK_DIR}/other_protobuf_check" ${configure_args} "-DCMAKE_PREFIX_PATH=${other}"
              -DCONVOY_CLAIMED_PROTOBUF=1.2.3)
  endif()
  run_step("configure app (find_package, linking '${link_components}')"
    COMMAND "${CMAKE_COMMAND}" -S "${app_dir}" -B "${build}" ${configure_args}
            -DCONVOY_CONSUME=find_package "-DCMAKE_PREFIX_PATH=${prefix}"
            "-DCONVOY_LINK_COMPONENTS=${link_components}")
  # The package must come from the fresh install, not from some other convoy on the machine.
  string(FIND "${step_output}" "from ${prefix}/" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "[install] convoy was not found under ${prefix}:\n${step_output}")
  endif()
else()
  run_step("configure app (FetchContent, linking '${link_components}')"
    COMMAND "${CMAKE_COMMAND}" -S "${app_dir}" -B "${build}" ${configure_args}
            -DCONVOY_CONSUME=fetchcontent "-DCONVOY_SOURCE_DIR=${CONVOY_SOURCE_DIR}"
            "-DCONVOY_LINK_COMPONENTS=${link_components}")
endif()

run_step("build app" COMMAND "${CMAKE_COMMAND}" --build "${build}" ${config_args} --parallel ${cores})
run_step("run app" COMMAND "${build}/bin/convoy_consumer")
if(NOT step_output MATCHES "consumer: 1 variable, 6 elements")
  message(FATAL_ERROR "[${MODE}] unexpected output from the app:\n${step_output}")
endif()
message(STATUS "[${MODE}] ${step_output}")
if(run_tensorboard)
  file(MAKE_DIRECTORY "${WORK_DIR}/events")
  run_step("run the tensorboard app"
    COMMAND "${build}/bin/convoy_uses_tensorboard" "${WORK_DIR}/events")
  file(GLOB events "${WORK_DIR}/events/events.out.tfevents.*")
  if(NOT step_output MATCHES "convoy consumer: 2 events" OR NOT events)
    message(FATAL_ERROR "[${MODE}] the tensorboard app wrote no event file:\n${step_output}")
  endif()
  message(STATUS "[${MODE}] ${step_output}")
endif()
# run_component_app(<component> <expected output>): runs convoy_uses_<component> and checks what
# it prints.
function(run_component_app component expected)
  run_step("run the ${component} app" COMMAND "${build}/bin/convoy_uses_${component}")
  if(NOT step_output MATCHES "${expected}")
    message(FATAL_ERROR "[${MODE}] unexpected output from the ${component} app:\n${step_output}")
  endif()
  message(STATUS "[${MODE}] ${step_output}")
endfunction()
if(run_torch)
  # The LibTorch the build under test has (TORCH_VERSION, major.minor), not another installed one.
  string(REPLACE "." "\\." torch_version "${TORCH_VERSION}")
  run_component_app(torch
    "convoy consumer: a LibTorch model of 4 variables trained 3 steps \\(LibTorch ${torch_version}")
endif()
if(run_gloo)
  run_component_app(gloo "convoy consumer: comm::Gloo trained 3 steps on 2 replica\\(s\\)")
endif()
