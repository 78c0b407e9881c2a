# What the consumer drivers (run_consumer.cmake, run_configure_checks.cmake,
# run_install_recipe.cmake) share: the build's CMAKE_PREFIX_PATH ('|'-separated so the list stays
# whole through ctest) handed on through the environment, which uses the platform's separator;
# run_step; doc_block; and expect_installed.
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

# doc_block(<markdown file> <marker> <language> <out>): the fenced block of <language> right under
# the line <marker> in <markdown file>, without its fences, in <out>. A missing marker or block is
# fatal and names both, so a doc edit that drops them says which test lost its text.
function(doc_block file marker language out)
  file(READ "${file}" doc)
  set(opening "${marker}\n```${language}\n")
  string(FIND "${doc}" "${opening}" begin)
  if(begin EQUAL -1)
    message(FATAL_ERROR
            "[${MODE}] ${file} has no line '${marker}' right above a ```${language} block")
  endif()
  string(LENGTH "${opening}" opening_length)
  math(EXPR begin "${begin} + ${opening_length}")
  string(SUBSTRING "${doc}" ${begin} -1 doc)
  string(FIND "${doc}" "\n```" end)
  string(SUBSTRING "${doc}" 0 ${end} block)
  set(${out} "${block}" PARENT_SCOPE)
endfunction()

# expect_installed(<prefix> <context>): what an install of convoy must hold under <prefix> (the
# umbrella and a core header, the package's CMake files, the two programs); a missing file is fatal
# and names it, then <context> (the step's output, say).
function(expect_installed prefix context)
  foreach(file include/convoy/convoy.hpp include/convoy/core/variables.hpp
               share/cmake/convoy/convoy-config.cmake share/cmake/convoy/convoy-config-version.cmake
               share/cmake/convoy/convoy-targets.cmake share/cmake/convoy/ConvoyDependencies.cmake
               bin/convoy-launch bin/convoy-keygen)
    if(NOT EXISTS "${prefix}/${file}")
      message(FATAL_ERROR "[${MODE}] ${prefix}/${file} was not installed\n${context}")
    endif()
  endforeach()
endfunction()
