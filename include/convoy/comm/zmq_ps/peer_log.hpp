// Log lines about peers that send what a shard refuses, or do not read its answers: at most one
// line per peer and interval. A peer sending junk as fast as it can would otherwise write a line
// per message (20,000 lines for 40 KB); here the first of an interval is written and the rest are
// counted, then summed up in that peer's next line or by flush().
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <ostream>
#include <string>
#include <string_view>
#include <utility>

namespace convoy::comm::zmq_ps {

class PeerLog {
 public:
  using clock = std::chrono::steady_clock;

  /// `who` starts every line ("ps:0"); null `log`: nothing is written, only counted.
  PeerLog(std::ostream* log, std::string who,
          std::chrono::milliseconds interval = std::chrono::seconds(10))
      : log_(log), who_(std::move(who)), interval_(interval) {}

  /// One event of `kind` ("refused message(s)", plural for the summary) from `peer` (its
  /// address): written now as `what`, or counted when a line of that kind about this peer was
  /// written less than an interval ago.
  void note(std::string const& peer, std::string_view kind, std::string const& what) {
    if (!log_) return;
    auto const now = clock::now();
    Key key{peer, std::string(kind)};
    if (peers_.size() >= most_peers && !peers_.contains(key)) flush();
    auto [it, fresh] = peers_.try_emplace(std::move(key), Entry{now, 0});
    auto& entry = it->second;
    if (!fresh && now - entry.last < interval_) {
      ++entry.held;
      return;
    }
    summary(it->first, entry);
    entry.last = now;
    *log_ << "convoy: " << who_ << " " << what << " (from " << peer << ")" << std::endl;
  }

  /// Writes what is held back, and forgets every peer.
  void flush() {
    for (auto& [key, entry] : peers_) summary(key, entry);
    peers_.clear();
  }

 private:
  using Key = std::pair<std::string, std::string>;  ///< the peer, the kind of event
  struct Entry {
    clock::time_point last;
    std::int64_t held = 0;
  };
  // A peer per address: on loopback all of them share one, so this bounds memory, not fairness.
  static constexpr std::size_t most_peers = 1024;

  void summary(Key const& key, Entry& entry) {
    if (entry.held == 0) return;
    *log_ << "convoy: " << who_ << ": " << entry.held << " more " << key.second << " from "
          << key.first << " since the last line about them, not logged one by one" << std::endl;
    entry.held = 0;
  }

  std::ostream* log_;
  std::string who_;
  std::chrono::milliseconds interval_;
  std::map<Key, Entry> peers_;
};

}  // namespace convoy::comm::zmq_ps
