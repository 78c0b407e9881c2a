// convoy's version, as numbers and as a string. The CMake package version is kept equal to it.
#pragma once

#define CONVOY_VERSION_MAJOR 0
#define CONVOY_VERSION_MINOR 1
#define CONVOY_VERSION_PATCH 0

namespace convoy {
inline constexpr char const* version = "0.1.0";
}  // namespace convoy
