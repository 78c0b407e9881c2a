# convoy::gloo: multi-worker synchronous training on CPUs (comm::Gloo, convoy/comm/gloo.hpp), the
# collective engine over Gloo's allreduce on TCP. An INTERFACE target linking convoy::zmq_ps (the
# processes meet over ZeroMQ at worker 0) and Gloo, found with find_package(Gloo): Debian's
# libgloo-dev, or a Gloo install through CMAKE_PREFIX_PATH (or Gloo_DIR). It defines
# CONVOY_WITH_GLOO=1, with which comm/gloo.hpp brings the engine. Installed as the component
# `gloo` (cmake/ConvoyInstall.cmake, cmake/convoy-gloo.cmake), which finds Gloo again.
#
# Input: CONVOY_ENABLE_GLOO, AUTO or ON (cmake/ConvoyOptionalPart.cmake).

function(_convoy_find_gloo)
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
target_compile_definitions(convoy_gloo INTERFACE CONVOY_WITH_GLOO=1)
message(STATUS "convoy: convoy::gloo is built (Gloo ${_convoy_gloo_version})")
unset(_convoy_gloo_version)
