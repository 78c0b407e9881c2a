// Gloo's error text as convoy passes it on: no "[file:line] " prefix, and ports as listened on,
// whatever order the linked Gloo prints them in.
#include <arpa/inet.h>
#include <doctest/doctest.h>
#include <gloo/transport/tcp/address.h>

#include <convoy/comm/gloo/gloo_message.hpp>
#include <string>

using convoy::comm::gloo_fabric::readable_gloo_message;

TEST_CASE("a byte-swapped port is written as the port listened on, the source prefix dropped") {
  std::string const raw =
      "[/build/gloo/transport/tcp/pair.cc:589] Read error [127.0.0.1]:17836: Connection reset by "
      "peer";
  CHECK(readable_gloo_message(raw, true) == "Read error 127.0.0.1:44101: Connection reset by peer");
  CHECK(readable_gloo_message(raw, false) ==
        "Read error 127.0.0.1:17836: Connection reset by peer");
  CHECK(readable_gloo_message("connect [::1]:17836 and [10.0.0.2]:1", true) ==
        "connect [::1]:44101 and 10.0.0.2:256");
  CHECK(readable_gloo_message("Timed out waiting 30000ms for recv operation to complete", true) ==
        "Timed out waiting 30000ms for recv operation to complete");
}

TEST_CASE("the linked Gloo's own address text comes out with the port it was given") {
  for (std::uint16_t port : {44101, 2725, 80}) {
    CAPTURE(port);
    ::sockaddr_in in{};
    in.sin_family = AF_INET;
    in.sin_port = htons(port);
    in.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    auto const text =
        ::gloo::transport::tcp::Address(reinterpret_cast<::sockaddr const*>(&in), sizeof in).str();
    CHECK(readable_gloo_message("Read error " + text) ==
          "Read error 127.0.0.1:" + std::to_string(port));
  }
}
