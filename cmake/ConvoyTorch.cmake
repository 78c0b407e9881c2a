# convoy::torch: LibTorch models under every convoy strategy (convoy/torch/model.hpp,
# libtorch::Model). An INTERFACE target linking convoy::convoy and LibTorch's `torch`, found with
# find_package(Torch): Debian's libtorch-dev (1.13), the LibTorch inside PyPI's `torch` wheel, or an
# official LibTorch archive, the last two through Torch_DIR (or CMAKE_PREFIX_PATH). convoy.hpp does
# not include it. Installed as the component `torch` (cmake/ConvoyInstall.cmake,
# cmake/convoy-torch.cmake), which finds LibTorch again.
#
# Input: CONVOY_ENABLE_TORCH, AUTO or ON (cmake/ConvoyOptionalPart.cmake): a missing LibTorch is
# one status line or an error naming the package to install.
include(ConvoyTorchPrefix)  # _convoy_torch_seed, _convoy_torch_check_one, _convoy_torch_link_order

# The search runs in a function, so TorchConfig's result variables stay there; its imported
# targets remain, made global: LibTorch's targets name one another in generator expressions
# ($<TARGET_PROPERTY:torch_cpu,...>), which are evaluated where a program links convoy::torch, so in
# a project that adds convoy with FetchContent they must be visible outside convoy's folder too.
function(_convoy_find_torch)
  set(CMAKE_FIND_PACKAGE_TARGETS_GLOBAL TRUE)  # also for the find_package(Caffe2) inside
  _convoy_torch_seed()  # an official LibTorch's Caffe2 config and libraries from its own prefix
  find_package(Torch QUIET)
  if(TORCH_FOUND AND TARGET torch)
    _convoy_torch_check_one()  # or stops, naming both installations
    set(_convoy_torch_missing "" PARENT_SCOPE)
    set(_convoy_torch_version "${Torch_VERSION}" PARENT_SCOPE)
    set(_convoy_torch_prefix "${TORCH_INSTALL_PREFIX}" PARENT_SCOPE)
  else()
    string(CONCAT message "LibTorch, which was not found: install libtorch-dev, or point "
      "Torch_DIR at the share/cmake/Torch folder of an unpacked LibTorch or of PyPI's torch "
      "wheel (docs/torch.md)")
    set(_convoy_torch_missing "${message}" PARENT_SCOPE)
  endif()
endfunction()
_convoy_find_torch()
convoy_optional_part_require(CONVOY_ENABLE_TORCH convoy::torch _convoy_torch_missing)

add_library(convoy_torch INTERFACE)
add_library(convoy::torch ALIAS convoy_torch)
# CONVOY_TORCH_VERSION and _PREFIX: the LibTorch found, for convoy's tests (tests/consumer).
set_target_properties(convoy_torch PROPERTIES EXPORT_NAME torch
                      CONVOY_TORCH_VERSION "${_convoy_torch_version}"
                      CONVOY_TORCH_PREFIX "${_convoy_torch_prefix}")
target_link_libraries(convoy_torch INTERFACE convoy torch)
# A LibTorch built with CUDA (PyPI's wheel; its c10_cuda target): libtorch::Model runs on a GPU in
# a program that links convoy::cuda too (convoy/torch/model.hpp). A generator expression, so the
# installed target asks the consumer's LibTorch, not this build's.
target_compile_definitions(convoy_torch INTERFACE $<$<TARGET_EXISTS:c10_cuda>:CONVOY_TORCH_WITH_CUDA=1>)
_convoy_torch_link_order(convoy_torch)  # libstdc++ ahead of LibTorch's copies of its parts
message(STATUS "convoy: convoy::torch is built (LibTorch ${_convoy_torch_version} from "
               "${_convoy_torch_prefix})")
unset(_convoy_torch_version)
unset(_convoy_torch_prefix)
