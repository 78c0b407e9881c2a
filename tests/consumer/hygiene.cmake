# Included by the project run_configure_checks.cmake (MODE=snippet) writes around the FetchContent
# snippet of docs/packaging.md, with the variables from before it in convoy_hygiene_before.
# Prints "convoy hygiene: ok" when convoy added its targets and nothing else:
#  - no new normal (non-cache) variable but FetchContent's own: convoy_SOURCE_DIR,
#    convoy_BINARY_DIR, convoy_POPULATED, and the __cmake_* ones its FetchContent_MakeAvailable
#    macro leaves behind (CMake 3.25). Cache entries are allowed: find_package leaves <Package>_DIR
#    and its search results there, convoy its CONVOY_* options, as any dependency does.
#  - the targets convoy::convoy and convoy::zmq_ps, and in convoy's folder no other target (no
#    tests, examples, benchmarks, warning target) but the components found on this machine
#    (convoy_gloo, convoy_nccl, convoy_tensorboard, convoy_torch: AUTO in a subproject), and no
#    subfolder; the driver checks which components were built against the build under test;
#  - no dependency's imported target in the caller's scope (they live in convoy's folder), but
#    LibTorch's and Gloo's, which cmake/ConvoyTorch.cmake and ConvoyGloo.cmake make global for
#    the sake of generator expressions evaluated in the linking program's folder;
#  - no CUDA probe: CONVOY_ENABLE_CUDA is OFF (the default of a subproject), CMAKE_CUDA_COMPILER
#    is not set and CUDA is not enabled.
get_cmake_property(convoy_hygiene_after VARIABLES)
list(REMOVE_ITEM convoy_hygiene_after ${convoy_hygiene_before} convoy_hygiene_before)
set(convoy_hygiene_allowed convoy_SOURCE_DIR convoy_BINARY_DIR convoy_POPULATED)
set(convoy_hygiene_problems "")
foreach(convoy_hygiene_name IN LISTS convoy_hygiene_after)
  if(NOT DEFINED CACHE{${convoy_hygiene_name}}
     AND NOT convoy_hygiene_name IN_LIST convoy_hygiene_allowed
     AND NOT convoy_hygiene_name MATCHES "^__cmake_")
    list(APPEND convoy_hygiene_problems "variable ${convoy_hygiene_name} leaked into the caller")
  endif()
endforeach()

foreach(convoy_hygiene_target convoy::convoy convoy::zmq_ps)
  if(NOT TARGET ${convoy_hygiene_target})
    list(APPEND convoy_hygiene_problems "no target ${convoy_hygiene_target}")
  endif()
endforeach()
get_property(convoy_hygiene_targets DIRECTORY "${convoy_SOURCE_DIR}" PROPERTY BUILDSYSTEM_TARGETS)
list(REMOVE_ITEM convoy_hygiene_targets
     convoy convoy_zmq_ps convoy_gloo convoy_nccl convoy_tensorboard convoy_torch)
if(convoy_hygiene_targets)
  list(APPEND convoy_hygiene_problems "convoy defined targets '${convoy_hygiene_targets}'")
endif()
foreach(convoy_hygiene_target cereal::cereal OpenMP::OpenMP_CXX BLAS::BLAS ZLIB::ZLIB cppzmq
                              CUDA::cudart convoy_nccl_library)
  if(TARGET ${convoy_hygiene_target})
    list(APPEND convoy_hygiene_problems
         "convoy's dependency ${convoy_hygiene_target} is visible outside convoy's folder")
  endif()
endforeach()
get_property(convoy_hygiene_subdirectories DIRECTORY "${convoy_SOURCE_DIR}" PROPERTY SUBDIRECTORIES)
if(convoy_hygiene_subdirectories)
  list(APPEND convoy_hygiene_problems "convoy added folders '${convoy_hygiene_subdirectories}'")
endif()

get_property(convoy_hygiene_languages GLOBAL PROPERTY ENABLED_LANGUAGES)
if(NOT CONVOY_ENABLE_CUDA STREQUAL "OFF" OR DEFINED CMAKE_CUDA_COMPILER
   OR "CUDA" IN_LIST convoy_hygiene_languages)
  list(APPEND convoy_hygiene_problems "convoy probed for CUDA (CONVOY_ENABLE_CUDA='${CONVOY_ENABLE_CUDA}', "
       "CMAKE_CUDA_COMPILER='${CMAKE_CUDA_COMPILER}', languages '${convoy_hygiene_languages}')")
endif()

if(convoy_hygiene_problems)
  list(JOIN convoy_hygiene_problems "\n  " convoy_hygiene_problems)
  message(FATAL_ERROR "convoy hygiene: FetchContent_MakeAvailable(convoy) did more than add its "
                      "targets:\n  ${convoy_hygiene_problems}")
endif()
message(STATUS "convoy hygiene: ok")
