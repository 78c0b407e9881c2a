# vcpkg overlay port for convoy (header-only). Not exercised in CI: see docs/packaging.md.
#   vcpkg install convoy --overlay-ports=<convoy checkout>/ports
#
# This overlay builds the checkout it lives in. A port published to a registry fetches a release
# instead, replacing the SOURCE_PATH line with:
#   vcpkg_from_github(
#     OUT_SOURCE_PATH SOURCE_PATH
#     REPO <owner>/convoy
#     REF "v${VERSION}"
#     SHA512 <sha512 of the release archive>
#     HEAD_REF main)
set(SOURCE_PATH "${CMAKE_CURRENT_LIST_DIR}/../..")

# Header-only but for the tensorboard feature's small static library: configure once, release.
set(VCPKG_BUILD_TYPE release)

# Each feature is resolved one way, whatever else is on the machine:
#   zmq    CONVOY_ENABLE_ZMQ=ON: convoy::zmq_ps, with vcpkg's cppzmq and zeromq. Without it the
#          target is not built or exported and cppzmq is not looked for.
#   cuda   CONVOY_ENABLE_CUDA=ON with the CUDA toolkit that vcpkg's cuda port located
#          (vcpkg_find_cuda); its nvcc brings the toolkit's Thrust and CUB. Without it the toolkit is
#          never searched.
#   nccl   CONVOY_ENABLE_NCCL=ON (it brings cuda and zmq): convoy::nccl with the machine's NCCL,
#          which vcpkg has no port for (NCCL_ROOT, the toolkit's folders or the system's).
#   tensorboard
#          CONVOY_ENABLE_TENSORBOARD=ON: convoy::tensorboard, a static library of what vcpkg's
#          protoc generates, linked to vcpkg's protobuf.
#   gloo   CONVOY_ENABLE_GLOO=ON (it brings zmq): convoy::gloo, with vcpkg's gloo.
#   torch  CONVOY_ENABLE_TORCH=ON: convoy::torch, with vcpkg's libtorch (find_package(Torch)).
# Each option is passed ON or OFF, never left to AUTO, so what is built never depends on what else
# the machine has.
vcpkg_check_features(OUT_FEATURE_OPTIONS FEATURE_OPTIONS
  FEATURES
    zmq         CONVOY_ENABLE_ZMQ
    cuda        CONVOY_ENABLE_CUDA
    nccl        CONVOY_ENABLE_NCCL
    gloo        CONVOY_ENABLE_GLOO
    tensorboard CONVOY_ENABLE_TENSORBOARD
    torch       CONVOY_ENABLE_TORCH)

if("cuda" IN_LIST FEATURES)
  include("${CURRENT_INSTALLED_DIR}/share/cuda/vcpkg_find_cuda.cmake")
  vcpkg_find_cuda(OUT_CUDA_TOOLKIT_ROOT cuda_toolkit_root)
  list(APPEND FEATURE_OPTIONS "-DCUDAToolkit_ROOT=${cuda_toolkit_root}"
                              "-DCMAKE_CUDA_COMPILER=${cuda_toolkit_root}/bin/nvcc")
else()
  list(APPEND FEATURE_OPTIONS -DCMAKE_DISABLE_FIND_PACKAGE_CUDAToolkit=ON)
endif()

vcpkg_cmake_configure(
  SOURCE_PATH "${SOURCE_PATH}"
  OPTIONS
    ${FEATURE_OPTIONS}
    -DCONVOY_INSTALL=ON
    -DCONVOY_BUILD_TESTS=OFF
    -DCONVOY_BUILD_EXAMPLES=OFF
    -DCONVOY_BUILD_BENCHMARKS=OFF)
vcpkg_cmake_install()
vcpkg_cmake_config_fixup(CONFIG_PATH share/cmake/convoy)

file(REMOVE_RECURSE "${CURRENT_PACKAGES_DIR}/debug")
# vcpkg keeps a port's programs in tools/<port>; a bin/ folder fails its checks for static triplets.
file(MAKE_DIRECTORY "${CURRENT_PACKAGES_DIR}/tools/${PORT}")
file(RENAME "${CURRENT_PACKAGES_DIR}/bin/convoy-launch"
            "${CURRENT_PACKAGES_DIR}/tools/${PORT}/convoy-launch")
if(EXISTS "${CURRENT_PACKAGES_DIR}/bin/convoy-keygen")  # the zmq feature's CURVE key maker
  file(RENAME "${CURRENT_PACKAGES_DIR}/bin/convoy-keygen"
              "${CURRENT_PACKAGES_DIR}/tools/${PORT}/convoy-keygen")
endif()
file(REMOVE_RECURSE "${CURRENT_PACKAGES_DIR}/bin")

file(INSTALL "${CMAKE_CURRENT_LIST_DIR}/usage" DESTINATION "${CURRENT_PACKAGES_DIR}/share/${PORT}")
vcpkg_install_copyright(FILE_LIST "${SOURCE_PATH}/LICENSE")
