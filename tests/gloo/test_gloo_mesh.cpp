// connect_mesh against a stranger on loopback: Gloo's pair takes the first connection to its port,
// so a process that connects to the ranks' new ports before their peers do takes a pair. The
// ranks must find it, drop it and connect again, and then sum correctly. Three ranks as threads
// of this process, each with its own Gloo device; the stranger connects once to every listening
// socket of this process that was not there before (as `ss -ltn` shows them to anyone).
// A second case: a stranger that connects and closes at once, on every port, at every attempt.
#include <arpa/inet.h>
#include <doctest/doctest.h>
#include <gloo/allreduce.h>
#include <gloo/math.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <convoy/comm/gloo/mesh.hpp>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <mutex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "processes.hpp"

namespace {

using namespace std::chrono_literals;

// What std::clog receives while it lives, from any thread: the ranks log at once.
class LockedClog : public std::streambuf {
 public:
  LockedClog() : old_(std::clog.rdbuf(this)) {}
  LockedClog(LockedClog const&) = delete;
  LockedClog& operator=(LockedClog const&) = delete;
  ~LockedClog() override { std::clog.rdbuf(old_); }
  std::string text() {
    std::lock_guard lock(mutex_);
    return text_;
  }

 protected:
  std::streamsize xsputn(char const* s, std::streamsize n) override {
    std::lock_guard lock(mutex_);
    text_.append(s, static_cast<std::size_t>(n));
    return n;
  }
  int_type overflow(int_type c) override {
    if (traits_type::eq_int_type(c, traits_type::eof())) return traits_type::not_eof(c);
    char const ch = traits_type::to_char_type(c);
    xsputn(&ch, 1);
    return c;
  }

 private:
  std::mutex mutex_;
  std::string text_;
  std::streambuf* old_;
};

// The inodes of this process's sockets.
std::set<std::string> own_socket_inodes() {
  std::set<std::string> inodes;
  for (auto const& fd : std::filesystem::directory_iterator("/proc/self/fd")) {
    std::error_code ec;
    auto const target = std::filesystem::read_symlink(fd.path(), ec).string();
    if (!ec && target.starts_with("socket:[")) inodes.insert(target.substr(8, target.size() - 9));
  }
  return inodes;
}

// The ports this process listens on at 127.0.0.1 over TCP.
std::set<int> own_listening_ports() {
  auto const mine = own_socket_inodes();
  std::set<int> ports;
  std::ifstream table("/proc/net/tcp");
  std::string line;
  std::getline(table, line);  // the header
  while (std::getline(table, line)) {
    std::istringstream row(line);
    std::string slot, local, remote, state, queues, timer, retransmits, uid, timeout, inode;
    row >> slot >> local >> remote >> state >> queues >> timer >> retransmits >> uid >> timeout >>
        inode;
    if (state != "0A" || !local.starts_with("0100007F:") || !mine.contains(inode)) continue;
    ports.insert(std::stoi(local.substr(9), nullptr, 16));
  }
  return ports;
}

// Connects once to every port this process comes to listen on (but `spared`) while `scanning`,
// and says nothing; keeps the connections until it is destroyed.
struct Stranger {
  std::set<int> seen;
  std::vector<int> connections;
  std::atomic<int> made{0};
  std::atomic<bool> scanning{true};
  std::thread thread;

  bool close_at_once = false;  // connects and closes, as a port scanner does

  explicit Stranger(std::set<int> spared, bool closing = false)
      : seen(std::move(spared)), close_at_once(closing) {
    thread = std::thread([this] {
      while (scanning) {
        for (int port : own_listening_ports()) {
          if (!seen.insert(port).second) continue;
          int const fd = ::socket(AF_INET, SOCK_STREAM, 0);
          ::sockaddr_in to{};
          to.sin_family = AF_INET;
          to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
          to.sin_port = htons(static_cast<std::uint16_t>(port));
          if (::connect(fd, reinterpret_cast<::sockaddr*>(&to), sizeof to) == 0) {
            ++made;
            if (close_at_once) {
              ::close(fd);
            } else {
              connections.push_back(fd);
            }
          } else {
            ::close(fd);
          }
        }
        std::this_thread::sleep_for(2ms);
      }
    });
  }
  void stop() {
    scanning = false;
    if (thread.joinable()) thread.join();
  }
  ~Stranger() {
    stop();
    for (int fd : connections) ::close(fd);
  }
};

// Three loopback addresses for the ranks, and the ports a stranger must leave alone: those this
// process listens on already, and the ranks' own (rank 0's serves the rendezvous).
std::vector<std::string> three_addresses() {
  return {convoy::testing::free_loopback_address(), convoy::testing::free_loopback_address(),
          convoy::testing::free_loopback_address()};
}
std::set<int> spared_ports(std::vector<std::string> const& addresses) {
  auto spared = own_listening_ports();
  for (auto const& a : addresses) spared.insert(std::stoi(a.substr(a.rfind(':') + 1)));
  return spared;
}

// What each rank of a mesh got: the sum of the ranks' rank + 1 over it, or its error.
struct MeshRun {
  std::vector<float> sums;
  std::vector<std::string> errors;
  std::chrono::steady_clock::duration took{};
};

// The ranks at `addresses` as threads: each connects the mesh (Gloo's timeout `gloo_timeout`),
// then sums its rank + 1 with the others. Rank 2 comes once `stranger` has made 4 connections
// (ranks 0 and 1 listening meanwhile), 10 s at most, and stops it first when `stop_stranger`.
MeshRun run_mesh(std::vector<std::string> const& addresses, Stranger& stranger, bool stop_stranger,
                 std::chrono::milliseconds gloo_timeout) {
  auto const size = addresses.size();
  MeshRun run{.sums = std::vector<float>(size, 0.0F), .errors = std::vector<std::string>(size)};
  std::vector<std::thread> ranks;
  auto const start = std::chrono::steady_clock::now();
  for (std::size_t rank = 0; rank < size; ++rank) {
    ranks.emplace_back([&, rank] {
      try {
        if (rank == 2) {
          auto const until = std::chrono::steady_clock::now() + 10s;
          while (stranger.made < 4 && std::chrono::steady_clock::now() < until)
            std::this_thread::sleep_for(10ms);
          if (stop_stranger) stranger.stop();
        }
        auto context = convoy::comm::gloo_fabric::connect_mesh(
            addresses, static_cast<int>(rank), {.host = "127.0.0.1", .interface = ""}, gloo_timeout,
            {.timeout = 25s, .retry = 100ms, .run = "test-run"});
        float value = static_cast<float>(rank + 1);
        ::gloo::AllreduceOptions opts(context);
        opts.setOutput(&value, 1);
        opts.setReduceFunction(static_cast<void (*)(void*, void const*, void const*, std::size_t)>(
            &::gloo::sum<float>));
        opts.setTimeout(5000ms);
        ::gloo::allreduce(opts);
        run.sums[rank] = value;
      } catch (std::exception const& e) {
        run.errors[rank] = e.what();
      }
    });
  }
  for (auto& t : ranks) t.join();
  run.took = std::chrono::steady_clock::now() - start;
  stranger.stop();
  return run;
}

}  // namespace

TEST_CASE("a stranger that connects first to the Gloo pairs' ports is dropped; the mesh forms") {
  auto const addresses = three_addresses();
  LockedClog log;
  // It came once: rank 2 stops it before it comes, so the next attempt's ports are the ranks' own.
  Stranger stranger(spared_ports(addresses));
  auto const run = run_mesh(addresses, stranger, /*stop_stranger=*/true, 5000ms);
  std::string const text = log.text();
  INFO(text);
  for (std::size_t rank = 0; rank < addresses.size(); ++rank) {
    CAPTURE(rank);
    CHECK(run.errors[rank] == "");
    CHECK(run.sums[rank] == 6.0F);
  }
  CHECK(!stranger.connections.empty());
  // The pair of ranks 0 and 1 was taken: both of them name it, and all connect again.
  CHECK(text.find("rank 0 found Gloo connections taken by a process not of this run: the one "
                  "with rank 1") != std::string::npos);
  CHECK(text.find("rank 1 found Gloo connections taken by a process not of this run: the one "
                  "with rank 0") != std::string::npos);
  CHECK(text.find("connects again on fresh ports (attempt 2 of 3)") != std::string::npos);
  CHECK(run.took < 20s);
  // Every connection the stranger made has been closed by the ranks: it reads the end of each.
  for (int fd : stranger.connections) {
    timeval wait{.tv_sec = 2, .tv_usec = 0};
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &wait, sizeof wait);
    char byte = 0;
    CHECK(::recv(fd, &byte, 1, 0) <= 0);
  }
}

TEST_CASE(
    "a scanner that connects to every new port and closes at once: the ranks agree, in time") {
  // Whichever pair it hits first fails: a pair that was to connect out fails on the scanner's
  // close before it does, and pokes its peer's port so that the peer's pair does not wait out
  // Gloo's 30 s. At every attempt the scanner races the ranks, so the mesh forms at a later one or
  // every rank stops with the same error; never a wait for the timeout, never ranks that disagree.
  auto const addresses = three_addresses();
  LockedClog log;
  Stranger scanner(spared_ports(addresses), /*closing=*/true);
  auto const run = run_mesh(addresses, scanner, /*stop_stranger=*/false, 30000ms);
  std::string const text = log.text();
  INFO(text);
  CHECK(scanner.made >= 4);
  CHECK(text.find("found Gloo connections taken by a process not of this run") != text.npos);
  bool const formed = run.errors[0].empty();
  for (std::size_t rank = 0; rank < addresses.size(); ++rank) {
    CAPTURE(rank);
    auto const& error = run.errors[rank];
    CAPTURE(error);
    CHECK(error.empty() == formed);
    if (formed) {
      CHECK(run.sums[rank] == 6.0F);
    } else {
      CHECK(error.find("a process not of this run took a connection first") != error.npos);
    }
  }
  CHECK(run.took < 20s);  // Gloo's timeout is 30 s: nothing waited for it
}
