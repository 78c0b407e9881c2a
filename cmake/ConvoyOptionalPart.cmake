# The opt-in parts of convoy's build (convoy::cuda, convoy::tensorboard, convoy::nccl) share one
# switch, CONVOY_ENABLE_<PART>: AUTO builds the part where what it needs is found and says so in one
# status line where not; ON makes a missing piece an error; OFF leaves the part out without looking
# for anything. AUTO is the default at the top level, OFF in a project that adds convoy as a
# subproject, so convoy probes nothing on a consumer's behalf unless asked.

# convoy_optional_part(<option> <module> <description>): declares the cache option <option> and
# includes cmake/<module>.cmake unless it is OFF. A macro rather than a function, because the module
# must run in the caller's scope (enable_language(CUDA) works only at file scope, and ConvoyCuda's
# CMAKE_CUDA_ARCHITECTURES must reach the targets of convoy's folders); it sets no variable itself.
macro(convoy_optional_part option module description)
  _convoy_declare_optional_part(${option} "${description}")
  if(${option})  # AUTO or ON, in any case
    include(${module})
  endif()
endmacro()

function(_convoy_declare_optional_part option description)
  if(PROJECT_IS_TOP_LEVEL)
    set(default AUTO)
  else()
    set(default OFF)
  endif()
  set(${option} ${default} CACHE STRING "${description}: AUTO, ON or OFF")
  set_property(CACHE ${option} PROPERTY STRINGS AUTO ON OFF)
  string(TOUPPER "${${option}}" choice)
  if(NOT choice MATCHES "^(AUTO|ON|OFF)$")
    message(FATAL_ERROR "convoy: ${option} is '${${option}}'; give AUTO, ON or OFF")
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
