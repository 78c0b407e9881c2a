# convoy::gloo: multi-worker synchronous training on CPUs (comm::Gloo, convoy/comm/gloo.hpp), the
# collective engine over Gloo's allreduce on TCP. An INTERFACE target linking convoy::zmq_ps (the
# processes meet over ZeroMQ at worker 0) and Gloo, found with find_package(Gloo): Debian's
# libgloo-dev, or a Gloo install through CMAKE_PREFIX_PATH (or Gloo_DIR). It defines
# CONVOY_WITH_GLOO=1, with which comm/gloo.hpp brings the engine. Installed as the component
# `gloo` (cmake/ConvoyInstall.cmake, cmake/convoy-gloo.cmake), which finds Gloo again.
#
# Input: CONVOY_ENABLE_GLOO, AUTO or ON (cmake/ConvoyOptionalPart.cmake).

function(_convoy_find_gloo)
  # Global, as LibTorch's are (ConvoyTorch.cmake): convoy::gloo's link options name the library
  # with $<TARGET_FILE:gloo>, which is evaluated where a program links convoy::gloo, outside
  # convoy's folder in a project that adds convoy with FetchContent.
  set(CMAKE_FIND_PACKAGE_TARGETS_GLOBAL TRUE)
  find_package(Gloo CONFIG QUIET)
  if(TARGET gloo)
    set(_convoy_gloo_missing "" PARENT_SCOPE)
    set(_convoy_gloo_version "${GLOO_VERSION}" PARENT_SCOPE)
  else()
    string(CONCAT message "Gloo, which was not found: install libgloo-dev, or point "
      "CMAKE_PREFIX_PATH (or Gloo_DIR) at a Gloo install")
    set(_convoy_gloo_missing "${message}" PARENT_SCOPE)
  endif()
endfunction()
if(TARGET convoy_zmq_ps)
  _convoy_find_gloo()
else()
  string(CONCAT _convoy_gloo_missing "convoy::zmq_ps (the processes meet over ZeroMQ), which "
    "CONVOY_ENABLE_ZMQ=OFF leaves out: configure with -DCONVOY_ENABLE_ZMQ=ON")
endif()
convoy_optional_part_require(CONVOY_ENABLE_GLOO convoy::gloo _convoy_gloo_missing)

add_library(convoy_gloo INTERFACE)
add_library(convoy::gloo ALIAS convoy_gloo)
set_target_properties(convoy_gloo PROPERTIES EXPORT_NAME gloo)
target_link_libraries(convoy_gloo INTERFACE convoy_zmq_ps gloo)
# Gloo's library first among the program's shared libraries. The LibTorch of PyPI's wheel and of
# the official archives carries a Gloo of its own, built into libtorch_cpu and exported; linked
# after it, the Gloo convoy's headers were compiled against lost every call to that other version,
# whose objects have other layouts (a crash in connect_mesh). The dynamic linker takes a symbol from
# the first library that has it, in link order; --no-as-needed keeps it there under --as-needed.
# docs/gloo.md says what this means for LibTorch's own Gloo.
# One SHELL: item, which CMake keeps whole: it drops repeated options, and convoy::torch's own
# group (libstdc++ first) would otherwise take the second push-state and pop-state away.
target_link_options(convoy_gloo INTERFACE
  "SHELL:-Wl,--push-state,--no-as-needed $<TARGET_FILE:gloo> -Wl,--pop-state")
target_compile_definitions(convoy_gloo INTERFACE CONVOY_WITH_GLOO=1)
message(STATUS "convoy: convoy::gloo is built (Gloo ${_convoy_gloo_version})")
unset(_convoy_gloo_version)
