// What std::clog receives while a ClogCapture lives, for tests that check a library's log lines.
#pragma once

#include <iostream>
#include <sstream>
#include <streambuf>

namespace convoy::testing {

struct ClogCapture {
  std::ostringstream text;
  std::streambuf* old = std::clog.rdbuf(text.rdbuf());
  ClogCapture() = default;
  ClogCapture(ClogCapture const&) = delete;
  ClogCapture& operator=(ClogCapture const&) = delete;
  ~ClogCapture() { std::clog.rdbuf(old); }
};

}  // namespace convoy::testing
