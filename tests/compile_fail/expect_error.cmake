# Run by the compile_fail_<name> ctests: cmake -DBUILD_DIR=... -DTARGET=cf_<name> -DSOURCE=<file.cpp>
# [-DCONFIG=...] -P expect_error.cmake. Builds TARGET, which must fail, with output containing the
# text of every `// expected-error: <text>` line of SOURCE (one or more).
foreach(var BUILD_DIR TARGET SOURCE)
  if(NOT DEFINED ${var} OR "${${var}}" STREQUAL "")
    message(FATAL_ERROR "expect_error.cmake: pass -D${var}=...")
  endif()
endforeach()

# Each `// expected-error:` line names one piece of the message, so that a long message can be
# matched within 100 columns. A semicolon would split a CMake list, so it travels as a placeholder.
set(semicolon "<convoy-semicolon>")
file(READ "${SOURCE}" source_text)
string(REPLACE ";" "${semicolon}" source_text "${source_text}")
string(REGEX MATCHALL "(^|\n)// expected-error:[^\n]*" lines "${source_text}")
if(NOT lines)
  message(FATAL_ERROR "${SOURCE} needs at least one '// expected-error: <text>' line; it has none")
endif()
set(expected_texts "")
foreach(line IN LISTS lines)
  string(REGEX REPLACE "^\n?// expected-error:(.*)$" "\\1" expected "${line}")
  string(STRIP "${expected}" expected)
  if(expected STREQUAL "")
    message(FATAL_ERROR "${SOURCE}: an '// expected-error:' line names no text")
  endif()
  list(APPEND expected_texts "${expected}")
endforeach()

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

list(JOIN expected_texts "\" and \"" all_expected)
string(REPLACE "${semicolon}" ";" all_expected "${all_expected}")
if(result EQUAL 0)
  message(FATAL_ERROR "${TARGET} compiled, but ${SOURCE} must not compile (expected an error containing "
                      "\"${all_expected}\"). Build output:\n${output}")
endif()
foreach(expected IN LISTS expected_texts)
  string(REPLACE "${semicolon}" ";" expected "${expected}")
  string(FIND "${output}" "${expected}" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "${TARGET} failed to compile, but not with the expected error \"${expected}\". "
                        "Build output:\n${output}")
  endif()
endforeach()
# `// expected-only-error` in SOURCE: the message must be the compiler's only error, with none about
# the refused types after it.
if(source_text MATCHES "(^|\n)// expected-only-error")
  string(REGEX MATCHALL "error: " errors "${output}")
  list(LENGTH errors count)
  if(NOT count EQUAL 1)
    message(FATAL_ERROR "${TARGET} failed to compile with ${count} errors; ${SOURCE} expects its "
                        "message to be the only one. Build output:\n${output}")
  endif()
endif()
message(STATUS "${TARGET} failed to compile as expected, with \"${all_expected}\"")
