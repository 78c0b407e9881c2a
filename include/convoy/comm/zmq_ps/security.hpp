// Who may talk to a parameter-server shard: the security options of comm::ZmqPs (CurveZMQ key
// files, or plaintext), the rule that a shard binding a non-loopback address needs keys unless
// plaintext is chosen explicitly, and the ZAP handler (ZeroMQ RFC 27) by which a CURVE shard
// accepts only its authorized workers' public keys.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iterator>
#include <optional>
#include <ostream>
#include <string>
#include <utility>
#include <vector>
#include <zmq.hpp>
#include <zmq_addon.hpp>

#include "../../cluster/address.hpp"
#include "../../core/error.hpp"
#include "curve_keys.hpp"

namespace convoy::comm::zmq_ps {

/// CurveZMQ key files (made by convoy-keygen; see docs/parameter_server.md#security). Every task
/// may be given all four paths: a ps task reads the server's, a worker the others. Empty paths
/// everywhere: plaintext, which a ps task accepts only on a loopback address unless
/// `allow_plaintext` is true.
struct Security {
  std::filesystem::path server_secret_key{};  ///< ps: the ps tasks' NAME.key (one pair for all)
  std::filesystem::path server_public_key{};  ///< worker: the ps tasks' NAME.pub
  std::filesystem::path client_secret_key{};  ///< worker: its own NAME.key
  /// ps: the workers allowed in: a directory of NAME.pub files, or a file of public-key lines.
  std::filesystem::path authorized_keys{};
  /// Serve plaintext on a non-loopback address: anyone who reaches the port may push gradients,
  /// read the weights and have the shard write checkpoint parts.
  bool allow_plaintext = false;

  bool curve() const {
    return !server_secret_key.empty() || !server_public_key.empty() || !client_secret_key.empty() ||
           !authorized_keys.empty();
  }
};

/// What a shard runs with, read from the files.
struct ServerSecurity {
  std::optional<CurveKeyPair> keys;     ///< empty: plaintext
  std::vector<std::string> authorized;  ///< Z85 public keys
  bool allow_plaintext = false;

  /// The mode, as the shard's first log line says it.
  std::string mode() const {
    if (keys) return "CURVE on, " + std::to_string(authorized.size()) + " authorized worker key(s)";
    return allow_plaintext ? "plaintext (opted in)" : "plaintext (loopback only)";
  }
};

/// What a worker connects with, read from the files.
struct ClientSecurity {
  std::string server_public_key;  ///< Z85
  CurveKeyPair keys;
};

using convoy::is_loopback;  // cluster/address.hpp

/// The host of a "tcp://host:port" endpoint.
inline std::string endpoint_host(std::string const& endpoint) {
  auto const start = endpoint.find("://");
  auto const from = start == std::string::npos ? 0 : start + 3;
  auto const colon = endpoint.rfind(':');
  return endpoint.substr(
      from, colon == std::string::npos || colon < from ? std::string::npos : colon - from);
}

/// Refuses a plaintext shard on a non-loopback endpoint unless plaintext was opted into. Called
/// before anything is bound. `who`: "ps:0".
inline void check_bind(std::string const& who, std::string const& endpoint,
                       ServerSecurity const& security) {
  if (security.keys || security.allow_plaintext || is_loopback(endpoint_host(endpoint))) return;
  throw Error("convoy: " + who + " would serve plaintext on " + endpoint +
              ", which is not a loopback address: anyone who reaches it could push gradients and "
              "read the weights; give it CURVE keys (ZmqPs::security.server_secret_key and "
              ".authorized_keys, made with convoy-keygen), or set "
              "ZmqPs::security.allow_plaintext = true on a network you trust");
}

/// Reads what a ps task needs. Throws Error naming a missing option or a bad file.
inline ServerSecurity server_security(Security const& s) {
  ServerSecurity out;
  out.allow_plaintext = s.allow_plaintext;
  if (s.server_secret_key.empty() && s.authorized_keys.empty()) return out;
  if (s.server_secret_key.empty() || s.authorized_keys.empty()) {
    throw Error(std::string("convoy: a CURVE ps task needs both ZmqPs::security.server_secret_key "
                            "and .authorized_keys; ") +
                (s.server_secret_key.empty() ? "server_secret_key" : "authorized_keys") +
                " is empty");
  }
  out.keys = load_secret_key(s.server_secret_key);
  out.authorized = load_authorized_keys(s.authorized_keys);
  return out;
}

/// Reads what a worker needs; empty when it connects in plaintext. Throws Error naming a missing
/// option or a bad file.
inline std::optional<ClientSecurity> client_security(Security const& s) {
  if (s.server_public_key.empty() && s.client_secret_key.empty()) {
    if (s.curve()) {
      throw Error(
          "convoy: a worker with ZmqPs::security needs .server_public_key (the ps tasks' "
          "NAME.pub) and .client_secret_key (its own NAME.key); both are empty");
    }
    return std::nullopt;
  }
  if (s.server_public_key.empty() || s.client_secret_key.empty()) {
    throw Error(std::string("convoy: a CURVE worker needs both ZmqPs::security.server_public_key "
                            "and .client_secret_key; ") +
                (s.server_public_key.empty() ? "server_public_key" : "client_secret_key") +
                " is empty");
  }
  return ClientSecurity{load_public_key(s.server_public_key), load_secret_key(s.client_secret_key)};
}

/// The ZAP handler of a CURVE shard: a REP socket at inproc://zeromq.zap.01 in the shard's
/// context, which libzmq asks about every CURVE handshake. Bind it before the shard's socket, and
/// answer it from the shard's poll loop (handle_one() when it is readable): a handshake waits for
/// the answer. Not thread-safe: the shard's thread only.
class ZapHandler {
 public:
  ZapHandler(zmq::context_t& context, std::vector<std::string> const& authorized, std::string who,
             std::ostream* log)
      : socket_(context, zmq::socket_type::rep), who_(std::move(who)), log_(log) {
    socket_.set(zmq::sockopt::linger, 0);
    socket_.bind("inproc://zeromq.zap.01");
    for (auto const& k : authorized) {
      std::array<std::uint8_t, 32> bytes{};
      ::zmq_z85_decode(bytes.data(), k.c_str());
      authorized_.push_back(bytes);
    }
  }

  zmq::socket_t& socket() { return socket_; }
  std::int64_t refused() const { return refused_; }

  /// Answers one ZAP request (RFC 27): 200 for an authorized CURVE key, 400 otherwise.
  void handle_one() {
    std::vector<zmq::message_t> request;
    if (!zmq::recv_multipart(socket_, std::back_inserter(request), zmq::recv_flags::dontwait)) {
      return;
    }
    auto text = [&](std::size_t i) { return i < request.size() ? request[i].to_string() : ""; };
    std::string const version = text(0), request_id = text(1), address = text(3),
                      mechanism = text(5);
    bool ok = false;
    std::string key = "(none)";
    if (version == "1.0" && mechanism == "CURVE" && request.size() >= 7 &&
        request[6].size() == 32) {
      std::array<std::uint8_t, 32> bytes{};
      std::memcpy(bytes.data(), request[6].data(), 32);
      char z85[41] = {};
      ::zmq_z85_encode(z85, bytes.data(), 32);
      key = z85;
      ok = std::find(authorized_.begin(), authorized_.end(), bytes) != authorized_.end();
    }
    if (!ok) {
      ++refused_;
      if (log_) {
        *log_ << "convoy: " << who_ << " refused a worker at " << address << ": "
              << (mechanism == "CURVE" ? "key " + key + " is not authorized"
                                       : "it offered " + mechanism + ", not CURVE")
              << std::endl;
      }
    }
    std::array<std::string, 6> const reply{
        version.empty() ? "1.0" : version, request_id,    ok ? "200" : "400",
        ok ? "OK" : "not authorized",      ok ? key : "", ""};
    for (std::size_t i = 0; i < reply.size(); ++i) {
      socket_.send(zmq::buffer(reply[i]),
                   i + 1 == reply.size() ? zmq::send_flags::none : zmq::send_flags::sndmore);
    }
  }

 private:
  zmq::socket_t socket_;
  std::string who_;
  std::ostream* log_;
  std::vector<std::array<std::uint8_t, 32>> authorized_;
  std::int64_t refused_ = 0;
};

}  // namespace convoy::comm::zmq_ps
