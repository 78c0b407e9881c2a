// convoy-keygen NAME: writes a CurveZMQ key pair for comm::ZmqPs, NAME.key (the secret key with
// its public key, mode 0600) and NAME.pub (the public key), and never overwrites either. Exit
// status: 0 written, 1 not written (a file exists, no CURVE in libzmq, cannot write), 2 usage.
// docs/parameter_server.md#security says which file goes to which task.
#include <convoy/comm/zmq_ps/curve_keys.hpp>
#include <iostream>
#include <string_view>

namespace {

constexpr std::string_view usage =
    "usage: convoy-keygen NAME\n"
    "  writes NAME.key (secret key, mode 0600: keep it on its task's machine) and NAME.pub\n"
    "  (public key: the ps tasks' goes to every worker, each worker's to the ps tasks'\n"
    "  authorized_keys directory); existing files are never overwritten\n";

}  // namespace

int main(int argc, char** argv) {
  if (argc == 2 && (std::string_view(argv[1]) == "-h" || std::string_view(argv[1]) == "--help")) {
    std::cout << usage;
    return 0;
  }
  if (argc != 2 || std::string_view(argv[1]).empty() || argv[1][0] == '-') {
    std::cerr << usage;
    return 2;
  }
  try {
    auto const pair = convoy::comm::zmq_ps::write_curve_key_pair(argv[1]);
    std::cout << "convoy-keygen: wrote " << argv[1] << ".key and " << argv[1] << ".pub (public key "
              << pair.public_key << ")\n";
    return 0;
  } catch (std::exception const& e) {
    std::cerr << "convoy-keygen: " << e.what() << "\n";
    return 1;
  }
}
