# The opt-in parts of convoy's build (convoy::cuda, convoy::tensorboard, convoy::nccl, convoy::gloo,
# convoy::torch) share one switch, CONVOY_ENABLE_<PART>: AUTO builds the part where what it needs is
# found and says so in one status line where not; ON makes a missing piece an error; OFF leaves the
# part out without looking for anything. AUTO is the default at the top level and in a project that
# adds convoy with FetchContent or add_subdirectory, so that linking convoy::torch is all such a
# project writes. A part may give another default for a subproject: convoy::cuda is OFF there,
# because building it enables the CUDA language (an nvcc probe) in the consumer's project.

# convoy_optional_part(<option> <module> <description> [<default in a subproject>]): declares the
# cache option <option> (default AUTO, or the fourth argument where convoy is not the top-level
# project) and includes cmake/<module>.cmake unless it is OFF. A macro rather than a function,
# because the module must run in the caller's scope (enable_language(CUDA) works only at file
# scope, and ConvoyCuda's CMAKE_CUDA_ARCHITECTURES must reach the targets of convoy's folders); it
# sets no variable itself.
macro(convoy_optional_part option module description)
  _convoy_declare_optional_part(${option} "${description}" ${ARGN})
  if(${option})  # AUTO or ON, in any case
    include(${module})
  endif()
endmacro()

function(_convoy_declare_optional_part option description)
  set(default AUTO)
  if(NOT PROJECT_IS_TOP_LEVEL AND ARGC GREATER 2)
    set(default "${ARGV2}")
  endif()
  set(${option} ${default} CACHE STRING "${description}: AUTO, ON or OFF")
  set_property(CACHE ${option} PROPERTY STRINGS AUTO ON OFF)
  string(TOUPPER "${${option}}" choice)
  if(NOT choice MATCHES "^(AUTO|ON|OFF)$")
    message(FATAL_ERROR "convoy: ${option} is '${${option}}'; give AUTO, ON or OFF")
  endif()
  if(NOT default STREQUAL "AUTO" AND choice STREQUAL "OFF")
    # A part left out by its subproject default says so at each configure, with the way in.
    string(REGEX REPLACE "^CONVOY_ENABLE_" "" part "${option}")
    string(TOLOWER "${part}" part)
    message(STATUS "convoy: convoy::${part} is not built: ${option} is OFF, its default where convoy "
                   "is a subproject; set it to AUTO or ON before FetchContent_MakeAvailable(convoy) "
                   "(or add_subdirectory) to build it")
  endif()
endfunction()

# convoy_optional_part_require(<option> <target> <missing variable>): for a part's module, after
# its search has set <missing variable> to what is missing and where to get it, or to "". When it is
# not empty, stops the configure if <option> is ON, else prints one status line, and returns from
# the module: a macro, so that return() leaves the file that calls it. It unsets the variable.
macro(convoy_optional_part_require option target missing)
  if(${missing})
    _convoy_optional_part_missing(${option} ${target} "${${missing}}")
    unset(${missing})
    return()
  endif()
  unset(${missing})
endmacro()

function(_convoy_optional_part_missing option target reason)
  string(TOUPPER "${${option}}" choice)
  if(choice STREQUAL "ON")
    message(FATAL_ERROR "convoy: ${target} needs ${reason}; or configure with -D${option}=OFF")
  endif()
  message(STATUS "convoy: ${target} is not built: it needs ${reason}")
endfunction()
