# convoy::torch: LibTorch models under every convoy strategy (convoy/torch/model.hpp,
# libtorch::Model). An INTERFACE target linking convoy::convoy and LibTorch's `torch`, found with
# find_package(Torch): Debian's libtorch-dev, or an official LibTorch build through
# CMAKE_PREFIX_PATH (or Torch_DIR). convoy.hpp does not include it. Installed as the component
# `torch` (cmake/ConvoyInstall.cmake, cmake/convoy-torch.cmake), which finds LibTorch again.
#
# Input: CONVOY_ENABLE_TORCH, AUTO or ON (cmake/ConvoyOptionalPart.cmake): a missing LibTorch is
# one status line or an error naming the package to install.

# The search runs in a function, so TorchConfig's result variables stay there; its imported
# targets remain, made global: LibTorch's targets name one another in generator expressions
# ($<TARGET_PROPERTY:torch_cpu,...>), which are evaluated where a program links convoy::torch, so in
# a project that adds convoy with FetchContent they must be visible outside convoy's folder too.
function(_convoy_find_torch)
  set(CMAKE_FIND_PACKAGE_TARGETS_GLOBAL TRUE)  # also for the find_package(Caffe2) inside
  find_package(Torch QUIET)
  if(TORCH_FOUND AND TARGET torch)
    set(_convoy_torch_missing "" PARENT_SCOPE)
    set(_convoy_torch_version "${Torch_VERSION}" PARENT_SCOPE)
  else()
    string(CONCAT message "LibTorch, which was not found: install libtorch-dev, or point "
      "CMAKE_PREFIX_PATH (or Torch_DIR) at an unpacked LibTorch")
    set(_convoy_torch_missing "${message}" PARENT_SCOPE)
  endif()
endfunction()
_convoy_find_torch()
convoy_optional_part_require(CONVOY_ENABLE_TORCH convoy::torch _convoy_torch_missing)

add_library(convoy_torch INTERFACE)
add_library(convoy::torch ALIAS convoy_torch)
set_target_properties(convoy_torch PROPERTIES EXPORT_NAME torch)
target_link_libraries(convoy_torch INTERFACE convoy torch)
message(STATUS "convoy: convoy::torch is built (LibTorch ${_convoy_torch_version})")
unset(_convoy_torch_version)
