# find_package(convoy COMPONENTS torch): convoy::torch (cmake/ConvoyTorch.cmake), LibTorch models
# under convoy's strategies, with LibTorch found again here by find_package(Torch). Installed only
# by a convoy built with it. convoy-config.cmake includes this file; it sets convoy_torch_FOUND, or
# _convoy_component_missing to what is missing.
include("${CMAKE_CURRENT_LIST_DIR}/ConvoyTorchPrefix.cmake")  # one LibTorch, as convoy's build
function(_convoy_find_torch)
  _convoy_torch_seed()
  find_package(Torch QUIET)
  if(TARGET torch)
    _convoy_torch_check_one()
  endif()
endfunction()
if(NOT TARGET torch)
  _convoy_find_torch()
endif()
if(TARGET torch)
  include("${CMAKE_CURRENT_LIST_DIR}/convoy-torch-targets.cmake")
  set(convoy_torch_FOUND TRUE)
else()
  set(_convoy_component_missing
      "LibTorch (find_package(Torch)): install libtorch-dev, or point CMAKE_PREFIX_PATH at LibTorch")
endif()
