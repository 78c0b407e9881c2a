// Files convoy writes and reads: checks that a directory or file can be written before a run
// that ends by writing it, atomic replacement (write, sync, rename), and opening for reading with
// messages that name the file. No archive: weights, checkpoints and logs all build on it.
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <filesystem>
#include <fstream>
#include <ostream>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>

#include "../core/error.hpp"
#include "weights_format.hpp"

namespace convoy::io {

namespace detail {

// Proves `dir` accepts new files by creating and removing one; `where` starts the message.
inline void probe_directory(std::filesystem::path const& dir, std::string const& where) {
  static std::atomic<unsigned> probes{0};
  auto const probe = dir / (".convoy-probe-" + std::to_string(::getpid()) + "-" +
                            std::to_string(probes.fetch_add(1)));
  int const fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOCTTY, 0600);
  if (fd < 0) {
    int const err = errno;
    throw Error(where + " is not writable: cannot create a file in it (" +
                std::generic_category().message(err) + ")");
  }
  ::close(fd);
  if (::unlink(probe.c_str()) != 0) {
    int const err = errno;
    throw Error(where + " is not usable: cannot remove the file '" + probe.string() +
                "' created to test it (" + std::generic_category().message(err) + ")");
  }
}

}  // namespace detail

/// Makes sure files can be written into `dir` before work that ends by writing there: creates it
/// (with its parents) when missing, then creates and removes a probe file in it. `what` names the
/// directory's role in messages ("checkpoint directory"). Blocks on file I/O; safe to call from
/// several threads. Throws convoy::Error naming `what`, the path and the system's reason when it
/// cannot be created, is not a directory, or refuses the probe file.
inline void require_writable_directory(std::filesystem::path const& dir, std::string_view what) {
  namespace fs = std::filesystem;
  std::string const where = "convoy: " + std::string(what) + " '" + dir.string() + "'";
  std::error_code ec;
  auto const type = fs::status(dir, ec).type();
  if (type == fs::file_type::not_found) {
    fs::create_directories(dir, ec);
    if (ec) throw Error(where + " cannot be created: " + ec.message());
  } else if (ec) {
    throw Error(where + " cannot be examined: " + ec.message());
  } else if (type != fs::file_type::directory) {
    throw Error(where + " is not a directory");
  }
  detail::probe_directory(dir, where);
}

/// Makes sure `file` can be written (replaced atomically, as save_weights does) before work that
/// ends by writing it: it is not a directory or other special file, its directory exists and
/// accepts new files, and when it exists it opens for writing (nothing is changed). With
/// `weights_format`, its extension must also name a weights format (format_for). `what` names the
/// file's role in messages ("weights file"). Blocks on file I/O. Throws convoy::Error naming
/// `what`, the path and the reason.
inline void require_writable_file(std::filesystem::path const& file, std::string_view what,
                                  bool weights_format = false) {
  namespace fs = std::filesystem;
  std::string const where = "convoy: " + std::string(what) + " '" + file.string() + "'";
  std::error_code ec;
  auto const type = fs::status(file, ec).type();
  if (type == fs::file_type::directory ||
      (type == fs::file_type::not_found && !file.has_filename())) {
    throw Error(where + " is a directory, not a file");
  }
  if (type != fs::file_type::not_found && type != fs::file_type::regular) {
    throw Error(where + (ec ? " cannot be examined: " + ec.message() : " is not a regular file"));
  }
  if (weights_format) static_cast<void>(format_for(file));

  auto const dir = file.parent_path().empty() ? fs::path(".") : file.parent_path();
  std::string const dir_where = where + ": its directory '" + dir.string() + "'";
  auto const dir_type = fs::status(dir, ec).type();
  if (dir_type == fs::file_type::not_found) throw Error(dir_where + " does not exist");
  if (dir_type != fs::file_type::directory) {
    throw Error(dir_where + (ec ? " cannot be examined: " + ec.message() : " is not a directory"));
  }
  detail::probe_directory(dir, dir_where);

  if (type == fs::file_type::regular) {
    int const fd = ::open(file.c_str(), O_WRONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
    if (fd < 0) {
      int const err = errno;
      throw Error(where + " is not writable: " + std::generic_category().message(err));
    }
    ::close(fd);
  }
}

namespace detail {

inline std::string error_text(int err) { return std::generic_category().message(err); }

// fsync through a second descriptor: std::ofstream exposes none, and Linux flushes the file's
// pages whichever descriptor asks.
inline void sync_file(std::filesystem::path const& path) {
  int const fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    int const err = errno;
    throw Error("convoy: cannot open '" + path.string() + "' to sync it: " + error_text(err));
  }
  int const rc = ::fsync(fd);
  int const err = errno;
  ::close(fd);
  if (rc != 0) throw Error("convoy: cannot sync '" + path.string() + "': " + error_text(err));
}

// Makes a rename durable. Best effort: the new file is already complete and in place, and some
// file systems refuse fsync on a directory, so a failure here must not fail the save.
inline void sync_directory(std::filesystem::path const& dir) {
  int const fd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  static_cast<void>(::fsync(fd));
  ::close(fd);
}

// Writes `target` through `write(std::ostream&)` so that readers see the old file or the new one,
// never a mixture: write `<target>.tmp-<pid>`, flush, fsync, rename over the target, fsync the
// directory. The temporary file is removed on any failure. Two threads of one process must not
// write the same target at once (they would share the temporary name).
template <class Write>
void write_atomically(std::filesystem::path const& target, Write&& write) {
  auto temp = target;
  temp += ".tmp-" + std::to_string(::getpid());
  try {
    std::ofstream out(temp, std::ios::binary | std::ios::trunc);
    if (!out) {
      int const err = errno;
      throw Error("convoy: cannot open '" + temp.string() + "' to write '" + target.string() +
                  "': " + error_text(err));
    }
    std::forward<Write>(write)(static_cast<std::ostream&>(out));
    out.flush();
    out.close();
    if (!out) {
      int const err = errno;
      throw Error("convoy: writing '" + temp.string() + "' failed: " + error_text(err));
    }
    sync_file(temp);
    std::error_code ec;
    std::filesystem::rename(temp, target, ec);
    if (ec) {
      throw Error("convoy: cannot rename '" + temp.string() + "' to '" + target.string() +
                  "': " + ec.message());
    }
  } catch (...) {
    std::error_code ignored;
    std::filesystem::remove(temp, ignored);
    throw;
  }
  sync_directory(target.parent_path());
}

// Opens `path` for reading or throws `Exception` naming it: "does not exist" when absent, a
// refusal when it is not a regular file (a FIFO would block the open, a device may never end),
// else the system's reason.
template <class Exception>
std::ifstream open_for_reading(std::filesystem::path const& path, std::string_view what) {
  std::string const where = "convoy: " + std::string(what) + " '" + path.string() + "'";
  std::error_code ec;
  auto const type = std::filesystem::status(path, ec).type();
  if (ec.value() == ELOOP) {
    throw Exception(where + " is a symbolic link loop: following it leads back to itself");
  }
  if (type == std::filesystem::file_type::not_found) {
    std::error_code link_ec;
    if (std::filesystem::is_symlink(path, link_ec)) {
      throw Exception(where + " is a symbolic link to '" +
                      std::filesystem::read_symlink(path, link_ec).string() +
                      "', which does not exist");
    }
    throw Exception(where + " does not exist");
  }
  if (type == std::filesystem::file_type::directory) {
    throw Exception(where + " is a directory, not a file");
  }
  if (!ec && type != std::filesystem::file_type::regular) {
    throw Exception(where + " is not a regular file (a FIFO, socket or device is not read)");
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    int const err = errno;
    throw Exception("convoy: cannot open " + std::string(what) + " '" + path.string() +
                    "': " + error_text(err));
  }
  return in;
}

}  // namespace detail

}  // namespace convoy::io
