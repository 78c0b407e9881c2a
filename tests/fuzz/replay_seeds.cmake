# ctest -L fuzz: writes PROGRAM's seed corpus into CORPUS and runs every input once (-runs=0),
# failing on any crash or report.
file(REMOVE_RECURSE "${CORPUS}")
execute_process(COMMAND "${PROGRAM}" --make-corpus "${CORPUS}" RESULT_VARIABLE status)
if(NOT status EQUAL 0)
  message(FATAL_ERROR "${PROGRAM} --make-corpus ${CORPUS} failed (${status})")
endif()
execute_process(COMMAND "${PROGRAM}" -runs=0 "${CORPUS}" RESULT_VARIABLE status)
if(NOT status EQUAL 0)
  message(FATAL_ERROR "${PROGRAM} failed on a seed of ${CORPUS} (${status}); its output above names it")
endif()
