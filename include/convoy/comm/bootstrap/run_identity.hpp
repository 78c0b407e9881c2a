// Which run a collective's bootstrap or liveness message belongs to. Every process of a run
// computes the same identity from what they share: the run's token, CONVOY_RUN_TOKEN
// (tools/convoy-launch draws one for each run and gives it to every task, a task started again
// included; a run started by hand or by another launcher sets the same value in every task's
// environment), and the cluster. Without a token the cluster alone still tells one run from
// another (the processes of another run, a process left over from an earlier run on the same
// ports), but not from a peer that knows the cluster's addresses (docs/gloo.md, "Who may join a
// run").
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>

#include "../../cluster/cluster.hpp"
#include "../../core/detail/fnv1a.hpp"
#include "../../core/error.hpp"

namespace convoy::comm::bootstrap {

/// The identity of the run `cluster` belongs to, given its token (null or empty: none).
inline std::string run_identity(Cluster const& cluster, char const* token) {
  convoy::detail::Fnv1a h;
  auto mix = [&](std::string_view bytes) {
    h.add(bytes).add("\xff");  // a separator no text holds: "ab","c" is not "a","bc"
  };
  mix(token ? token : "");
  for (auto const& [job, addresses] : cluster.jobs) {
    mix(job);
    for (auto const& address : addresses) mix(address);
  }
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(h.value()));
  return std::string(token && *token ? "token:" : "cluster:") + hex;
}

/// The identity of the run `cluster` belongs to, with the token of this process's environment.
inline std::string run_identity(Cluster const& cluster) {
  return run_identity(cluster, std::getenv("CONVOY_RUN_TOKEN"));
}

/// The identity of generation `generation` of the run `run`'s group (how many times survivors
/// regrouped): the run's own at generation 0, "<run>/g<generation>" after. Bootstrap messages of
/// a group carry it, so a process of an older group is told apart from a stranger.
inline std::string group_identity(std::string const& run, std::uint64_t generation) {
  return generation == 0 ? run : run + "/g" + std::to_string(generation);
}
/// The run of a group_identity(): itself at generation 0.
inline std::string_view run_of(std::string_view identity) {
  auto const at = identity.rfind("/g");
  return at == std::string_view::npos ? identity : identity.substr(0, at);
}
/// The generation of a group_identity(); nothing for a suffix that is not one ("/g", "/gx", a
/// leading zero, more than 18 digits).
inline std::optional<std::uint64_t> generation_of(std::string_view identity) {
  auto const at = identity.rfind("/g");
  if (at == std::string_view::npos) return 0;
  auto const digits = identity.substr(at + 2);
  if (digits.empty() || digits.size() > 18 || (digits.size() > 1 && digits[0] == '0') ||
      digits.find_first_not_of("0123456789") != std::string_view::npos)
    return std::nullopt;
  std::uint64_t g = 0;
  for (char c : digits) g = g * 10 + static_cast<std::uint64_t>(c - '0');
  return g;
}
/// True when `theirs` is the identity of an earlier generation of `ours`'s run: a process the
/// group went on without. Both must be well-formed group identities of the same run.
inline bool earlier_generation(std::string_view theirs, std::string_view ours) {
  auto const t = generation_of(theirs), o = generation_of(ours);
  return t && o && *t < *o && run_of(theirs) == run_of(ours);
}

/// The error of a process the others went on without: it came after they re-formed (to the
/// agreement, or to the meeting of a group they have since agreed to leave behind), or found none
/// of them and is no quorum alone (it was stopped, or cut off, past their timeout, while they
/// regrouped). A group that still trains can take it in as one started again
/// (join_group), which is what comm::Gloo tries before it gives up.
struct LeftBehind : Error {
  using Error::Error;
};

}  // namespace convoy::comm::bootstrap
