# Finds convoy's dependencies. Included by the build and, through convoy-config.cmake, by every
# project that uses the installed package, so both resolve them the same way.
#
# A dependency that is missing stops the caller with a message that names it and the Debian
# package that provides it: a FATAL_ERROR in convoy's own build (top level or FetchContent), and
# convoy_FOUND=FALSE with convoy_NOT_FOUND_MESSAGE when convoy-config.cmake includes this file
# (it sets _convoy_package_config), so find_package(convoy) fails with that message, or goes on
# without convoy when not REQUIRED.
#
# The searches run inside a function, so their result variables (ZLIB_INCLUDE_DIRS, BLA_VENDOR,
# CUDAToolkit_*...) stay there; only the imported targets and the usual cache entries remain.
#
# Input: _convoy_with_zmq (true: find cppzmq for convoy::zmq_ps).

# _convoy_find(<package> <provider> [find_package arguments...]): sets _convoy_missing in the
# caller to a message when <package> is not found, else to "". <provider> is one argument, so it
# holds no semicolon.
function(_convoy_find package provider)
  set(quiet "")
  if(CMAKE_FIND_PACKAGE_NAME AND ${CMAKE_FIND_PACKAGE_NAME}_FIND_QUIETLY)
    set(quiet QUIET)
  endif()
  if(package STREQUAL "BLAS" AND NOT DEFINED BLA_VENDOR)
    set(BLA_VENDOR OpenBLAS)  # one BLAS thread per replica is set through OpenBLAS's own call
  endif()
  if(NOT ${package}_FOUND)
    find_package(${package} ${ARGN} ${quiet})
  endif()
  if(${package}_FOUND)
    set(_convoy_missing "" PARENT_SCOPE)
  else()
    string(CONCAT message "convoy needs ${package}, which was not found: install ${provider}, or "
                          "point CMAKE_PREFIX_PATH (or ${package}_DIR / ${package}_ROOT) at it")
    set(_convoy_missing "${message}" PARENT_SCOPE)
  endif()
endfunction()

# _convoy_require(<package> <provider> [find_package arguments...]): _convoy_find, then stops the
# including file's caller as described at the top. A macro, so return() leaves this file.
macro(_convoy_require)
  _convoy_find(${ARGV})
  if(_convoy_missing)
    if(_convoy_package_config)
      set(convoy_FOUND FALSE)
      set(convoy_NOT_FOUND_MESSAGE "${_convoy_missing}")
      unset(_convoy_missing)
      return()
    endif()
    message(FATAL_ERROR "${_convoy_missing}")
  endif()
  unset(_convoy_missing)
endmacro()

# _convoy_ignore_libtorch_prefixes(): adds to CMAKE_IGNORE_PREFIX_PATH, in the caller's scope, every
# CMAKE_PREFIX_PATH entry (the variable's and the environment's) that holds a LibTorch of the
# official layout (share/cmake/Torch): its include/ carries other packages' headers (protobuf's),
# which a search for those packages must not take. A macro, so the caller's search sees it; the
# caller is a function, so it goes no further.
macro(_convoy_ignore_libtorch_prefixes)
  set(_convoy_prefixes ${CMAKE_PREFIX_PATH})
  if(DEFINED ENV{CMAKE_PREFIX_PATH})
    cmake_path(CONVERT "$ENV{CMAKE_PREFIX_PATH}" TO_CMAKE_PATH_LIST _convoy_environment)
    list(APPEND _convoy_prefixes ${_convoy_environment})
  endif()
  foreach(_convoy_prefix IN LISTS _convoy_prefixes)
    if(EXISTS "${_convoy_prefix}/share/cmake/Torch/TorchConfig.cmake")
      list(APPEND CMAKE_IGNORE_PREFIX_PATH "${_convoy_prefix}")
    endif()
  endforeach()
  unset(_convoy_prefixes)
  unset(_convoy_environment)
  unset(_convoy_prefix)
endmacro()

_convoy_require(Threads "the C library's threads (libc6-dev)")
_convoy_require(OpenMP
  "the compiler's OpenMP runtime (GCC: libgomp, part of gcc, clang-14: libomp-14-dev)")
_convoy_require(ZLIB "zlib1g-dev")
_convoy_require(cereal "libcereal-dev" CONFIG)
_convoy_require(BLAS "libopenblas-dev (or set BLA_VENDOR to the BLAS you have)")
if(_convoy_with_zmq)
  # The C++ binding of ZeroMQ, for convoy::zmq_ps only.
  _convoy_require(cppzmq "cppzmq-dev and libzmq3-dev (ZeroMQ's C++ binding and library)" CONFIG)
endif()
