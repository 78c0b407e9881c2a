# find_package(convoy COMPONENTS gloo): convoy::gloo (cmake/ConvoyGloo.cmake), comm::Gloo's
# engine, with Gloo found again here by find_package(Gloo). Installed only by a convoy built with
# it, which also exported convoy::zmq_ps. convoy-config.cmake includes this file; it sets
# convoy_gloo_FOUND, or _convoy_component_missing to what is missing.
if(NOT TARGET gloo)
  find_package(Gloo CONFIG QUIET)
endif()
if(TARGET gloo)
  include("${CMAKE_CURRENT_LIST_DIR}/convoy-gloo-targets.cmake")
  set(convoy_gloo_FOUND TRUE)
else()
  set(_convoy_component_missing
      "Gloo (find_package(Gloo)): install libgloo-dev, or point CMAKE_PREFIX_PATH at a Gloo install")
endif()
