# convoy::nccl: the collective engine's target (convoy/comm/nccl/communicator.hpp and the headers
# that include it): convoy::convoy, convoy::zmq_ps (the unique-id bootstrap), the CUDA runtime and
# NCCL, found by cmake/ConvoyCudaDependencies.cmake. Its headers are plain C++ over NCCL's and the
# CUDA runtime's host API, so no CUDA compiler is needed to build against it. CONVOY_WITH_NCCL tells
# headers that NCCL is there. The installed package defines it again through convoy-nccl.cmake
# (find_package(convoy COMPONENTS nccl)).
#
# Input: CONVOY_ENABLE_NCCL, AUTO or ON (cmake/ConvoyOptionalPart.cmake).

include(ConvoyCudaDependencies)
if(TARGET convoy_zmq_ps)
  _convoy_find_nccl(_convoy_nccl_missing)
else()
  string(CONCAT _convoy_nccl_missing "convoy::zmq_ps (the unique id travels over ZeroMQ), which "
    "CONVOY_ENABLE_ZMQ=OFF leaves out: configure with -DCONVOY_ENABLE_ZMQ=ON")
endif()
convoy_optional_part_require(CONVOY_ENABLE_NCCL convoy::nccl _convoy_nccl_missing)

add_library(convoy_nccl INTERFACE)
add_library(convoy::nccl ALIAS convoy_nccl)
set_target_properties(convoy_nccl PROPERTIES EXPORT_NAME nccl)
# convoy_nccl_library is IMPORTED, so the export writes its name and convoy-nccl.cmake creates it
# again in the consumer's project.
target_link_libraries(convoy_nccl INTERFACE convoy_zmq_ps CUDA::cudart convoy_nccl_library)
target_compile_definitions(convoy_nccl INTERFACE CONVOY_WITH_NCCL=1)
message(STATUS "convoy: convoy::nccl is built (NCCL: ${CONVOY_NCCL_LIBRARY})")
