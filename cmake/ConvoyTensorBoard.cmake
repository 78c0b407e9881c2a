# convoy::tensorboard: a static library of the C++ that protoc generates at build time from
# include/convoy/tensorboard/proto/*.proto (TensorBoard's Event and Summary messages), linking
# convoy::convoy and protobuf::libprotobuf. The headers convoy/tensorboard/event_writer.hpp and
# convoy/train/callbacks/tensorboard.hpp need it; convoy.hpp includes neither. Installed as the
# component `tensorboard` (cmake/ConvoyInstall.cmake, cmake/convoy-tensorboard.cmake): the library,
# the generated headers beside convoy's, and the protobuf version that generated them.
#
# Input: CONVOY_ENABLE_TENSORBOARD, AUTO or ON (cmake/ConvoyOptionalPart.cmake): a missing protobuf
# is one status line or an error naming the packages to install.

# The search runs in a function, so FindProtobuf's result variables stay there; only its imported
# targets and cache entries remain.
function(_convoy_find_protobuf)
  # LibTorch's wheel and official archives carry protobuf's headers among their own without the
  # library or compiler they belong to; they must not reach convoy::tensorboard, whose generated
  # code must match the protoc found here.
  _convoy_ignore_libtorch_prefixes()
  find_package(Protobuf QUIET)
  if(Protobuf_FOUND AND TARGET protobuf::libprotobuf AND TARGET protobuf::protoc)
    set(_convoy_protobuf_missing "" PARENT_SCOPE)
    set(_convoy_protobuf_version "${Protobuf_VERSION}" PARENT_SCOPE)
  else()
    string(CONCAT message "protobuf's library and compiler, which were not found: install "
      "libprotobuf-dev and protobuf-compiler, or point CMAKE_PREFIX_PATH (or Protobuf_ROOT) at them")
    set(_convoy_protobuf_missing "${message}" PARENT_SCOPE)
  endif()
endfunction()
_convoy_find_protobuf()
convoy_optional_part_require(CONVOY_ENABLE_TENSORBOARD convoy::tensorboard _convoy_protobuf_missing)

set(_convoy_proto_dir "${PROJECT_SOURCE_DIR}/include")
set(_convoy_generated "${PROJECT_BINARY_DIR}/convoy_generated")
set(_convoy_protos "")
set(_convoy_outputs "")
set(_convoy_sources "")
foreach(_convoy_name event summary)
  set(_convoy_stem "convoy/tensorboard/proto/${_convoy_name}")
  list(APPEND _convoy_protos "${_convoy_proto_dir}/${_convoy_stem}.proto")
  list(APPEND _convoy_outputs "${_convoy_generated}/${_convoy_stem}.pb.h"
                              "${_convoy_generated}/${_convoy_stem}.pb.cc")
  list(APPEND _convoy_sources "${_convoy_generated}/${_convoy_stem}.pb.cc")
endforeach()
file(MAKE_DIRECTORY "${_convoy_generated}")
add_custom_command(
  OUTPUT ${_convoy_outputs}
  COMMAND protobuf::protoc "--cpp_out=${_convoy_generated}" "-I${_convoy_proto_dir}" ${_convoy_protos}
  DEPENDS ${_convoy_protos} protobuf::protoc
  COMMENT "convoy: generating C++ for TensorBoard's event format with protoc"
  VERBATIM)

add_library(convoy_tensorboard STATIC ${_convoy_sources})
add_library(convoy::tensorboard ALIAS convoy_tensorboard)
# SYSTEM: the generated code is protoc's, and its warnings are not convoy's to fix.
target_include_directories(convoy_tensorboard SYSTEM PUBLIC "$<BUILD_INTERFACE:${_convoy_generated}>")
# For the install (cmake/ConvoyInstall.cmake): where the generated headers are, and the protobuf
# whose protoc wrote them, which a consumer's protobuf must match or the headers refuse to compile.
# The version travels with the exported target (cmake/convoy-tensorboard.cmake checks it).
set_target_properties(convoy_tensorboard PROPERTIES
  EXPORT_NAME tensorboard
  CONVOY_GENERATED_DIR "${_convoy_generated}"
  CONVOY_PROTOBUF_VERSION "${_convoy_protobuf_version}"
  EXPORT_PROPERTIES CONVOY_PROTOBUF_VERSION)
target_link_libraries(convoy_tensorboard PUBLIC convoy protobuf::libprotobuf)
# protoc's code is not convoy's to fix: a -Werror build (tools/dev asan) does not apply to it.
set_target_properties(convoy_tensorboard PROPERTIES POSITION_INDEPENDENT_CODE ON
                      COMPILE_WARNING_AS_ERROR OFF)
if(NOT PROJECT_IS_TOP_LEVEL AND NOT CONVOY_INSTALL)
  # In a project that adds convoy with FetchContent the part is on wherever protobuf is found, so it
  # is compiled only for a program that links it, not by every build of that project.
  set_target_properties(convoy_tensorboard PROPERTIES EXCLUDE_FROM_ALL ON)
endif()
message(STATUS "convoy: convoy::tensorboard is built (protoc: ${Protobuf_PROTOC_EXECUTABLE})")
unset(_convoy_proto_dir)
unset(_convoy_generated)
unset(_convoy_protos)
unset(_convoy_outputs)
unset(_convoy_sources)
unset(_convoy_name)
unset(_convoy_stem)
unset(_convoy_protobuf_version)
