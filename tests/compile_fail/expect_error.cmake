# Run by the compile_fail_<name> ctests: cmake -DBUILD_DIR=... -DTARGET=cf_<name> -DSOURCE=<file.cpp>
# [-DCONFIG=...] -P expect_error.cmake. Builds TARGET, which must fail, with output containing the
# text on SOURCE's `// expected-error: <text>` line.
foreach(var BUILD_DIR TARGET SOURCE)
  if(NOT DEFINED ${var} OR "${${var}}" STREQUAL "")
    message(FATAL_ERROR "expect_error.cmake: pass -D${var}=...")
  endif()
endforeach()

file(STRINGS "${SOURCE}" lines REGEX "^// expected-error: ")
list(LENGTH lines count)
if(NOT count EQUAL 1)
  message(FATAL_ERROR "${SOURCE} needs exactly one '// expected-error: <text>' line; it has ${count}")
endif()
string(REGEX REPLACE "^// expected-error: (.*)$" "\\1" expected "${lines}")
string(STRIP "${expected}" expected)
if(expected STREQUAL "")
  message(FATAL_ERROR "${SOURCE}: the '// expected-error:' line names no text")
endif()

set(config_args "")
if(DEFINED CONFIG AND NOT CONFIG STREQUAL "")
  set(config_args --config "${CONFIG}")
endif()
# Plain ASCII diagnostics, whatever the caller's locale.
set(ENV{LC_ALL} C)
execute_process(
  COMMAND "${CMAKE_COMMAND}" --build "${BUILD_DIR}" --target "${TARGET}" ${config_args}
  RESULT_VARIABLE result
  OUTPUT_VARIABLE output
  ERROR_VARIABLE output)

if(result EQUAL 0)
  message(FATAL_ERROR "${TARGET} compiled, but ${SOURCE} must not compile (expected an error containing "
                      "\"${expected}\"). Build output:\n${output}")
endif()
string(FIND "${output}" "${expected}" at)
if(at EQUAL -1)
  message(FATAL_ERROR "${TARGET} failed to compile, but not with the expected error \"${expected}\". "
                      "Build output:\n${output}")
endif()
message(STATUS "${TARGET} failed to compile as expected, with \"${expected}\"")
