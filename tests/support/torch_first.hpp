// LibTorch, included before doctest by the tests of convoy::torch: Debian's LibTorch logs through
// glog, whose CHECK macros would replace doctest's, so they are taken back here.
#pragma once

#include <convoy/torch/model.hpp>

#undef CHECK
#undef CHECK_EQ
#undef CHECK_NE
#undef CHECK_LT
#undef CHECK_LE
#undef CHECK_GT
#undef CHECK_GE
