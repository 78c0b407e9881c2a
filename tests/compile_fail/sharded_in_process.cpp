// place::Sharded spreads variables over parameter-server shards, which comm::InProcess has not.
// Written as a user would, with <convoy/convoy.hpp> only (where place::Sharded is declared, not
// defined): the message is the only error, none about the incomplete placement follows it.
// expected-error: which only comm::ZmqPs
// expected-only-error
#include <convoy/convoy.hpp>
#include <utility>

namespace {

using Rejected = convoy::Strategy<convoy::nn::Mlp, convoy::place::Sharded<>,
                                  convoy::comm::InProcess, convoy::sync::Synchronous>;

}  // namespace

int main() {
  Rejected strategy{convoy::nn::Mlp({4, 3})};
  convoy::Trainer<Rejected> trainer{std::move(strategy), convoy::optim::Sgd{0.1f}};
  (void)trainer;
}
