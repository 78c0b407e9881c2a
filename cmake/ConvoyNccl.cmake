# convoy::nccl: the collective engine's target (convoy/comm/nccl/communicator.hpp and the headers
# that include it): convoy::convoy, convoy::zmq_ps (the unique-id bootstrap), the CUDA runtime and
# NCCL. Its headers are plain C++ over NCCL's and the CUDA runtime's host API, so no CUDA compiler
# is needed to build against it. NCCL is looked for in NCCL_ROOT, then in the CUDA toolkit's
# include/ and lib/ folders (where the toolkit's installer and NVIDIA's images put it), then in the
# system's (Debian: libnccl-dev).
#
# Input: CONVOY_ENABLE_NCCL (AUTO: build it when the CUDA toolkit and NCCL are found, else one
# status line; ON: stop with what is missing; OFF).

function(_convoy_find_nccl)
  set(_convoy_nccl_found FALSE PARENT_SCOPE)
  find_package(CUDAToolkit QUIET)
  if(NOT CUDAToolkit_FOUND)
    set(_convoy_nccl_missing "the CUDA toolkit (its runtime library and headers)" PARENT_SCOPE)
    return()
  endif()
  set(hints "")
  if(NCCL_ROOT)
    list(APPEND hints "${NCCL_ROOT}")
  elseif(DEFINED ENV{NCCL_ROOT})
    list(APPEND hints "$ENV{NCCL_ROOT}")
  endif()
  get_filename_component(toolkit_root "${CUDAToolkit_INCLUDE_DIRS}" DIRECTORY)
  list(APPEND hints "${toolkit_root}" "${CUDAToolkit_LIBRARY_ROOT}")
  find_path(CONVOY_NCCL_INCLUDE_DIR nccl.h HINTS ${hints} PATH_SUFFIXES include)
  find_library(CONVOY_NCCL_LIBRARY nccl HINTS ${hints} "${CUDAToolkit_LIBRARY_DIR}"
               PATH_SUFFIXES lib lib64)
  if(NOT CONVOY_NCCL_INCLUDE_DIR OR NOT CONVOY_NCCL_LIBRARY)
    set(_convoy_nccl_missing "NCCL (nccl.h: ${CONVOY_NCCL_INCLUDE_DIR}, libnccl: ${CONVOY_NCCL_LIBRARY})"
        PARENT_SCOPE)
    return()
  endif()
  set(_convoy_nccl_found TRUE PARENT_SCOPE)
endfunction()
_convoy_find_nccl()

if(NOT _convoy_nccl_found)
  string(CONCAT _convoy_message "convoy::nccl needs ${_convoy_nccl_missing}, which was not found: "
    "install NCCL (Debian: libnccl-dev; or NVIDIA's packages) and set NCCL_ROOT to its prefix, or "
    "CUDAToolkit_ROOT to a toolkit that holds it")
  string(TOUPPER "${CONVOY_ENABLE_NCCL}" _convoy_choice)
  if(_convoy_choice STREQUAL "ON")
    message(FATAL_ERROR "${_convoy_message}; or configure with -DCONVOY_ENABLE_NCCL=OFF")
  endif()
  message(STATUS "convoy: convoy::nccl is not built: ${_convoy_message}")
  unset(_convoy_message)
  unset(_convoy_choice)
  unset(_convoy_nccl_missing)
  unset(_convoy_nccl_found)
  return()
endif()
unset(_convoy_nccl_found)

add_library(convoy_nccl INTERFACE)
add_library(convoy::nccl ALIAS convoy_nccl)
target_include_directories(convoy_nccl SYSTEM INTERFACE "${CONVOY_NCCL_INCLUDE_DIR}")
target_link_libraries(convoy_nccl INTERFACE convoy_zmq_ps CUDA::cudart "${CONVOY_NCCL_LIBRARY}")
# What <convoy/comm/nccl.hpp> looks for to bring comm::Nccl's engine (with CONVOY_WITH_CUDA).
target_compile_definitions(convoy_nccl INTERFACE CONVOY_WITH_NCCL=1)
message(STATUS "convoy: convoy::nccl is built (NCCL: ${CONVOY_NCCL_LIBRARY})")
