// CurveZMQ key files for the parameter server: making a key pair (what convoy-keygen writes),
// reading a secret key file, a public key file, or a directory of authorized public keys. Keys are
// ZeroMQ's Z85 text (40 characters for 32 bytes), in ZeroMQ's zcert layout:
//   public-key = "<40 characters>"       (NAME.pub, and NAME.key too)
//   secret-key = "<40 characters>"       (NAME.key only, mode 0600)
// Lines starting with '#' are comments. Every error names the file and what to do.
#pragma once

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zmq.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include "../../core/error.hpp"

namespace convoy::comm::zmq_ps {

/// A CURVE key pair in Z85 text.
struct CurveKeyPair {
  std::string public_key;
  std::string secret_key;
};

/// Throws Error when this process's libzmq was built without CURVE (libsodium).
inline void require_curve() {
  if (!::zmq_has("curve")) {
    throw Error(
        "convoy: CURVE security was asked for, but this libzmq was built without it "
        "(zmq_has(\"curve\") is false); install a libzmq built with libsodium (Debian's "
        "libzmq5 is), or run without ZmqPs::security on loopback");
  }
}

/// Whether `text` is a Z85-encoded 32-byte key.
inline bool valid_z85_key(std::string_view text) {
  if (text.size() != 40) return false;
  std::string const copy(text);
  std::array<std::uint8_t, 32> bytes{};
  return ::zmq_z85_decode(bytes.data(), copy.c_str()) != nullptr;
}

/// A fresh key pair. Throws Error without CURVE.
inline CurveKeyPair make_curve_key_pair() {
  require_curve();
  char pub[41] = {}, sec[41] = {};
  if (::zmq_curve_keypair(pub, sec) != 0) {
    throw Error(std::string("convoy: zmq_curve_keypair failed: ") + ::zmq_strerror(::zmq_errno()));
  }
  return {pub, sec};
}

namespace detail {

// The value of every `name = "value"` line of `file`, in order.
inline std::vector<std::string> key_lines(std::filesystem::path const& file,
                                          std::string_view name) {
  std::ifstream in(file);
  if (!in) {
    throw Error("convoy: cannot read the key file '" + file.string() +
                "'; make one with convoy-keygen NAME, or fix the path");
  }
  std::vector<std::string> out;
  std::string line;
  auto trim = [](std::string_view s) {
    auto const b = s.find_first_not_of(" \t\r");
    if (b == std::string_view::npos) return std::string_view{};
    return s.substr(b, s.find_last_not_of(" \t\r") - b + 1);
  };
  for (int number = 1; std::getline(in, line); ++number) {
    auto const text = trim(line);
    if (text.empty() || text.front() == '#') continue;
    auto const eq = text.find('=');
    if (eq == std::string_view::npos) {
      throw Error("convoy: line " + std::to_string(number) + " of the key file '" + file.string() +
                  "' is not 'public-key = \"...\"' or 'secret-key = \"...\"'");
    }
    if (trim(text.substr(0, eq)) != name) continue;
    auto value = trim(text.substr(eq + 1));
    if (value.size() >= 2 && value.front() == '"' && value.back() == '"') {
      value = value.substr(1, value.size() - 2);
    }
    if (!valid_z85_key(value)) {
      throw Error("convoy: the " + std::string(name) + " on line " + std::to_string(number) +
                  " of '" + file.string() + "' is not a CURVE key (40 Z85 characters; it has " +
                  std::to_string(value.size()) + "); make the file again with convoy-keygen");
    }
    out.emplace_back(value);
  }
  return out;
}

}  // namespace detail

/// Reads a public key file (NAME.pub, or NAME.key: its public-key line). Throws Error naming the
/// file when it is missing, has no public-key line, or the key is malformed.
inline std::string load_public_key(std::filesystem::path const& file) {
  auto const keys = detail::key_lines(file, "public-key");
  if (keys.size() != 1) {
    throw Error("convoy: the key file '" + file.string() + "' holds " +
                std::to_string(keys.size()) + " public-key lines, expected one");
  }
  return keys.front();
}

/// Reads a secret key file (NAME.key). Refuses one that the group or others may read (a secret
/// key anyone can read authenticates anyone): chmod 600 it. Checks that its public-key line, when
/// present, belongs to its secret key.
inline CurveKeyPair load_secret_key(std::filesystem::path const& file) {
  require_curve();
  auto const secrets = detail::key_lines(file, "secret-key");
  if (secrets.size() != 1) {
    throw Error("convoy: the key file '" + file.string() + "' holds " +
                std::to_string(secrets.size()) + " secret-key lines, expected one" +
                (secrets.empty() ? " (is it a .pub file? give the .key file)" : ""));
  }
  struct stat st {};
  if (::stat(file.c_str(), &st) == 0 && (st.st_mode & 077) != 0) {
    throw Error("convoy: the secret key file '" + file.string() +
                "' may be read by other users; run chmod 600 on it (and make a new key pair if "
                "others may have read it)");
  }
  char pub[41] = {};
  if (::zmq_curve_public(pub, secrets.front().c_str()) != 0) {
    throw Error("convoy: cannot derive the public key of '" + file.string() + "'");
  }
  auto const publics = detail::key_lines(file, "public-key");
  if (!publics.empty() && publics.front() != pub) {
    throw Error("convoy: the public-key line of '" + file.string() +
                "' does not belong to its secret key; make the pair again with convoy-keygen");
  }
  return {pub, secrets.front()};
}

/// The authorized workers' public keys: a file of public-key lines, or a directory whose *.pub
/// files each hold one. Throws Error when there is none, naming the place.
inline std::vector<std::string> load_authorized_keys(std::filesystem::path const& place) {
  std::vector<std::string> keys;
  std::error_code ec;
  if (std::filesystem::is_directory(place, ec)) {
    std::vector<std::filesystem::path> files;
    for (auto const& entry : std::filesystem::directory_iterator(place)) {
      if (entry.path().extension() == ".pub") files.push_back(entry.path());
    }
    std::sort(files.begin(), files.end());
    for (auto const& f : files) keys.push_back(load_public_key(f));
  } else {
    keys = detail::key_lines(place, "public-key");
  }
  if (keys.empty()) {
    throw Error("convoy: '" + place.string() +
                "' holds no authorized public key; copy the workers' NAME.pub files there (a "
                "directory) or their public-key lines (a file)");
  }
  std::sort(keys.begin(), keys.end());
  keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
  return keys;
}

/// Writes a fresh key pair to `stem`.key (secret and public, mode 0600) and `stem`.pub (public).
/// Refuses to overwrite either file. Returns the pair. Throws Error naming the file at fault.
inline CurveKeyPair write_curve_key_pair(std::filesystem::path const& stem) {
  auto const secret_file = std::filesystem::path(stem.string() + ".key");
  auto const public_file = std::filesystem::path(stem.string() + ".pub");
  for (auto const& f : {secret_file, public_file}) {
    if (std::filesystem::exists(f)) {
      throw Error("convoy: '" + f.string() +
                  "' exists; it is not overwritten (remove it first, "
                  "or choose another name)");
    }
  }
  auto const pair = make_curve_key_pair();
  auto write = [](std::filesystem::path const& f, std::string const& text, mode_t mode) {
    // Created with its final mode, so the secret is never readable by others, even briefly.
    int const fd = ::open(f.c_str(), O_WRONLY | O_CREAT | O_EXCL, mode);
    if (fd < 0) throw Error("convoy: cannot create '" + f.string() + "'");
    bool const ok = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
    ::close(fd);
    if (!ok) throw Error("convoy: cannot write '" + f.string() + "'");
  };
  write(secret_file,
        "# convoy CURVE secret key: keep it on this task's machine, readable by its user only\n"
        "public-key = \"" +
            pair.public_key + "\"\nsecret-key = \"" + pair.secret_key + "\"\n",
        0600);
  write(public_file,
        "# convoy CURVE public key: give it to the peers that must know this task\n"
        "public-key = \"" +
            pair.public_key + "\"\n",
        0644);
  return pair;
}

}  // namespace convoy::comm::zmq_ps
