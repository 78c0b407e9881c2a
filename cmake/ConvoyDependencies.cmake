# Finds convoy's dependencies. Included by the build and, through convoy-config.cmake, by every
# project that uses the installed package, so both resolve them the same way.
include(CMakeFindDependencyMacro)

find_dependency(Threads)
find_dependency(OpenMP)
find_dependency(ZLIB)
find_dependency(cereal CONFIG)
# The C++ binding of ZeroMQ (cppzmq-dev, libzmq3-dev), for convoy::zmq_ps only.
find_dependency(cppzmq CONFIG)

if(NOT DEFINED BLA_VENDOR)
  set(BLA_VENDOR OpenBLAS)  # one BLAS thread per replica is set through OpenBLAS's own call
endif()
find_dependency(BLAS)

# Thrust with its OpenMP system for host math: the CUDA toolkit's CCCL when present, otherwise
# Debian's libthrust-dev. Either ships thrust-config.cmake.
if(NOT TARGET convoy::thrust_host)
  find_package(CUDAToolkit QUIET)
  set(_convoy_thrust_hints "")
  if(CUDAToolkit_FOUND)
    list(APPEND _convoy_thrust_hints "${CUDAToolkit_LIBRARY_DIR}/cmake/thrust")
  endif()
  list(APPEND _convoy_thrust_hints /usr/local/cuda/lib64/cmake/thrust /usr/share/cmake/thrust)
  find_dependency(Thrust CONFIG HINTS ${_convoy_thrust_hints})
  thrust_create_target(convoy_thrust_host HOST CPP DEVICE OMP)
  add_library(convoy::thrust_host ALIAS convoy_thrust_host)
endif()
