# One check of a benchmark's command line, run by ctest as
#   cmake -DPROGRAM=<bench> -DCHECK=help|bad_option|malformed|quick_files -DDIR=<scratch> [-DARGS=a;b]
#     -P check_command_line.cmake
# help: --help prints a usage on stdout and exits 0. bad_option: an unknown option exits 2 with one
# line on stderr that names it. malformed: ARGS (an option with a bad value) exits 2 with one line
# naming the option. quick_files: `--quick --csv F --json F` exits 0, the CSV has a header and at
# least one row of as many fields, and every line of the JSON file is an object with a "benchmark".
# chart: tools/plot (-DPLOT=) draws a PNG from each of those files; without gnuplot it says
# "gnuplot is not installed", which the test's SKIP_REGULAR_EXPRESSION turns into a skip. A GPU
# benchmark without a device exits 77 from its quick run: both checks then say "exited 77, no CUDA
# device: skipped" (a file in DIR tells the chart), which those tests' expressions also skip.
get_filename_component(name "${PROGRAM}" NAME)

function(expect_refusal option)
  execute_process(COMMAND "${PROGRAM}" ${ARGN} RESULT_VARIABLE status OUTPUT_VARIABLE out
                  ERROR_VARIABLE err)
  if(NOT status EQUAL 2)
    message(FATAL_ERROR "${name} ${ARGN}: exit status ${status}, expected 2; stderr: ${err}")
  endif()
  string(STRIP "${err}" stripped)
  if(stripped MATCHES "\n" OR NOT stripped MATCHES "^${name}: .*'?${option}")
    message(FATAL_ERROR "${name} ${ARGN}: expected one line naming ${option} on stderr, got: ${err}")
  endif()
endfunction()

if(CHECK STREQUAL "help")
  execute_process(COMMAND "${PROGRAM}" --help RESULT_VARIABLE status OUTPUT_VARIABLE out)
  if(NOT status EQUAL 0 OR NOT out MATCHES "^usage: ${name} " OR NOT out MATCHES "--csv PATH"
     OR NOT out MATCHES "--json PATH" OR NOT out MATCHES "--quick")
    message(FATAL_ERROR "${name} --help: exit status ${status}, expected 0 and a usage naming "
                        "--quick, --csv and --json; stdout: ${out}")
  endif()
elseif(CHECK STREQUAL "bad_option")
  expect_refusal("--no-such-option" --no-such-option)
  expect_refusal("--csv" --csv)  # a value missing at the end of the line
elseif(CHECK STREQUAL "malformed")
  list(GET ARGS 0 option)
  expect_refusal("${option}" ${ARGS})
elseif(CHECK STREQUAL "quick_files")
  file(REMOVE_RECURSE "${DIR}")
  file(MAKE_DIRECTORY "${DIR}")
  set(csv "${DIR}/${name}.csv")
  set(json "${DIR}/${name}.json")
  execute_process(COMMAND "${PROGRAM}" --quick --csv "${csv}" --json "${json}"
                  RESULT_VARIABLE status OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(status EQUAL 77)  # a GPU benchmark without a device; the test's SKIP_REGULAR_EXPRESSION
    file(WRITE "${DIR}/skipped" "${out}")
    message(FATAL_ERROR "${name} --quick exited 77, no CUDA device: skipped (${out})")
  endif()
  if(NOT status EQUAL 0)
    message(FATAL_ERROR "${name} --quick: exit status ${status}; stdout: ${out}\nstderr: ${err}")
  endif()
  file(STRINGS "${csv}" lines)
  list(LENGTH lines count)
  if(count LESS 2)
    message(FATAL_ERROR "${csv}: ${count} lines; expected a header and at least one row")
  endif()
  list(GET lines 0 header)
  if(NOT header MATCHES "^benchmark,")
    message(FATAL_ERROR "${csv}: header '${header}' does not start with 'benchmark,'")
  endif()
  # Every row has as many fields as the header (fields here never hold quoted commas but the
  # training configs' names, which this strips first).
  string(REGEX REPLACE "[^,]" "" header_commas "${header}")
  foreach(line IN LISTS lines)
    string(REGEX REPLACE "\"[^\"]*\"" "" unquoted "${line}")
    string(REGEX REPLACE "[^,]" "" commas "${unquoted}")
    if(NOT commas STREQUAL header_commas)
      message(FATAL_ERROR "${csv}: row '${line}' has not as many fields as the header")
    endif()
  endforeach()
  file(STRINGS "${json}" records)
  list(LENGTH records count)
  if(count LESS 1)
    message(FATAL_ERROR "${json}: empty; expected one JSON line per record")
  endif()
  foreach(record IN LISTS records)
    string(JSON kind ERROR_VARIABLE error GET "${record}" benchmark)
    if(error)
      message(FATAL_ERROR "${json}: line '${record}' is not a record with a benchmark: ${error}")
    endif()
  endforeach()
  # The file holds the records the program printed, the same lines.
  foreach(record IN LISTS records)
    string(FIND "${out}" "${record}" at)
    if(at EQUAL -1)
      message(FATAL_ERROR "${json}: line '${record}' is not among the lines ${name} printed")
    endif()
  endforeach()
elseif(CHECK STREQUAL "chart")
  if(EXISTS "${DIR}/skipped")  # the quick run had no device, so there is nothing to draw
    message(FATAL_ERROR "${name} --quick exited 77, no CUDA device: skipped")
  endif()
  find_program(gnuplot gnuplot)
  if(NOT gnuplot)
    message(FATAL_ERROR "gnuplot is not installed (tools/dev installs gnuplot-nox); skipping")
  endif()
  foreach(kind csv json)
    set(input "${DIR}/${name}.${kind}")
    set(png "${DIR}/${name}_${kind}.png")
    file(REMOVE "${png}")
    execute_process(COMMAND "${PLOT}" bench "${input}" -o "${png}" RESULT_VARIABLE status
                    ERROR_VARIABLE err)
    if(NOT status EQUAL 0 OR NOT EXISTS "${png}")
      message(FATAL_ERROR "tools/plot bench ${input}: exit status ${status}: ${err}")
    endif()
    file(READ "${png}" magic LIMIT 8 HEX)
    file(SIZE "${png}" size)
    if(NOT magic STREQUAL "89504e470d0a1a0a" OR size LESS 2000)
      message(FATAL_ERROR "${png}: not a PNG of some substance (magic ${magic}, ${size} bytes)")
    endif()
  endforeach()
else()
  message(FATAL_ERROR "check_command_line.cmake: unknown CHECK '${CHECK}'")
endif()
