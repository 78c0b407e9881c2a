// CURVE for a collective run's bootstrap: the rendezvous, the liveness board and the regroup, the
// ZeroMQ traffic by which the processes meet, beat and agree (not the collective library's own
// connections: Gloo's TCP and NCCL's stay as they are, docs/gloo.md). Every process of the run is
// given the same key file, CONVOY_BOOTSTRAP_KEY (a NAME.key of convoy-keygen, one for the run):
// each serves under it and connects under it, and a connection is taken only from a peer that
// proves it holds that secret. One key for the run, not a pair for each task, because every
// process both serves (its regroup endpoint, the board when it leads) and connects, and a task
// started again must be let in by whichever process leads then. Unset: plaintext, as before, with
// the run's identity alone telling one run from another (run_identity.hpp).
#pragma once

#include <cstdint>
#include <cstdlib>
#include <exception>
#include <iostream>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>
#include <zmq.hpp>

#include "../../core/error.hpp"
#include "../detail/zmq_poll.hpp"
#include "../zmq_ps/curve_keys.hpp"
#include "../zmq_ps/security.hpp"

namespace convoy::comm::bootstrap {

/// The variable that names the run's bootstrap key file.
inline constexpr char const* run_key_variable = "CONVOY_BOOTSTRAP_KEY";

using RunKey = zmq_ps::CurveKeyPair;

/// The run's key: the pair in the file CONVOY_BOOTSTRAP_KEY names, or nothing (plaintext) when it
/// is unset or empty. The file is read once for each value the variable takes. Throws Error naming
/// the variable and what is wrong with the file (missing, malformed, readable by others) or with
/// this libzmq (built without CURVE).
inline std::optional<RunKey> run_key() {
  char const* path = std::getenv(run_key_variable);
  if (path == nullptr || *path == '\0') return std::nullopt;
  static std::mutex mutex;
  static std::string read_from;
  static RunKey read;
  std::lock_guard const lock(mutex);
  if (read_from != path) {
    try {
      read = zmq_ps::load_secret_key(path);
    } catch (Error const& e) {
      throw Error(std::string("convoy: ") + run_key_variable + " names the run's bootstrap key, " +
                  "but: " + e.what());
    }
    read_from = path;
  }
  return read;
}

/// For a log line: how this process's bootstrap talks.
inline std::string run_key_mode(std::optional<RunKey> const& key) {
  return key ? std::string("CURVE under ") + run_key_variable : std::string("plaintext");
}

/// Sets `socket`, which will bind, to serve under `key` (nothing without one). The socket's
/// context must hold a KeyGate first, which checks every peer's key.
inline void serve_under(zmq::socket_t& socket, std::optional<RunKey> const& key) {
  if (!key) return;
  socket.set(zmq::sockopt::curve_server, true);
  socket.set(zmq::sockopt::curve_secretkey, key->secret_key);
  socket.set(zmq::sockopt::zap_domain, "convoy-bootstrap");
}

/// Sets `socket`, which will connect, to talk under `key` (nothing without one): the server's key
/// and its own are the run's.
inline void connect_under(zmq::socket_t& socket, std::optional<RunKey> const& key) {
  if (!key) return;
  socket.set(zmq::sockopt::curve_serverkey, key->public_key);
  socket.set(zmq::sockopt::curve_publickey, key->public_key);
  socket.set(zmq::sockopt::curve_secretkey, key->secret_key);
}

/// The ZAP handler (ZeroMQ RFC 27) of one context's serving sockets under the run's key: a thread
/// that lets in a peer whose CURVE key is the run's and refuses every other, logging each refusal
/// with the peer's address (ZeroMQ asks it at each handshake; a plaintext peer fails before, on
/// the mechanism). Construct it before the socket that serves binds, destroy it after that socket
/// closes. Should its socket fail, it says so and stops answering: every later handshake then
/// waits unanswered, and nobody gets in.
class KeyGate {
 public:
  KeyGate(zmq::context_t& context, RunKey const& key, std::string who,
          std::ostream* log = &std::clog)
      : handler_(context, std::vector<std::string>{key.public_key}, std::move(who), log) {
    thread_ = std::jthread([this, log](std::stop_token stop) {
      try {
        while (!stop.stop_requested()) {
          zmq::pollitem_t item{handler_.socket().handle(), 0, ZMQ_POLLIN, 0};
          comm::detail::poll(&item, 1, std::chrono::milliseconds(50));
          if ((item.revents & ZMQ_POLLIN) != 0) handler_.handle_one();
        }
      } catch (std::exception const& e) {  // an exception out of a thread would end the process
        if (log) *log << "convoy: the key check stopped (" << e.what() << ")" << std::endl;
      }
    });
  }
  KeyGate(KeyGate const&) = delete;
  KeyGate& operator=(KeyGate const&) = delete;

 private:
  zmq_ps::ZapHandler handler_;
  std::jthread thread_;  // last: stopped before the handler's socket closes
};

/// What to add to an error of a process that heard nothing from another: under a key, that a
/// process given another key file, or none, can neither reach it nor be reached.
inline std::string run_key_hint(std::optional<RunKey> const& key) {
  if (!key) return {};
  return std::string(" (this process talks under the run's key, ") + run_key_variable +
         ": a process given another key file, or none, can neither reach it nor be reached by it)";
}

}  // namespace convoy::comm::bootstrap
