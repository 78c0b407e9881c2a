# How convoy's own test and example programs are built and run; nothing here is exported.
#
#   CONVOY_SANITIZE      "" (default), "address,undefined" or "thread": the -fsanitize= list the
#                        programs are compiled and linked with, through the convoy_sanitizers target.
#   convoy_test_environment   the environment every ctest program runs with (sanitizer options).
#   convoy_sanitizer_report   a regex matching the first line of any sanitizer's report.
#   convoy_label_programs(<target> <label>...)   adds <target> to convoy_<label>_programs, so
#                        `cmake --build . --target convoy_engine_programs` builds exactly the
#                        programs `ctest -L engine` runs.
set(CONVOY_SANITIZE "" CACHE STRING
    "Sanitizers for convoy's test and example programs: empty, address,undefined, or thread")
set_property(CACHE CONVOY_SANITIZE PROPERTY STRINGS "" "address,undefined" "thread")

add_library(convoy_sanitizers INTERFACE)
set(convoy_test_environment "")
if(CONVOY_SANITIZE)
  string(REPLACE "," ";" _convoy_sanitizers "${CONVOY_SANITIZE}")
  if("thread" IN_LIST _convoy_sanitizers AND "address" IN_LIST _convoy_sanitizers)
    message(FATAL_ERROR "CONVOY_SANITIZE: thread and address cannot share a build; use two")
  endif()
  set(_convoy_flags -fsanitize=${CONVOY_SANITIZE} -fno-omit-frame-pointer)
  if("undefined" IN_LIST _convoy_sanitizers)
    # A UBSan report ends the program (exit 1): no check is recoverable, none is suppressed.
    list(APPEND _convoy_flags -fno-sanitize-recover=all)
    if(CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
      list(APPEND _convoy_flags -fsanitize-ignorelist=${PROJECT_SOURCE_DIR}/tests/ubsan.ignore)
    endif()
  endif()
  target_compile_options(convoy_sanitizers INTERFACE ${_convoy_flags})
  target_link_options(convoy_sanitizers INTERFACE ${_convoy_flags})

  # Each report ends the program with a failing status, so ctest fails; a forked child that hits
  # one exits instead of being killed by the signal its parent waits for.
  list(APPEND convoy_test_environment
    "ASAN_OPTIONS=halt_on_error=1:detect_leaks=1:detect_stack_use_after_return=1"
    "UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1")
  if("thread" IN_LIST _convoy_sanitizers)
    # The OpenMP runtime (libgomp or libomp) and OpenBLAS are not built for TSan: their own pool
    # threads would synchronize where TSan cannot see it. One thread each keeps all the threading
    # in convoy's code.
    list(APPEND convoy_test_environment
      "TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1:suppressions=${PROJECT_SOURCE_DIR}/tests/tsan.supp"
      OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1)
  endif()
  # What any sanitizer's report starts with, for tests that pass by their output.
  set(convoy_sanitizer_report "ERROR: [A-Za-z]+Sanitizer|WARNING: ThreadSanitizer|runtime error:")
  message(STATUS "convoy: CONVOY_SANITIZE=${CONVOY_SANITIZE} (${_convoy_flags})")
endif()

function(convoy_label_programs target)
  foreach(label IN LISTS ARGN)
    if(NOT TARGET convoy_${label}_programs)
      add_custom_target(convoy_${label}_programs)
    endif()
    add_dependencies(convoy_${label}_programs ${target})
  endforeach()
endfunction()

# convoy_test_program(<target>): one of convoy's test programs (or the doctest main they share),
# compiled at -O0 in Release. They run small data whose heavy math is OpenBLAS's or LibTorch's,
# and their template-heavy files compile in about two thirds of -O1's CPU time (test_ps_cluster:
# 34 s against 49-53 s; -O1 was itself two thirds of -O3). The examples and benchmarks, which
# train for real and are timed, keep the build type's flags; the sanitizer builds set their own.
function(convoy_test_program target)
  target_compile_options(${target} PRIVATE $<$<CONFIG:Release>:-O0>)
endfunction()
