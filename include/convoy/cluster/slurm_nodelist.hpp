// Slurm's compressed host lists ("node[01-04,07]", "rack[1-2]-n[01-02]") and task counts
// ("2(x3),1"), expanded; and the node Slurm's distribution gives each task.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "../core/error.hpp"
#include "detail/text.hpp"

namespace convoy::slurm {

/// Largest expansion accepted; a longer list is far more likely a typo ("[1-1000000]") than a job.
inline constexpr std::size_t max_nodes = 100000;

namespace detail {

using convoy::detail::quote;

[[noreturn]] inline void bad_list(std::string_view list, std::string_view source,
                                  std::string const& problem) {
  throw ClusterError("convoy: " + std::string(source) + " is " + quote(list) +
                     ", which is not a Slurm node list: " + problem);
}

/// The names one bracket group stands for: "01-03,07" -> 01 02 03 07, zero padding kept.
inline std::vector<std::string> expand_group(std::string_view group, std::string_view list,
                                             std::string_view source) {
  if (group.empty()) bad_list(list, source, "empty brackets \"[]\"");
  std::vector<std::string> out;
  std::size_t start = 0;
  while (start <= group.size()) {
    auto const comma = group.find(',', start);
    auto const item =
        group.substr(start, comma == std::string_view::npos ? group.npos : comma - start);
    auto const dash = item.find('-');
    auto const lo_text = item.substr(0, dash);
    auto const hi_text = dash == std::string_view::npos ? lo_text : item.substr(dash + 1);
    auto const lo = convoy::detail::parse_count(lo_text);
    auto const hi = convoy::detail::parse_count(hi_text);
    if (!lo || !hi)
      bad_list(list, source,
               "range " + quote(item) + " in [" + std::string(group) +
                   "] is not N or N-M with decimal numbers");
    if (*lo > *hi) bad_list(list, source, "range " + quote(item) + " runs backwards");
    if (static_cast<std::size_t>(*hi - *lo) >= max_nodes)
      bad_list(
          list, source,
          "range " + quote(item) + " names more than " + std::to_string(max_nodes) + " nodes");
    for (int n = *lo; n <= *hi; ++n) {
      std::string digits = std::to_string(n);
      // Slurm pads to the width of the low end: "[08-10]" is 08 09 10, "[8-10]" is 8 9 10.
      if (digits.size() < lo_text.size()) digits.insert(0, lo_text.size() - digits.size(), '0');
      out.push_back(std::move(digits));
    }
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  return out;
}

}  // namespace detail

/// Every host name a compressed Slurm node list names, in Slurm's order: "node[01-02,07],login1"
/// -> node01 node02 node07 login1; several bracket groups in one name multiply out, the first
/// varying slowest ("rack[1-2]-n[01-02]" -> rack1-n01 rack1-n02 rack2-n01 rack2-n02). Zero padding
/// follows the low end of each range. Throws ClusterError quoting `list` and naming `source` (the
/// variable it came from) when it does not parse.
inline std::vector<std::string> expand_nodelist(std::string_view list,
                                                std::string_view source = "SLURM_JOB_NODELIST") {
  using convoy::detail::quote;
  if (list.empty()) detail::bad_list(list, source, "it is empty");
  std::vector<std::string> out;
  std::size_t pos = 0;
  while (pos <= list.size()) {
    // One name: literal text and bracket groups, up to a comma outside brackets.
    // `names` holds every expansion of the text read so far; each bracket group multiplies it.
    std::vector<std::string> names{""};
    std::size_t const name_start = pos;
    while (pos < list.size() && list[pos] != ',') {
      char const c = list[pos];
      if (c == '[') {
        auto const close = list.find_first_of("[]", pos + 1);
        if (close == std::string_view::npos || list[close] != ']')
          detail::bad_list(list, source, "'[' at offset " + std::to_string(pos) + " is not closed");
        auto const values =
            detail::expand_group(list.substr(pos + 1, close - pos - 1), list, source);
        std::vector<std::string> product;
        product.reserve(names.size() * values.size());
        for (auto const& prefix : names)
          for (auto const& value : values) product.push_back(prefix + value);
        if (product.size() > max_nodes)
          detail::bad_list(list, source,
                           "it names more than " + std::to_string(max_nodes) + " nodes");
        names = std::move(product);
        pos = close + 1;
      } else if (c == ']') {
        detail::bad_list(list, source, "']' at offset " + std::to_string(pos) + " has no '['");
      } else if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
        detail::bad_list(list, source, "it has a space at offset " + std::to_string(pos));
      } else {
        for (auto& name : names) name += c;
        ++pos;
      }
    }
    if (pos == name_start)
      detail::bad_list(list, source, "an empty name at offset " + std::to_string(pos));
    out.insert(out.end(), names.begin(), names.end());
    if (out.size() > max_nodes)
      detail::bad_list(list, source, "it names more than " + std::to_string(max_nodes) + " nodes");
    if (pos == list.size()) break;
    ++pos;  // the comma
    if (pos == list.size()) detail::bad_list(list, source, "it ends with a comma");
  }
  return out;
}

/// The task count of every node from Slurm's compressed form: "2(x3),1" -> 2 2 2 1. Throws
/// ClusterError quoting `text` and naming `source` when an item is not N or N(xM) with N, M >= 1.
inline std::vector<int> expand_tasks_per_node(std::string_view text,
                                              std::string_view source = "SLURM_TASKS_PER_NODE") {
  using convoy::detail::parse_count;
  using convoy::detail::quote;
  std::vector<int> out;
  std::size_t start = 0;
  while (true) {
    auto const comma = text.find(',', start);
    auto const item =
        text.substr(start, comma == std::string_view::npos ? text.npos : comma - start);
    auto fail = [&] {
      throw ClusterError("convoy: " + std::string(source) + " is " + quote(text) + ": item " +
                         quote(item) + " is not N or N(xM) with N and M at least 1");
    };
    std::string_view count_text = item;
    int repeat = 1;
    if (auto const open = item.find('('); open != std::string_view::npos) {
      count_text = item.substr(0, open);
      auto const tail = item.substr(open);  // "(xM)"
      if (tail.size() < 4 || tail.substr(0, 2) != "(x" || tail.back() != ')') fail();
      auto const times = parse_count(tail.substr(2, tail.size() - 3));
      if (!times || *times < 1) fail();
      repeat = *times;
    }
    auto const count = parse_count(count_text);
    if (!count || *count < 1) fail();
    if (out.size() + static_cast<std::size_t>(repeat) > max_nodes) fail();
    out.insert(out.end(), static_cast<std::size_t>(repeat), *count);
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  return out;
}

/// The node index (into `tasks_per_node`) of every task, as Slurm lays tasks out: "block" fills
/// each node in turn, "cyclic" deals one task to each node with room in turn.
inline std::vector<std::size_t> task_nodes(std::vector<int> const& tasks_per_node, bool cyclic) {
  std::vector<std::size_t> out;
  if (!cyclic) {
    for (std::size_t n = 0; n < tasks_per_node.size(); ++n)
      out.insert(out.end(), static_cast<std::size_t>(tasks_per_node[n]), n);
    return out;
  }
  std::vector<int> left = tasks_per_node;
  bool dealt = true;
  while (dealt) {
    dealt = false;
    for (std::size_t n = 0; n < left.size(); ++n) {
      if (left[n] > 0) {
        --left[n];
        out.push_back(n);
        dealt = true;
      }
    }
  }
  return out;
}

/// `ntasks` spread over `nodes` nodes in blocks, as Slurm does without a task count per node: the
/// first ntasks % nodes nodes get one task more.
inline std::vector<int> even_tasks_per_node(int ntasks, std::size_t nodes) {
  std::vector<int> out(nodes, 0);
  if (nodes == 0) return out;
  int const n = static_cast<int>(nodes);
  for (int i = 0; i < n; ++i)
    out[static_cast<std::size_t>(i)] = ntasks / n + (i < ntasks % n ? 1 : 0);
  return out;
}

}  // namespace convoy::slurm
