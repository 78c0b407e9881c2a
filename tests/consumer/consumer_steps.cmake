# What run_consumer.cmake and run_configure_checks.cmake share: the build's CMAKE_PREFIX_PATH
# ('|'-separated so the list stays whole through ctest) handed on through the environment, which
# uses the platform's separator; and run_step.
if(PREFIX_PATH)
  string(REPLACE "|" ";" PREFIX_PATH "${PREFIX_PATH}")
  cmake_path(CONVERT "${PREFIX_PATH}" TO_NATIVE_PATH_LIST native_prefix_path)
  set(ENV{CMAKE_PREFIX_PATH} "${native_prefix_path}")
endif()

# run_step(<name> [EXPECT_FAILURE] COMMAND <args>...): runs one step; its output goes to
# step_output in the caller. A step that fails (or, with EXPECT_FAILURE, succeeds) is fatal.
function(run_step name)
  cmake_parse_arguments(PARSE_ARGV 1 arg "EXPECT_FAILURE" "" "COMMAND")
  message(STATUS "[${MODE}] ${name}")
  execute_process(COMMAND ${arg_COMMAND} RESULT_VARIABLE result
                  OUTPUT_VARIABLE output ERROR_VARIABLE output)
  if(arg_EXPECT_FAILURE AND result EQUAL 0)
    message(FATAL_ERROR "[${MODE}] step '${name}' should have failed but succeeded:\n${output}")
  elseif(NOT arg_EXPECT_FAILURE AND NOT result EQUAL 0)
    list(JOIN arg_COMMAND " " shown)
    message(FATAL_ERROR "[${MODE}] step '${name}' failed (${result}):\n  ${shown}\n${output}")
  endif()
  set(step_output "${output}" PARENT_SCOPE)
endfunction()
