# find_package(convoy COMPONENTS tensorboard): convoy::tensorboard (cmake/ConvoyTensorBoard.cmake),
# TensorBoard event files, with protobuf found again here. The installed headers include what
# protoc generated when convoy was built, and those compile only against that protobuf version, so
# another version is refused here, naming both, rather than failing in the consumer's compile.
# Installed only by a convoy built with it. convoy-config.cmake includes this file; it sets
# convoy_tensorboard_FOUND, or _convoy_component_missing to what is missing.
# In a function, so that FindProtobuf's result variables stay here.
function(_convoy_find_tensorboard_protobuf)
  # Not the protobuf headers a LibTorch prefix carries without their library (as convoy's build).
  _convoy_ignore_libtorch_prefixes()
  find_package(Protobuf QUIET)
  if(NOT Protobuf_FOUND OR NOT TARGET protobuf::libprotobuf)
    set(_convoy_component_missing "protobuf, which was not found: install libprotobuf-dev, or point \
CMAKE_PREFIX_PATH (or Protobuf_ROOT) at it" PARENT_SCOPE)
  endif()
  set(_convoy_found_protobuf_version "${Protobuf_VERSION}" PARENT_SCOPE)
endfunction()

set(_convoy_component_missing "")
_convoy_find_tensorboard_protobuf()
if(NOT _convoy_component_missing)
  include("${CMAKE_CURRENT_LIST_DIR}/convoy-tensorboard-targets.cmake")
  get_target_property(_convoy_built_protobuf_version convoy::tensorboard CONVOY_PROTOBUF_VERSION)
  if(_convoy_built_protobuf_version AND
     NOT _convoy_found_protobuf_version VERSION_EQUAL _convoy_built_protobuf_version)
    set(_convoy_component_missing "protobuf ${_convoy_built_protobuf_version}, whose protoc wrote \
its headers, but protobuf ${_convoy_found_protobuf_version} was found: point CMAKE_PREFIX_PATH (or \
Protobuf_ROOT) at protobuf ${_convoy_built_protobuf_version}, or build convoy against this one")
  else()
    set(convoy_tensorboard_FOUND TRUE)
  endif()
  unset(_convoy_built_protobuf_version)
endif()
unset(_convoy_found_protobuf_version)
