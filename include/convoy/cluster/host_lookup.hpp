// Looking up a host name before connecting to it or binding it: ZeroMQ resolves a peer's name in
// the background and retries forever, so a misspelled or unknown host would cost the whole connect
// timeout and end in a message about silence instead of the name; and it binds no names at all.
#pragma once

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <chrono>
#include <string>
#include <string_view>
#include <thread>

#include "../core/error.hpp"
#include "address.hpp"

namespace convoy {

/// Looks `host` up as this machine's resolver does, for IPv4 (the family ZeroMQ's TCP uses
/// here). Returns getaddrinfo's status (0: found) and, when found, writes the first address in
/// dotted form to `numeric` where given. Blocks as long as the resolver takes.
inline int lookup_ipv4(std::string const& host, std::string* numeric = nullptr) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  int status = ::getaddrinfo(host.c_str(), nullptr, &hints, &found);
  if (status == 0 && found == nullptr) status = EAI_NONAME;
  if (status == 0 && numeric != nullptr) {
    char text[INET_ADDRSTRLEN] = {};
    ::inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(found->ai_addr)->sin_addr, text,
                sizeof text);
    *numeric = text;
  }
  if (found != nullptr) ::freeaddrinfo(found);
  return status;
}

/// "tcp://host:port" for a ZeroMQ socket to bind at `address` ("host:port", as in a cluster spec).
/// ZeroMQ binds numeric addresses and interface names only (a host name is taken for an interface
/// and fails with "No such device"), so a name is looked up here, IPv4, and its first address
/// bound; "localhost" is 127.0.0.1, and numeric, bracketed and "*" hosts pass as they are. Throws
/// ClusterError when the name does not resolve: "convoy: <what> '<address>' names host '<host>',
/// which does not resolve here (<resolver's words>); <fix>".
inline std::string zmq_bind_endpoint(std::string_view address, std::string_view what,
                                     std::string_view fix = "fix the name service or the address") {
  auto const colon = address.rfind(':');
  if (colon == std::string_view::npos) {
    throw ClusterError("convoy: " + std::string(what) + " '" + std::string(address) +
                       "' has no port");
  }
  std::string host(address.substr(0, colon));
  if (host == "localhost") host = "127.0.0.1";
  if (!host.empty() && host.front() != '[' && host != "*") {
    std::string numeric;
    if (int const status = lookup_ipv4(host, &numeric); status != 0) {
      throw ClusterError("convoy: " + std::string(what) + " '" + std::string(address) +
                         "' names host '" + host + "', which does not resolve here (" +
                         ::gai_strerror(status) + "); " + std::string(fix));
    }
    host = numeric;
  }
  return "tcp://" + host + ":" + std::string(address.substr(colon + 1));
}

/// Waits until the host of `address` ("host:port", as in a cluster spec) resolves to an IPv4
/// address, the family the connections that follow use. Numeric and bracketed hosts return at
/// once. A name the resolver says does not exist (no such name in the hosts file or the DNS, or
/// no IPv4 address for it) throws ClusterError at once, naming `who` (the peer: "ps:0"), the
/// address and the resolver's words. A temporary failure (no name server answered) is asked again
/// every 500 ms until `deadline`, then throws ClusterError the same way. Blocks up to `deadline`.
inline void wait_until_resolves(std::string_view who, std::string_view address,
                                std::chrono::steady_clock::time_point deadline) {
  Address const parsed = parse_address(address, who);
  if (address.front() == '[') return;
  for (;;) {
    int const status = lookup_ipv4(parsed.host);
    if (status == 0) return;
    std::string const problem = "convoy: " + std::string(who) + "'s address '" +
                                std::string(address) + "' names host '" + parsed.host +
                                "', which does not resolve here (" + ::gai_strerror(status) + ")";
    if (status != EAI_AGAIN) {
      throw ClusterError(problem +
                         "; check the host in the cluster spec (TF_CONFIG, the "
                         "launcher's variables or the flags)");
    }
    if (std::chrono::steady_clock::now() + std::chrono::milliseconds(500) > deadline) {
      throw ClusterError(problem +
                         ", and the resolver still failed when the connect timeout "
                         "ran out; is a name server reachable from here?");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
  }
}

}  // namespace convoy
