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

namespace detail {
using convoy::detail::quote;

/// Throws for `arg`, a flag that is not one of ours, when it is a near miss of one: another
/// spelling ('-' for '_', another case, one dash) or a small typo. A misspelt cluster flag would
/// otherwise be skipped as the program's own, and the process would quietly start alone.
inline void refuse_near_miss(std::string_view arg, std::string const& name, bool ours) {
  std::string normal = name;
  for (char& c : normal) c = c == '-' ? '_' : static_cast<char>(std::tolower(c));
  auto const near =
      ours ? std::optional<std::string>(name) : convoy::detail::closest(normal, flag_names());
  if (near) {
    throw ClusterError("convoy: flag " + quote(arg) + " is not a cluster flag; did you mean " +
                       quote("--" + *near) + "?");
  }
}

/// Our flags in argv[1..argc), by name without dashes; each once, each with a value.
inline std::map<std::string, std::string> read_flags(int argc, char const* const* argv) {
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
    if (!ours || dashes == 1) {
      refuse_near_miss(arg, name, ours);
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
  return values;
}

/// The value of --job_name: one of the cluster's job names.
inline std::string job_of(std::map<std::string, std::string> const& values) {
  auto const job_name = values.find("job_name");
  if (job_name == values.end())
    throw ClusterError(
        "convoy: cluster flags are given but not --job_name (one of chief, "
        "worker, ps, evaluator)");
  auto const& jobs = cluster_job_names();
  std::string const& job = job_name->second;
  if (std::find(jobs.begin(), jobs.end(), job) == jobs.end()) {
    throw ClusterError("convoy: --job_name=" + quote(job) + " is not a job" +
                       convoy::detail::did_you_mean(job, jobs) + " (the jobs are " +
                       convoy::detail::join(jobs, ", ") + ")");
  }
  return job;
}

/// The addresses of `list`, the comma-separated value of `flag`.
inline std::vector<std::string> host_list(std::string const& flag, std::string_view list) {
  std::vector<std::string> addresses;
  std::size_t start = 0;
  while (true) {
    auto const comma = list.find(',', start);
    auto const item = list.substr(start, comma == list.npos ? list.npos : comma - start);
    parse_address(item, flag + " entry " + std::to_string(addresses.size()) + " of " + quote(list));
    addresses.emplace_back(item);
    if (comma == list.npos) return addresses;
    start = comma + 1;
  }
}

}  // namespace detail

/// The cluster the flags in argv[1..argc) describe, or nullopt when none of them is there. Both
/// `--flag=value` and `--flag value` work; parsing stops at `--`. Other flags are left alone, but
/// a near miss of one of these (`--job-name`, `--taskindex`, `--ps_host`, `-job_name`) throws
/// ClusterError naming the right one, as do a flag given twice or without a value. When they
/// apply, --job_name, --task_index and the host list of the job named are required; the result
/// is validated (source "flags").
inline std::optional<Cluster> from_flags(int argc, char const* const* argv) {
  auto const values = detail::read_flags(argc, argv);
  if (values.empty()) return std::nullopt;
  std::string const job = detail::job_of(values);
  auto const task_index = values.find("task_index");
  if (task_index == values.end())
    throw ClusterError("convoy: --job_name=" + job + " is given but not --task_index");
  Cluster c;
  c.source = "flags";
  c.job = job;
  c.index = convoy::detail::require_count(task_index->second, "--task_index");
  for (auto const& name : cluster_job_names()) {
    auto const hosts = values.find(name + "_hosts");
    if (hosts != values.end())
      c.jobs[name] = detail::host_list("--" + name + "_hosts", hosts->second);
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
