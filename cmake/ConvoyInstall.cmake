# Install and export rules: headers, the convoy::convoy target and the components (convoy::zmq_ps,
# convoy::cuda, convoy::nccl, convoy::tensorboard) this build has, a relocatable CMake package in
# share/cmake/convoy (ARCH_INDEPENDENT unless it holds convoy::tensorboard's static library), the
# cluster launcher and the key maker (convoy-keygen) in bin/. Consumers re-find the dependencies
# through an installed copy of ConvoyDependencies.cmake.
include(CMakePackageConfigHelpers)

set(CONVOY_INSTALL_CMAKEDIR "${CMAKE_INSTALL_DATADIR}/cmake/convoy"
    CACHE STRING "Where convoy's CMake package files go, relative to the install prefix")

set(_convoy_headers_left_out "")
if(NOT TARGET convoy_tensorboard)
  # These need convoy::tensorboard's generated protobuf code, which this build lacks.
  set(_convoy_headers_left_out PATTERN "event_writer.hpp" EXCLUDE
                               REGEX "callbacks/tensorboard\\.hpp$" EXCLUDE)
endif()
if(NOT TARGET convoy_torch)
  list(APPEND _convoy_headers_left_out REGEX "convoy/torch/" EXCLUDE)  # needs LibTorch's headers
endif()
if(NOT TARGET convoy_gloo)
  list(APPEND _convoy_headers_left_out REGEX "convoy/comm/gloo/" EXCLUDE)  # needs Gloo's headers
endif()
install(DIRECTORY "${PROJECT_SOURCE_DIR}/include/convoy"
        DESTINATION "${CMAKE_INSTALL_INCLUDEDIR}"
        FILES_MATCHING PATTERN "*.hpp" PATTERN "*.cuh" ${_convoy_headers_left_out})
unset(_convoy_headers_left_out)
if(TARGET convoy_tensorboard)
  # protoc's headers for the Event and Summary messages, beside the headers that include them.
  get_target_property(_convoy_generated convoy_tensorboard CONVOY_GENERATED_DIR)
  install(DIRECTORY "${_convoy_generated}/convoy"
          DESTINATION "${CMAKE_INSTALL_INCLUDEDIR}"
          FILES_MATCHING PATTERN "*.pb.h")
  unset(_convoy_generated)
endif()

# A Python 3 script (standard library only) that starts a ps/worker cluster of one program;
# docs/launching.md.
install(PROGRAMS "${PROJECT_SOURCE_DIR}/tools/convoy-launch"
        DESTINATION "${CMAKE_INSTALL_BINDIR}")

# The CurveZMQ key-pair maker for comm::ZmqPs (tools/convoy-keygen.cpp).
if(TARGET convoy-keygen)
  install(TARGETS convoy-keygen RUNTIME DESTINATION "${CMAKE_INSTALL_BINDIR}")
endif()

install(TARGETS convoy EXPORT convoy-targets)
if(TARGET convoy_zmq_ps)
  install(TARGETS convoy_zmq_ps EXPORT convoy-targets)
  install(FILES "${PROJECT_SOURCE_DIR}/cmake/convoy-zmq.cmake" DESTINATION "${CONVOY_INSTALL_CMAKEDIR}")
endif()
install(EXPORT convoy-targets
        NAMESPACE convoy::
        DESTINATION "${CONVOY_INSTALL_CMAKEDIR}")

# The components convoy::cuda, convoy::nccl, convoy::gloo, convoy::tensorboard and convoy::torch,
# where this build has them: each an export of its own and a convoy-<component>.cmake that finds
# its dependencies (ConvoyCudaDependencies.cmake; Gloo; protobuf; LibTorch), so a project that asks
# for none needs none of them.
foreach(_convoy_component cuda nccl gloo tensorboard torch)
  if(TARGET convoy_${_convoy_component})
    set(_convoy_targets convoy_${_convoy_component})
    if(_convoy_component STREQUAL "cuda")
      list(APPEND _convoy_targets convoy_cuda_kernels)  # its compiled kernels
    endif()
    install(TARGETS ${_convoy_targets} EXPORT convoy-${_convoy_component}-targets
            ARCHIVE DESTINATION "${CMAKE_INSTALL_LIBDIR}")
    install(EXPORT convoy-${_convoy_component}-targets
            NAMESPACE convoy::
            DESTINATION "${CONVOY_INSTALL_CMAKEDIR}")
    install(FILES "${PROJECT_SOURCE_DIR}/cmake/convoy-${_convoy_component}.cmake"
            DESTINATION "${CONVOY_INSTALL_CMAKEDIR}")
  endif()
endforeach()
unset(_convoy_component)
unset(_convoy_targets)
if(TARGET convoy_cuda OR TARGET convoy_nccl)
  install(FILES "${PROJECT_SOURCE_DIR}/cmake/ConvoyCudaDependencies.cmake"
          DESTINATION "${CONVOY_INSTALL_CMAKEDIR}")
endif()
if(TARGET convoy_torch)  # convoy-torch.cmake finds one LibTorch as the build did
  install(FILES "${PROJECT_SOURCE_DIR}/cmake/ConvoyTorchPrefix.cmake"
          DESTINATION "${CONVOY_INSTALL_CMAKEDIR}")
endif()

if(TARGET convoy_tensorboard)
  set(_convoy_arch_independent "")  # a static library: built for one architecture
else()
  set(_convoy_arch_independent ARCH_INDEPENDENT)
endif()

configure_package_config_file(
  "${PROJECT_SOURCE_DIR}/cmake/convoy-config.cmake.in"
  "${PROJECT_BINARY_DIR}/convoy-config.cmake"
  INSTALL_DESTINATION "${CONVOY_INSTALL_CMAKEDIR}"
  NO_SET_AND_CHECK_MACRO)
# 0.x: a minor release may break the API, so only the same major.minor satisfies a request.
write_basic_package_version_file(
  "${PROJECT_BINARY_DIR}/convoy-config-version.cmake"
  VERSION "${PROJECT_VERSION}"
  COMPATIBILITY SameMinorVersion
  ${_convoy_arch_independent})
unset(_convoy_arch_independent)

install(FILES
  "${PROJECT_BINARY_DIR}/convoy-config.cmake"
  "${PROJECT_BINARY_DIR}/convoy-config-version.cmake"
  "${PROJECT_SOURCE_DIR}/cmake/ConvoyDependencies.cmake"
  DESTINATION "${CONVOY_INSTALL_CMAKEDIR}")
