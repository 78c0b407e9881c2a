// A benchmark's results as records: each is printed as one JSON line on stdout and kept for the
// --json file (the same lines) and the --csv file (the records flattened: one row per item of each
// nested table, with its parent's fields and a "table" column). tools/plot reads either file.
#pragma once

#include <algorithm>
#include <cmath>
#include <concepts>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <functional>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "options.hpp"

namespace convoy::bench {

/// Runs each of `runs` `repeats` times, interleaved so that drifts in the machine's speed hit all
/// alike; the best (largest) figure of each, in order.
inline std::vector<double> best_of(std::vector<std::function<double()>> const& runs, int repeats) {
  std::vector<double> best(runs.size(), 0.0);
  for (int r = 0; r < repeats; ++r) {
    for (std::size_t f = 0; f < runs.size(); ++f) best[f] = std::max(best[f], runs[f]());
  }
  return best;
}

/// A field's value: text, a count, or a measurement (NaN or infinity is written as null / empty).
using Scalar = std::variant<std::string, std::int64_t, double>;

/// One record: fields in the order they were added, then nested tables of records (one level).
struct Record {
  std::vector<std::pair<std::string, Scalar>> fields;
  std::vector<std::pair<std::string, std::vector<Record>>> tables;

  Record& set(std::string key, std::string value) { return put(std::move(key), std::move(value)); }
  Record& set(std::string key, char const* value) { return put(std::move(key), std::string(value)); }
  Record& set(std::string key, double value) { return put(std::move(key), value); }
  template <std::integral Int>
  Record& set(std::string key, Int value) {
    return put(std::move(key), static_cast<std::int64_t>(value));
  }
  /// Appends `row` to the nested table `name`, creating it on first use.
  Record& add(std::string const& name, Record row) {
    for (auto& [key, rows] : tables) {
      if (key == name) {
        rows.push_back(std::move(row));
        return *this;
      }
    }
    tables.push_back({name, {std::move(row)}});
    return *this;
  }

 private:
  Record& put(std::string key, Scalar value) {
    fields.emplace_back(std::move(key), std::move(value));
    return *this;
  }
};

namespace detail {

inline std::string json_string(std::string const& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char escaped[8];
      std::snprintf(escaped, sizeof escaped, "\\u%04x", c);
      out += escaped;
    } else {
      out += c;
    }
  }
  return out + "\"";
}

// Six significant digits: more than any benchmark's run-to-run spread, and short lines.
inline std::string number(double v) {
  if (!std::isfinite(v)) return "";
  char text[32];
  std::snprintf(text, sizeof text, "%.6g", v);
  return text;
}

inline std::string json_value(Scalar const& v) {
  if (auto const* s = std::get_if<std::string>(&v)) return json_string(*s);
  if (auto const* i = std::get_if<std::int64_t>(&v)) return std::to_string(*i);
  auto const text = number(std::get<double>(v));
  return text.empty() ? "null" : text;
}

inline std::string csv_value(Scalar const& v) {
  if (auto const* s = std::get_if<std::string>(&v)) {
    if (s->find_first_of(",\"\n\r") == std::string::npos) return *s;
    std::string out = "\"";
    for (char c : *s) out += c == '"' ? std::string("\"\"") : std::string(1, c);
    return out + "\"";
  }
  if (auto const* i = std::get_if<std::int64_t>(&v)) return std::to_string(*i);
  return number(std::get<double>(v));
}

}  // namespace detail

/// The record as one line of JSON, without the newline.
inline std::string to_json(Record const& r) {
  // Appends piece by piece: GCC 12 warns (-Wrestrict, falsely) on `"," + std::string` chains.
  std::string out = "{";
  auto key = [&out](std::string const& name) {
    if (out.size() > 1) out += ',';
    out += detail::json_string(name);
    out += ':';
  };
  for (auto const& [name, value] : r.fields) {
    key(name);
    out += detail::json_value(value);
  }
  for (auto const& [name, rows] : r.tables) {
    key(name);
    out += '[';
    for (std::size_t i = 0; i < rows.size(); ++i) {
      if (i) out += ',';
      out += to_json(rows[i]);
    }
    out += ']';
  }
  out += '}';
  return out;
}

/// The record's CSV rows: itself when it has no tables, else one row per item of each table, with
/// the parent's fields first, then "table" (the table's name), then the item's fields.
inline std::vector<std::vector<std::pair<std::string, Scalar>>> flatten(Record const& r) {
  std::vector<std::vector<std::pair<std::string, Scalar>>> rows;
  if (r.tables.empty()) rows.push_back(r.fields);
  for (auto const& [name, items] : r.tables) {
    for (auto const& item : items) {
      auto row = r.fields;
      row.emplace_back("table", name);
      row.insert(row.end(), item.fields.begin(), item.fields.end());
      rows.push_back(std::move(row));
    }
  }
  return rows;
}

/// Prints each record as a JSON line as it comes, and writes the --csv and --json files given on
/// the command line when the benchmark ends. Files are opened (and emptied) at construction, so a
/// path that cannot be written fails before a long run: check ok().
class Results {
 public:
  explicit Results(CommandLine const& cli) : program_(cli.program()) {
    open(csv_, cli.csv_path());
    open(json_, cli.json_path());
  }

  /// False when a result file could not be opened (a line on stderr says which).
  bool ok() const { return ok_; }

  /// Prints `r` as a JSON line on stdout now and keeps it for the files.
  void add(Record r) {
    std::printf("%s\n", to_json(r).c_str());
    std::fflush(stdout);
    records_.push_back(std::move(r));
  }

  /// Writes the files. Returns false (and says which on stderr) when one could not be written.
  bool write() {
    if (json_.is_open()) {
      for (auto const& r : records_) json_ << to_json(r) << "\n";
      json_.flush();
      if (!json_) ok_ = report("could not write the JSON file");
    }
    if (csv_.is_open()) write_csv();
    return ok_;
  }

 private:
  void open(std::ofstream& file, std::string const& path) {
    if (path.empty()) return;
    file.open(path, std::ios::trunc);
    if (!file) ok_ = report("cannot write '" + path + "'; give a path in a directory that exists");
  }

  void write_csv() {
    std::vector<std::vector<std::pair<std::string, Scalar>>> rows;
    for (auto const& r : records_) {
      for (auto& row : flatten(r)) rows.push_back(std::move(row));
    }
    std::vector<std::string> header;  // every key, in the order first seen
    for (auto const& row : rows) {
      for (auto const& [key, value] : row) {
        if (std::find(header.begin(), header.end(), key) == header.end()) header.push_back(key);
      }
    }
    for (std::size_t i = 0; i < header.size(); ++i) csv_ << (i ? "," : "") << header[i];
    csv_ << "\n";
    for (auto const& row : rows) {
      for (std::size_t i = 0; i < header.size(); ++i) {
        if (i) csv_ << ",";
        for (auto const& [key, value] : row) {
          if (key == header[i]) {
            csv_ << detail::csv_value(value);
            break;
          }
        }
      }
      csv_ << "\n";
    }
    csv_.flush();
    if (!csv_) ok_ = report("could not write the CSV file");
  }

  bool report(std::string const& what) const {
    std::fprintf(stderr, "%s: %s\n", program_.c_str(), what.c_str());
    return false;
  }

  std::string program_;
  std::ofstream csv_, json_;
  std::vector<Record> records_;
  bool ok_ = true;
};

}  // namespace convoy::bench
