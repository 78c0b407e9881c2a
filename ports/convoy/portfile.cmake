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

# Header-only: nothing differs between debug and release, so configure once.
set(VCPKG_BUILD_TYPE release)

vcpkg_check_features(OUT_FEATURE_OPTIONS FEATURE_OPTIONS
  FEATURES
    cuda CONVOY_ENABLE_CUDA)

vcpkg_cmake_configure(
  SOURCE_PATH "${SOURCE_PATH}"
  OPTIONS
    ${FEATURE_OPTIONS}
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
file(REMOVE_RECURSE "${CURRENT_PACKAGES_DIR}/bin")

file(INSTALL "${CMAKE_CURRENT_LIST_DIR}/usage" DESTINATION "${CURRENT_PACKAGES_DIR}/share/${PORT}")
vcpkg_install_copyright(FILE_LIST "${SOURCE_PATH}/LICENSE")
