# convoy-keygen as a user runs it (cmake -P, with KEYGEN and WORK_DIR): NAME.key (mode 0600, the
# secret and the public key) and NAME.pub (the public key only); a second run refuses to overwrite
# them (exit 1) and leaves them as they were; usage errors exit 2.
file(REMOVE_RECURSE "${WORK_DIR}")
file(MAKE_DIRECTORY "${WORK_DIR}")

function(expect_exit code)
  execute_process(COMMAND ${ARGN} WORKING_DIRECTORY "${WORK_DIR}"
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc STREQUAL "${code}")
    message(FATAL_ERROR "'${ARGN}' exited with ${rc}, expected ${code}\n${out}${err}")
  endif()
  set(out "${out}${err}" PARENT_SCOPE)
endfunction()

expect_exit(0 "${KEYGEN}" ps)
foreach(file ps.key ps.pub)
  if(NOT EXISTS "${WORK_DIR}/${file}")
    message(FATAL_ERROR "convoy-keygen ps did not write ${file}:\n${out}")
  endif()
endforeach()
execute_process(COMMAND stat -c %a "${WORK_DIR}/ps.key" OUTPUT_VARIABLE mode OUTPUT_STRIP_TRAILING_WHITESPACE)
if(NOT mode STREQUAL "600")
  message(FATAL_ERROR "ps.key has mode ${mode}, expected 600")
endif()

file(STRINGS "${WORK_DIR}/ps.key" secret_lines REGEX "^secret-key = \"[^\"]+\"$")
file(STRINGS "${WORK_DIR}/ps.key" key_public REGEX "^public-key = ")
file(STRINGS "${WORK_DIR}/ps.pub" pub_public REGEX "^public-key = \"[^\"]+\"$")
file(STRINGS "${WORK_DIR}/ps.pub" pub_secret REGEX "secret")
list(LENGTH secret_lines n)
string(REGEX MATCH "\"([^\"]+)\"" ignored "${pub_public}")
string(LENGTH "${CMAKE_MATCH_1}" key_length)
if(NOT n EQUAL 1 OR NOT key_public STREQUAL pub_public OR pub_secret OR NOT key_length EQUAL 40)
  message(FATAL_ERROR "the key files are not a pair: ps.key has '${secret_lines}' and "
                      "'${key_public}', ps.pub has '${pub_public}' (${key_length} characters)")
endif()
set(key "${CMAKE_MATCH_1}")
string(FIND "${out}" "public key ${key}" printed)  # FIND: Z85 holds regex characters
if(printed EQUAL -1)
  message(FATAL_ERROR "convoy-keygen did not print the public key it wrote:\n${out}")
endif()

file(READ "${WORK_DIR}/ps.key" before)
expect_exit(1 "${KEYGEN}" ps)
if(NOT out MATCHES "is not overwritten")
  message(FATAL_ERROR "a second convoy-keygen ps did not say why it refused:\n${out}")
endif()
file(READ "${WORK_DIR}/ps.key" after)
if(NOT before STREQUAL after)
  message(FATAL_ERROR "a second convoy-keygen ps changed ps.key")
endif()

expect_exit(2 "${KEYGEN}")
expect_exit(2 "${KEYGEN}" a b)
expect_exit(2 "${KEYGEN}" --bogus)
expect_exit(0 "${KEYGEN}" --help)
message(STATUS "convoy-keygen: ok")
