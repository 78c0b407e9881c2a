# Finds what convoy::cuda and convoy::nccl need: the CUDA toolkit's libraries and NCCL. Included by
# convoy's build (cmake/ConvoyCuda.cmake, cmake/ConvoyNccl.cmake) and, installed next to
# convoy-config.cmake, by the components convoy-cuda.cmake and convoy-nccl.cmake, so a project that
# finds the package looks for them the same way convoy's build did.
#
# The searches run inside functions, so FindCUDAToolkit's result variables stay there; only its
# imported targets (CUDA::cudart, CUDA::cublas...), convoy_nccl_library and cache entries remain.
# Each sets <out> in the caller to "" when found, else to what is missing and how to get it.

# _convoy_find_cuda_libraries(<out> <CUDA:: target>...): the CUDA toolkit with those libraries.
function(_convoy_find_cuda_libraries out)
  find_package(CUDAToolkit QUIET)
  set(missing "")
  foreach(target IN LISTS ARGN)
    if(NOT TARGET ${target})
      list(APPEND missing ${target})
    endif()
  endforeach()
  if(NOT CUDAToolkit_FOUND OR missing)
    list(JOIN missing ", " missing)
    string(CONCAT message "the CUDA toolkit (${missing}), which was not found: install it (Debian: "
      "nvidia-cuda-toolkit; or NVIDIA's cuda-toolkit) and put its nvcc on the PATH, or set "
      "CUDAToolkit_ROOT to it")
    set(${out} "${message}" PARENT_SCOPE)
  else()
    set(${out} "" PARENT_SCOPE)
  endif()
endfunction()

# _convoy_find_nccl(<out>): NCCL as the imported target convoy_nccl_library (nccl.h's folder and
# libnccl), and the CUDA runtime (CUDA::cudart). NCCL is looked for in NCCL_ROOT (a CMake or
# environment variable), then in the CUDA toolkit's include/ and lib/ folders (where the toolkit's
# installer and NVIDIA's images put it), then in the system's (Debian: libnccl-dev). The results are
# the cache entries CONVOY_NCCL_INCLUDE_DIR and CONVOY_NCCL_LIBRARY; set either to pick one NCCL.
function(_convoy_find_nccl out)
  _convoy_find_cuda_libraries(missing CUDA::cudart)
  if(missing)
    set(${out} "${missing}" PARENT_SCOPE)
    return()
  endif()
  if(TARGET convoy_nccl_library)  # found by an earlier find_package(convoy) in this folder
    set(${out} "" PARENT_SCOPE)
    return()
  endif()
  find_package(CUDAToolkit QUIET)  # again, for its folders in this scope
  set(hints "")
  if(NCCL_ROOT)
    list(APPEND hints "${NCCL_ROOT}")
  elseif(DEFINED ENV{NCCL_ROOT})
    list(APPEND hints "$ENV{NCCL_ROOT}")
  endif()
  list(GET CUDAToolkit_INCLUDE_DIRS 0 toolkit_include)
  get_filename_component(toolkit_root "${toolkit_include}" DIRECTORY)
  list(APPEND hints "${toolkit_root}" "${CUDAToolkit_LIBRARY_ROOT}")
  find_path(CONVOY_NCCL_INCLUDE_DIR nccl.h HINTS ${hints} PATH_SUFFIXES include
            DOC "The folder of NCCL's nccl.h, for convoy::nccl")
  find_library(CONVOY_NCCL_LIBRARY nccl HINTS ${hints} "${CUDAToolkit_LIBRARY_DIR}"
               PATH_SUFFIXES lib lib64 DOC "NCCL's library, for convoy::nccl")
  # A value given or cached earlier is not searched again: check that it still holds NCCL.
  if(NOT EXISTS "${CONVOY_NCCL_INCLUDE_DIR}/nccl.h" OR NOT EXISTS "${CONVOY_NCCL_LIBRARY}")
    string(CONCAT message "NCCL, which was not found (nccl.h: ${CONVOY_NCCL_INCLUDE_DIR}, libnccl: "
      "${CONVOY_NCCL_LIBRARY}): install libnccl-dev (Debian's, or NVIDIA's CUDA repository's) and "
      "set NCCL_ROOT to its prefix, or CUDAToolkit_ROOT to a toolkit that holds it")
    set(${out} "${message}" PARENT_SCOPE)
    return()
  endif()
  add_library(convoy_nccl_library UNKNOWN IMPORTED)
  set_target_properties(convoy_nccl_library PROPERTIES
    IMPORTED_LOCATION "${CONVOY_NCCL_LIBRARY}"
    INTERFACE_INCLUDE_DIRECTORIES "${CONVOY_NCCL_INCLUDE_DIR}")
  set(${out} "" PARENT_SCOPE)
endfunction()
