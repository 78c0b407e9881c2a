// BucketFabric: the collective engine's fabric over the in-process bucket exchange: every replica
// of the run is a thread of this process. It runs comm::Nccl's engine (comm/buckets/
// collective_engine.hpp) on the host, with the same bucket plan and the same step, so the tests
// check that engine where there is no GPU. A Comm policy that names it:
//
//   struct Collective {  // comm::Nccl's knobs that matter here
//     using policy_category = convoy::communication_tag;
//     static constexpr std::string_view name = "Collective";
//     static constexpr bool collective = true;
//     std::size_t bucket_bytes = std::size_t{25} << 20;
//     std::chrono::milliseconds timeout{std::chrono::seconds(30)};
//     template <class M, class P, class S>
//     using engine = convoy::comm::CollectiveEngine<M, P, S, convoy::comm::in_process::BucketFabric>;
//   };
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "../buckets/bucket_plan.hpp"
#include "bucket_exchange.hpp"

namespace convoy::comm::in_process {

class BucketFabric {
 public:
  /// One port per replica of `group`, over an exchange whose waits end after `comm.timeout`.
  template <class Comm, class Group>
  BucketFabric(Comm const& comm, Group const& group, BucketPlan const& plan)
      : exchange_(std::make_unique<BucketExchange>(group.size(), plan.size(), comm.timeout)) {
    for (std::size_t r = 0; r < group.size(); ++r) ports_.push_back(exchange_->port(r));
  }

  BucketExchange::Port& exchange(std::size_t replica) { return ports_.at(replica); }
  std::size_t world_size() const { return ports_.size(); }
  std::size_t first_replica() const { return 0; }
  std::string describe() const {
    return "the in-process bucket exchange among " + std::to_string(ports_.size()) + " threads";
  }
  void abort(std::string const& why) { exchange_->abort(why); }

 private:
  std::unique_ptr<BucketExchange> exchange_;  // the ports point at it
  std::vector<BucketExchange::Port> ports_;
};

}  // namespace convoy::comm::in_process
