// TF_CONFIG, TensorFlow's JSON cluster description:
//   {"cluster": {"chief": [...], "worker": [...], "ps": [...]}, "task": {"type": "worker", "index":
//   0}}
// parsed with the RapidJSON that cereal ships, and checked key by key.
#pragma once

#include <algorithm>
#include <cctype>
#include <cstddef>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

// cereal's JSON archive configures RapidJSON (assertions throw) before including it; going through
// it keeps one configuration in a program that also uses cereal's JSON archives.
#include <cereal/archives/json.hpp>
#if __has_include(<cereal/external/rapidjson/error/en.h>)
#include <cereal/external/rapidjson/error/en.h>
#else
#include <rapidjson/error/en.h>
#endif

#include "../core/detail/json_nesting.hpp"
#include "../core/error.hpp"
#include "cluster.hpp"
#include "detail/text.hpp"
#include "environment.hpp"

namespace convoy::resolvers {

namespace detail {
#ifdef CEREAL_RAPIDJSON_NAMESPACE
namespace json = CEREAL_RAPIDJSON_NAMESPACE;  // cereal's bundled copy
#else
namespace json = RAPIDJSON_NAMESPACE;  // a distribution's cereal that uses the system RapidJSON
#endif
using convoy::detail::did_you_mean;
using convoy::detail::quote;

/// The JSON type of `v`, for messages.
inline std::string json_type(json::Value const& v) {
  if (v.IsNull()) return "null";
  if (v.IsBool()) return "a boolean";
  if (v.IsNumber()) return "a number";
  if (v.IsString()) return "a string";
  if (v.IsArray()) return "an array";
  return "an object";
}

/// Throws on a key given twice in `object`, naming `where`. RapidJSON keeps both and a lookup finds
/// the first, so a second "worker" list would be dropped without a word.
inline void check_unique_keys(json::Value const& object, std::string const& where) {
  std::set<std::string> keys;
  for (auto it = object.MemberBegin(); it != object.MemberEnd(); ++it) {
    std::string key(it->name.GetString(), it->name.GetStringLength());
    if (!keys.insert(key).second)
      throw ClusterError("convoy: TF_CONFIG: key " + quote(key) + " appears twice in " + where);
  }
}

/// `text` parsed as JSON. Throws ClusterError for nesting deeper than any cluster description, or
/// for text that is not JSON, quoting the offset, line, column and what is written there.
inline void parse_json(json::Document& doc, std::string_view text) {
  if (!convoy::detail::JsonNesting{}.feed(text.data(), text.size())) {
    throw ClusterError("convoy: TF_CONFIG nests arrays and objects more than " +
                       std::to_string(convoy::detail::json_max_depth) +
                       " levels deep; a cluster description needs 3, so it is damaged or not one");
  }
  doc.Parse<json::kParseNoFlags>(text.data(), text.size());
  if (!doc.HasParseError()) return;
  std::size_t const offset = doc.GetErrorOffset();
  std::size_t line = 1, column = 1;
  for (std::size_t i = 0; i < offset && i < text.size(); ++i) {
    column = text[i] == '\n' ? 1 : column + 1;
    if (text[i] == '\n') ++line;
  }
  std::string problem = json::GetParseError_En(doc.GetParseError());
  if (!problem.empty() && problem.back() == '.') problem.pop_back();
  if (!problem.empty()) problem[0] = static_cast<char>(std::tolower(problem[0]));
  std::string_view here = text.substr(std::min(offset, text.size()));
  std::string shown(here.substr(0, 24));
  if (here.size() > 24) shown += "...";
  throw ClusterError("convoy: TF_CONFIG is not valid JSON: " + problem + " at offset " +
                     std::to_string(offset) + " (line " + std::to_string(line) + ", column " +
                     std::to_string(column) + "), where it reads " +
                     (here.empty() ? std::string("the end") : quote(shown)));
}

/// Throws unless `top` is an object of "cluster" and "task" (TensorFlow's "environment" and
/// "rpc_layer" allowed), each key once.
inline void check_top_level(json::Value const& top) {
  if (!top.IsObject())
    throw ClusterError("convoy: TF_CONFIG is " + json_type(top) +
                       ", not an object with \"cluster\" and \"task\"");
  check_unique_keys(top, "the top level");
  std::vector<std::string> const top_keys{"cluster", "task"};
  for (auto it = top.MemberBegin(); it != top.MemberEnd(); ++it) {
    std::string const key = it->name.GetString();
    // TensorFlow itself defines "environment" (e.g. "cloud") and "rpc_layer" (e.g. "grpc"), and
    // schedulers that write TF_CONFIG for TensorFlow set them; they say nothing convoy uses.
    if (key == "cluster" || key == "task" || key == "environment" || key == "rpc_layer") continue;
    throw ClusterError("convoy: TF_CONFIG has unknown top-level key " + quote(key) +
                       did_you_mean(key, top_keys) + " (the keys are \"cluster\" and \"task\")");
  }
  if (!top.HasMember("cluster"))
    throw ClusterError(
        "convoy: TF_CONFIG has no \"cluster\"; write {\"cluster\": {\"worker\": "
        "[\"host:port\", ...]}, \"task\": {\"type\": \"worker\", \"index\": 0}}");
  if (!top.HasMember("task"))
    throw ClusterError(
        "convoy: TF_CONFIG has no \"task\"; add \"task\": {\"type\": \"worker\", "
        "\"index\": 0} naming this process");
}

/// The addresses of job `name`: a non-empty array of "host:port" strings.
inline std::vector<std::string> parse_job(std::string const& name, json::Value const& list) {
  std::string const where = "TF_CONFIG cluster." + name;
  if (!list.IsArray())
    throw ClusterError("convoy: " + where + " is " + json_type(list) +
                       ", not an array of \"host:port\" strings");
  if (list.Empty())
    throw ClusterError("convoy: " + where + " is [], an empty job; leave the job out instead");
  std::vector<std::string> addresses;
  for (json::SizeType i = 0; i < list.Size(); ++i) {
    std::string const task = where + "[" + std::to_string(i) + "]";
    if (!list[i].IsString())
      throw ClusterError("convoy: " + task + " is " + json_type(list[i]) +
                         ", not a \"host:port\" string");
    std::string address(list[i].GetString(), list[i].GetStringLength());
    parse_address(address, task);
    addresses.push_back(std::move(address));
  }
  return addresses;
}

/// "cluster": an object of known job names, each with its addresses, into `c.jobs`.
inline void parse_jobs(json::Value const& cluster, Cluster& c) {
  if (!cluster.IsObject())
    throw ClusterError("convoy: TF_CONFIG \"cluster\" is " + json_type(cluster) +
                       ", not an object of jobs");
  check_unique_keys(cluster, "\"cluster\"");
  if (cluster.MemberCount() == 0)
    throw ClusterError("convoy: TF_CONFIG \"cluster\" is {}, with no jobs");
  auto const& job_names = cluster_job_names();
  for (auto it = cluster.MemberBegin(); it != cluster.MemberEnd(); ++it) {
    std::string const name = it->name.GetString();
    if (std::find(job_names.begin(), job_names.end(), name) == job_names.end()) {
      throw ClusterError("convoy: TF_CONFIG cluster has unknown job " + quote(name) +
                         did_you_mean(name, job_names) + " (the jobs are " +
                         convoy::detail::join(job_names, ", ") + ")");
    }
    c.jobs[name] = parse_job(name, it->value);
  }
}

/// "index": an integer in [0, size) of job `type`. 1.0 is a double to RapidJSON; TensorFlow
/// writes integers, so anything else is a mistake.
inline int parse_index(json::Value const& index, std::string const& type, std::size_t size) {
  if (!index.IsInt64()) {
    std::string shown = index.IsString() ? quote(index.GetString()) : json_type(index);
    if (index.IsDouble()) shown = std::to_string(index.GetDouble());
    throw ClusterError("convoy: TF_CONFIG task.index is " + shown + ", not an integer");
  }
  if (index.GetInt64() < 0 || static_cast<std::size_t>(index.GetInt64()) >= size) {
    throw ClusterError("convoy: TF_CONFIG task.index " + std::to_string(index.GetInt64()) +
                       " is outside job " + quote(type) + ", which has " + std::to_string(size) +
                       " task(s)");
  }
  return static_cast<int>(index.GetInt64());
}

/// "task": exactly "type", one of `c`'s jobs, into `c.job`; and "index", an integer within it.
inline void parse_task(json::Value const& task, Cluster& c) {
  if (!task.IsObject())
    throw ClusterError("convoy: TF_CONFIG \"task\" is " + json_type(task) +
                       ", not an object like {\"type\": \"worker\", \"index\": 0}");
  check_unique_keys(task, "\"task\"");
  std::vector<std::string> const task_keys{"type", "index"};
  for (auto it = task.MemberBegin(); it != task.MemberEnd(); ++it) {
    std::string const key = it->name.GetString();
    if (key != "type" && key != "index")
      throw ClusterError("convoy: TF_CONFIG task has unknown key " + quote(key) +
                         did_you_mean(key, task_keys) + " (the keys are \"type\" and \"index\")");
  }
  if (!task.HasMember("type") || !task["type"].IsString())
    throw ClusterError("convoy: TF_CONFIG task needs \"type\", a string naming its job");
  std::string const type = task["type"].GetString();
  if (c.jobs.find(type) == c.jobs.end()) {
    std::vector<std::string> present;
    for (auto const& entry : c.jobs) present.push_back(entry.first);
    throw ClusterError("convoy: TF_CONFIG task.type " + quote(type) +
                       " is not a job of the cluster (" + convoy::detail::join(present, ", ") +
                       ")" + did_you_mean(type, present));
  }
  c.job = type;
  if (!task.HasMember("index"))
    throw ClusterError("convoy: TF_CONFIG task needs \"index\", this task's place in job " +
                       quote(type));
  c.index = parse_index(task["index"], type, c.jobs[type].size());
}

}  // namespace detail

/// The cluster a TF_CONFIG text describes (source "TF_CONFIG"). Throws ClusterError, quoting the
/// offending part, unless: it is valid JSON (else the offset, line and column are quoted); the top
/// level is an object with keys "cluster" and "task" ("environment" and "rpc_layer", which
/// TensorFlow also defines, are ignored); "cluster" maps known job names to non-empty arrays of
/// "host:port" strings, all distinct, with at most one chief; "task" has exactly "type" (one of
/// the cluster's jobs) and "index" (an integer within that job). A misspelt key or job name is
/// answered with the closest right one.
inline Cluster parse_tf_config(std::string_view text) {
  detail::json::Document doc;
  detail::parse_json(doc, text);
  detail::json::Value const& top = doc;  // const iterators: RapidJSON's mixed != is ambiguous
  detail::check_top_level(top);
  Cluster c;
  c.source = "TF_CONFIG";
  detail::parse_jobs(top["cluster"], c);
  detail::parse_task(top["task"], c);
  c.validate();  // the checks across jobs: an address given twice, more than one chief
  return c;
}

/// parse_tf_config() of the TF_CONFIG variable, or nullopt when it is unset or empty.
inline std::optional<Cluster> from_tf_config(Environment const& env) {
  auto const text = env.get("TF_CONFIG");
  if (!text) return std::nullopt;
  return parse_tf_config(*text);
}

}  // namespace convoy::resolvers
