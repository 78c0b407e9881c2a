// The command-line flags of TensorFlow's distributed examples: --job_name, --task_index,
// --ps_hosts, --worker_hosts (and --chief_hosts, --evaluator_hosts for the other two jobs).
#pragma once

#include <algorithm>
#include <cctype>
#include <cstddef>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "../core/error.hpp"
#include "cluster.hpp"
#include "detail/text.hpp"

namespace convoy::resolvers {

/// The flags from_flags() reads, without their dashes.
inline std::vector<std::string> const& flag_names() {
  static std::vector<std::string> const names{"job_name",     "task_index",  "ps_hosts",
                                              "worker_hosts", "chief_hosts", "evaluator_hosts"};
  return names;
}

/// The cluster the flags in argv[1..argc) describe, or nullopt when none of them is there. Both
/// `--flag=value` and `--flag value` work; parsing stops at `--`. Other flags are left alone, but
/// a near miss of one of these (`--job-name`, `--taskindex`, `--ps_host`, `-job_name`) throws
/// ClusterError naming the right one, as do a flag given twice or without a value. When they
/// apply, --job_name, --task_index and the host list of the job named are required; the result
/// is validated (source "flags").
inline std::optional<Cluster> from_flags(int argc, char const* const* argv) {
  using convoy::detail::quote;
  auto const& names = flag_names();
  std::map<std::string, std::string> values;
  for (int i = 1; i < argc; ++i) {
    std::string_view const arg = argv[i] == nullptr ? std::string_view() : argv[i];
    if (arg == "--") break;  // the usual end of options: what follows is not ours to read
    if (arg.size() < 2 || arg[0] != '-') continue;
    std::size_t const dashes = arg[1] == '-' ? 2 : 1;
    auto const equals = arg.find('=');
    std::string const name(arg.substr(dashes, equals == arg.npos ? arg.npos : equals - dashes));
    bool const ours = std::find(names.begin(), names.end(), name) != names.end();
    // A misspelt cluster flag would otherwise be skipped as the program's own, and the process
    // would quietly start as a single process and train alone: fail instead.
    if (!ours || dashes == 1) {
      // A near miss: another spelling of ours ('-' for '_', other case) or a small typo.
      std::string normal = name;
      for (char& c : normal) c = c == '-' ? '_' : static_cast<char>(std::tolower(c));
      auto const near =
          ours ? std::optional<std::string>(name) : convoy::detail::closest(normal, names);
      if (near) {
        throw ClusterError("convoy: flag " + quote(arg) + " is not a cluster flag; did you mean " +
                           quote("--" + *near) + "?");
      }
      continue;
    }
    std::string value;
    if (equals != arg.npos) {
      value = std::string(arg.substr(equals + 1));
    } else if (i + 1 < argc && argv[i + 1] != nullptr &&
               !std::string_view(argv[i + 1]).starts_with("--")) {
      value = argv[++i];
    } else {
      throw ClusterError("convoy: flag " + quote(arg) + " has no value; write --" + name +
                         "=VALUE");
    }
    if (value.empty()) throw ClusterError("convoy: flag " + quote(arg) + " has an empty value");
    // absl keeps the last of two; refusing is safer when a launch script appends flags.
    if (auto [it, fresh] = values.emplace(name, value); !fresh) {
      throw ClusterError("convoy: flag --" + name + " is given twice (" + quote(it->second) +
                         " and " + quote(value) + ")");
    }
  }
  if (values.empty()) return std::nullopt;

  auto const job_name = values.find("job_name");
  if (job_name == values.end())
    throw ClusterError(
        "convoy: cluster flags are given but not --job_name (one of chief, "
        "worker, ps, evaluator)");
  auto const& jobs = cluster_job_names();
  std::string const job = job_name->second;
  if (std::find(jobs.begin(), jobs.end(), job) == jobs.end()) {
    throw ClusterError("convoy: --job_name=" + quote(job) + " is not a job" +
                       convoy::detail::did_you_mean(job, jobs) + " (the jobs are " +
                       convoy::detail::join(jobs, ", ") + ")");
  }
  auto const task_index = values.find("task_index");
  if (task_index == values.end())
    throw ClusterError("convoy: --job_name=" + job + " is given but not --task_index");

  Cluster c;
  c.source = "flags";
  c.job = job;
  c.index = convoy::detail::require_count(task_index->second, "--task_index");
  for (auto const& name : jobs) {
    auto const hosts = values.find(name + "_hosts");
    if (hosts == values.end()) continue;
    std::string const flag = "--" + name + "_hosts";
    std::vector<std::string> addresses;
    std::string_view list = hosts->second;
    std::size_t start = 0;
    while (true) {
      auto const comma = list.find(',', start);
      auto const item = list.substr(start, comma == list.npos ? list.npos : comma - start);
      parse_address(item,
                    flag + " entry " + std::to_string(addresses.size()) + " of " + quote(list));
      addresses.emplace_back(item);
      if (comma == list.npos) break;
      start = comma + 1;
    }
    c.jobs[name] = std::move(addresses);
  }
  auto const own = c.jobs.find(job);
  if (own == c.jobs.end())
    throw ClusterError("convoy: --job_name=" + job + " is given but not --" + job + "_hosts");
  if (static_cast<std::size_t>(c.index) >= own->second.size()) {
    throw ClusterError("convoy: --task_index=" + task_index->second + " is outside --" + job +
                       "_hosts, which lists " + std::to_string(own->second.size()) + " host(s)");
  }
  if (c.jobs.count("worker") == 0 && c.jobs.count("chief") == 0)
    throw ClusterError("convoy: --job_name=" + job + " is given but not --worker_hosts");
  c.validate();  // the checks across lists: an address given twice, more than one chief
  return c;
}

}  // namespace convoy::resolvers
