// The engine comm::ZmqPs brings. Every task of the cluster builds the same Strategy; what it does
// follows from its role: a ps task serves its shard of the variables (run() serves until every
// worker has said goodbye), a worker trains one replica, pulling weights from and pushing
// gradients to every shard. Counters are shard 0's, which every answer carries, so global_step is
// the cluster's (TensorFlow keeps it on ps 0 too).
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <memory_resource>
#include <optional>
#include <ostream>
#include <random>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "../../cluster.hpp"
#include "../../cluster/host_lookup.hpp"
#include "../../core/concepts.hpp"
#include "../../core/error.hpp"
#include "../../core/snapshot.hpp"
#include "../../io/checkpoint.hpp"
#include "../../optim/optimizer.hpp"
#include "../../place/sharded.hpp"
#include "../../train/step.hpp"
#include "../unpacked_snapshot.hpp"
#include "client.hpp"
#include "security.hpp"
#include "shard.hpp"
#include "shard_cpu.hpp"
#include "slice_batch.hpp"
#include "wire.hpp"

namespace convoy::comm::zmq_ps {

/// The options comm::ZmqPs carries (see there).
struct Options {
  std::optional<Cluster> cluster;
  std::chrono::milliseconds connect_timeout{std::chrono::seconds(60)};
  std::string bind_host;
  std::ostream* log = &std::clog;
  Security security{};
  std::chrono::milliseconds heartbeat{0};
  std::size_t max_connections = 0;
  bool exit_after_serving = true;
  ShardCpu shard_cpu = ShardCpu::automatic;
};

/// "tcp://host:port" for a "host:port" address, with the host replaced by `host` when given.
/// `for_bind`: the endpoint to bind (zmq_bind_endpoint: a host name looked up, IPv4; one that does
/// not resolve is a ClusterError naming it).
inline std::string endpoint(std::string const& address, std::string const& host = {},
                            bool for_bind = false) {
  auto const colon = address.rfind(':');
  if (colon == std::string::npos) {
    throw ClusterError("convoy: the cluster address '" + address + "' has no port");
  }
  std::string h = host.empty() ? address.substr(0, colon) : host;
  if (h == "localhost") h = "127.0.0.1";
  auto const with_host = h + ":" + address.substr(colon + 1);
  if (!for_bind) return "tcp://" + with_host;
  return zmq_bind_endpoint(with_host, "the ps address", "give ZmqPs::bind_host");
}

template <class Model, class Placement, class Sync>
class Engine {
 public:
  /// The state a Strategy forwards to (snapshot, restore, weights, counters), by name, gathered
  /// from the shards.
  class State {
   public:
    State(Model prototype, Placement placement, Sync sync, Options options)
        : placement_(placement),
          sync_(sync),
          options_(std::move(options)),
          model_(std::make_unique<Model>(std::move(prototype))) {
      cluster_ = options_.cluster ? *options_.cluster : Cluster::from_environment();
      cluster_.validate();
      if (cluster_.ps_count() == 0) {
        throw ClusterError("convoy: comm::ZmqPs needs a cluster with ps tasks; this task's is " +
                           cluster_.describe() +
                           "; start it under tools/convoy-launch --ps 1 (or more), name ps "
                           "tasks in TF_CONFIG or CONVOY_PS_TASKS, or pass a Cluster");
      }
      if (!cluster_.is_ps() && cluster_.worker_rank() < 0) {
        throw ClusterError(
            "convoy: comm::ZmqPs runs ps and worker (or chief) tasks; this task "
            "is " +
            cluster_.job + ":" + std::to_string(cluster_.index));
      }
      sync_.check(cluster_.worker_count());
      if constexpr (sync::takes_first_m<Sync>) {
        auto const m = static_cast<std::size_t>(sync_.replicas_to_aggregate);
        if (m != 0 && m < cluster_.worker_count() && cluster_.ps_count() > 1) {
          // Each shard would take the first M gradients to reach it, and arrival orders differ.
          throw Error("convoy: replicas_to_aggregate = " + std::to_string(m) + " of " +
                      std::to_string(cluster_.worker_count()) +
                      " workers needs a single ps task "
                      "for now (this cluster has " +
                      std::to_string(cluster_.ps_count()) +
                      "): shards that each take the first M gradients to arrive may take "
                      "different ones");
        }
      }
      if (!cluster_.is_ps()) place_worker();
      map_ = std::make_unique<place::ShardMap>(placement_.shard(layout(), cluster_.ps_count()));
      for (std::size_t s = 0; s < cluster_.ps_count(); ++s) pieces_.push_back(map_->pieces_of(s));
      counters_.local_steps.assign(cluster_.worker_count(), 0);
      // Keys are read, and a plaintext shard on a non-loopback address refused, before any
      // socket exists.
      if (cluster_.is_ps()) {
        auto const index = static_cast<std::size_t>(cluster_.index);
        bind_endpoint_ = endpoint(cluster_.ps_address(index), options_.bind_host, true);
        server_security_ = server_security(options_.security);
        check_bind("ps:" + std::to_string(index), bind_endpoint_, server_security_);
      } else {
        client_security_ = client_security(options_.security);
      }
    }

    State(State const&) = delete;
    State& operator=(State const&) = delete;
    ~State() {
      if (!client_) return;
      try {  // goodbye: the shards stop once every worker said it
        client_->exchange([&](std::size_t s) { return request(Op::bye, s); }, {},
                          std::chrono::milliseconds(2000), "to take its goodbye");
      } catch (...) {
      }
    }

    Cluster const& cluster() const { return cluster_; }
    place::ShardMap const& shard_map() const { return *map_; }
    bool serves() const { return cluster_.is_ps(); }
    bool exits_after_serving() const { return options_.exit_after_serving; }
    std::size_t rank() const { return static_cast<std::size_t>(cluster_.worker_rank()); }

    /// Workers: the sampler splits the data over them (this worker's slice is its rank's).
    std::size_t size() const { return cluster_.worker_count(); }
    Variables const& layout() const { return model_->variables(); }
    Model const& model() const { return *model_; }
    Counters const& counters() const { return counters_; }
    optim::Optimizer const& optimizer() const { return optimizer_; }
    void set_optimizer(optim::Optimizer optimizer) {
      if (client_ && optimizer.name() != optimizer_.name()) {
        throw Error("convoy: the shards already run " + std::string(optimizer_.name()) +
                    "; set the optimizer before the first run");
      }
      optimizer_ = optimizer;
    }

    /// Serves this ps task's shard until every worker said goodbye.
    void serve() {
      auto const index = static_cast<std::size_t>(cluster_.index);
      auto const cpu = plan_shard_cpu(cluster_, options_.shard_cpu, allowed_cpus());
      StayOnCpu const stay(cpu.cpu);  // before the shard starts ZeroMQ's I/O thread
      Shard<Sync> shard(pieces_[index], optimizer_, sync_,
                        {.index = index,
                         .shards = cluster_.ps_count(),
                         .workers = cluster_.worker_count(),
                         .endpoint = bind_endpoint_,
                         .log = options_.log,
                         .security = server_security_,
                         .heartbeat = options_.heartbeat,
                         .state_ranges = layout().state_ranges(),
                         .max_connections = options_.max_connections,
                         .cpu = stay.pinned() ? cpu : ShardCpuPlan{}});
      shard.serve();
      counters_ = shard.counters();
    }

    /// Trains this worker's replica until the plan's goal (by shard 0's counters), each step on
    /// the slices of the data ps:0 gave it (data_slices.hpp): slice k is replica k % N's share of
    /// global batch k / N in the plan for the cluster's N workers.
    void train(RunPlan const& plan) {
      keep_global_batch_ = plan.keep_global_batch;
      connect();
      if (!pulled_) start();
      auto const r = rank();
      auto const ctx = placement_.context(0);
      auto const scope = ctx.enter();
      auto& vars = model_->variables();
      while (!plan.reached(counters_.global_step, counters_.batches())) {
        auto const slices = slices_;
        Batch const batch = slice_batch(plan, slices, r, size(), joined_);
        if (!client_->wait_until_sent(sync_.timeout)) {
          throw TimeoutError("convoy: worker " + std::to_string(r) +
                             "'s last gradients were never sent");
        }
        auto const start = std::chrono::steady_clock::now();
        float const loss = forward_backward_in(*model_, batch, ctx);
        // ZeroMQ's I/O thread sends the gradients from the arena, and a model on a device may
        // still be writing them (nn::Mlp reads its loss before its backward kernels run).
        settle_on_host(ctx);
        std::span<float const> const grads = host_side(vars.grads());
        double const seconds =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        std::vector<Reply> replies;
        try {
          replies = exchange(
              [&](std::size_t s) {
                auto h = request(Op::push, s);
                h.tag = tags_[s];
                h.slices = slices;
                h.loss = loss;
                h.seconds = seconds;
                return h;
              },
              [&](std::size_t s) {
                std::vector<zmq::message_t> frames;
                for (auto const* p : pieces_[s]) {
                  frames.push_back(client_->lend_frame(grads.subspan(p->begin, p->end - p->begin)));
                }
                return frames;
              },
              sync_.timeout, "to apply its gradients (" + std::string(Sync::name) + ")");
        } catch (StateLostError const& e) {
          if (cluster_.is_chief()) throw;  // Trainer::fit rolls the cluster back (restore())
          recover(e);
          continue;
        }
        if (std::any_of(replies.begin(), replies.end(),
                        [](Reply const& r) { return r.header.status == Status::stopped; })) {
          if (options_.log) {
            *options_.log << "convoy: worker " << r
                          << " stops: too few workers are left to complete a step" << std::endl;
          }
          return;
        }
        take_weights(replies);
        if (replies[0].header.status == Status::dropped) continue;  // computed again
        StepReport const report{.global_step = counters_.global_step,
                                .local_step = counters_.local_steps[r],
                                .replica = r,
                                .loss = replies[0].header.loss,
                                .seconds = seconds,
                                .applied = counters_.applied,
                                .dropped = counters_.dropped,
                                .batches = counters_.batches(),
                                .lead = 0};
        if (plan.after_step && !plan.after_step(report)) break;
      }
    }

    /// The current weights, gathered from the shards (a pull outside the policy's clock).
    void read_weights(std::span<float> out) const {
      if (out.size() != layout().element_count()) {
        throw ShapeError("convoy: read_weights needs " + std::to_string(layout().element_count()) +
                         " floats, got " + std::to_string(out.size()));
      }
      refuse_on_ps("read the weights");
      auto& self = const_cast<State&>(*this);
      self.connect();
      auto replies = self.exchange([&](std::size_t s) { return self.request(Op::pull, s); }, {},
                                   sync_.timeout, "to send its weights");
      self.scatter(replies, 0, out);
    }

    /// Weights, slots and counters by name, gathered from every shard.
    Snapshot snapshot() const {
      refuse_on_ps("take a snapshot");
      auto& self = const_cast<State&>(*this);
      self.connect();
      auto replies = self.exchange([&](std::size_t s) { return self.request(Op::snapshot, s); }, {},
                                   sync_.timeout, "to send its part of a snapshot");
      auto const n = layout().element_count();
      std::vector<float> weights(n);
      self.scatter(replies, 0, weights);
      auto state = optimizer_.make_state(n);
      for (std::size_t slot = 0; slot < state.slots.size(); ++slot) {
        self.scatter(replies, 1 + slot, state.slots[slot]);
      }
      Snapshot out;
      out.weights = layout().named(weights);
      out.optimizer = std::string(optimizer_.name());
      out.slots = optim::named_slots(optimizer_, state, layout());
      out.optimizer_updates = replies[0].header.optimizer_updates;
      out.counters = counters_of(replies[0].header);
      return out;
    }

    /// Writes a checkpoint into `dir` in parts: every shard writes its own variables and slots by
    /// name, then this worker (the chief) writes the manifest that commits them (see
    /// io/checkpoint_parts.hpp); returns the manifest's path. The shards must see `dir` as this
    /// task does. Throws CheckpointError when a shard cannot write its part (the previous
    /// checkpoint stays the latest) and TimeoutError when a shard does not answer.
    std::filesystem::path save_checkpoint(std::filesystem::path const& dir, std::uint64_t data_seed,
                                          std::size_t keep = 3) {
      refuse_on_ps("save a checkpoint");
      connect();
      // Binds the parts to this save: a part left by a save that never committed is refused.
      auto const nonce = static_cast<std::int64_t>(std::random_device{}() |
                                                   std::uint64_t{std::random_device{}()} << 32);
      auto const where = std::filesystem::absolute(dir).lexically_normal();
      std::vector<Reply> replies;
      try {
        replies = exchange(
            [&](std::size_t s) {
              auto h = request(Op::save, s);
              h.tag = nonce;
              h.global_step = counters_.global_step;
              h.text = where.string();
              return h;
            },
            {}, sync_.timeout, "to write its checkpoint part");
      } catch (TimeoutError const&) {
        throw;
      } catch (StateLostError const&) {
        throw;
      } catch (Error const& e) {
        throw CheckpointError(e.what());
      }
      io::Checkpoint manifest_state;
      auto& state = manifest_state.state;
      state.optimizer = std::string(optimizer_.name());
      state.optimizer_updates = replies[0].header.optimizer_updates;
      state.counters = counters_of(replies[0].header);
      manifest_state.data_seed = data_seed;
      io::Manifest manifest;
      manifest.nonce = static_cast<std::uint64_t>(nonce);
      for (auto const& v : layout().list())
        manifest.shapes.emplace(v.name, io::detail::to_dims(v.shape));
      for (auto const& r : replies) manifest.parts.push_back(r.header.text);
      // The parts are named for the step this worker asked for; the manifest for shard 0's step
      // when it wrote its part, which is later in an asynchronous run.
      return io::save_checkpoint_manifest(where, manifest_state, manifest, keep);
    }

    /// Sends a snapshot's weights, slots and counters to the shards, by name: it may come from a
    /// run with another number of shards or workers (see comm::unpack). Checks everything first,
    /// and changes nothing on such an error; a shard that refuses (workers' gradients wait there)
    /// throws after the others took it.
    void restore(Snapshot const& snap) {
      refuse_on_ps("restore a snapshot");
      auto const unpacked = unpack(snap, layout(), optimizer_, size());
      auto const& c = unpacked.counters;
      connect();
      // After a shard lost its state this restore is a rollback: a new generation voids whatever
      // the shards hold from before, and the other workers wait for it (see recover()).
      auto const generation = rolling_back_ ? generation_ + 1 : generation_;
      auto replies = exchange(
          [&](std::size_t s) {
            auto h = request(Op::restore, s);
            h.generation = generation;
            h.global_step = c.global_step;
            h.applied = c.applied;
            h.dropped = c.dropped;
            h.local = c.local_steps;
            h.optimizer_updates = unpacked.slots.updates;
            return h;
          },
          [&](std::size_t s) {
            std::vector<zmq::message_t> frames;
            auto copy = [&](std::span<float const> arena) {
              for (auto const* p : pieces_[s]) {
                frames.emplace_back(arena.data() + p->begin, (p->end - p->begin) * sizeof(float));
              }
            };
            copy(unpacked.weights);
            for (auto const& slot : unpacked.slots.slots) copy(slot);
            return frames;
          },
          sync_.timeout, "to restore a snapshot");
      if (rolling_back_ && options_.log) {
        *options_.log << "convoy: worker " << rank() << " rolled every shard back to global step "
                      << c.global_step << " (generation " << generation << ")" << std::endl;
      }
      generation_ = generation;
      rolling_back_ = false;
      model_->variables().set_flat(unpacked.weights);
      for (std::size_t s = 0; s < replies.size(); ++s) tags_[s] = replies[s].header.tag;
      counters_ = counters_of(replies[0].header);
      slices_ = replies[0].header.slices;
      pulled_ = true;
    }

    /// Sets every variable by name on the shards (through a snapshot, so the slots stay).
    void set_weights(std::map<std::string, Tensor> const& named) {
      layout().check_names(named, "set_weights");
      auto s = snapshot();
      s.weights = named;
      restore(s);
    }

   private:
    // A worker's replica computes where the placement says (a GPU of its own: Sharded's
    // worker_gpu), its arenas moved there, as ReplicaGroup places in-process replicas; a model that
    // computes on the host only says so first. A ps task opens no device.
    void place_worker() {
      if constexpr (hears_host_only_models<Placement>) {
        placement_.host_only_because = host_only_reason<Model, typename Placement::context_type>();
      }
      if constexpr (resolves_devices<Placement>) placement_.resolve();
      if constexpr (adopts_replicas<Placement>) placement_.adopt(model_->variables(), 0);
      if constexpr (has_batch_memory<typename Placement::context_type>) {
        auto const& vars = model_->variables();
        if (vars.arenas_on_device()) {
          staged_ = std::pmr::vector<float>(vars.element_count(), 0.0f,
                                            placement_.context(0).batch_memory());
        }
      }
    }

    // `arena` as the host reads it: itself, or for a replica on a device a copy in page-locked
    // memory (staging()), valid until the next use of it.
    std::span<float const> host_side(std::span<float const> arena) {
      auto const& vars = model_->variables();
      if (!vars.arenas_on_device()) return arena;
      auto const to = staging();
      vars.copy(to.data(), arena.data(), arena.size());
      return to;
    }
    // The page-locked copy of a device replica's arenas, once ZeroMQ has sent the gradients the
    // last step lent from it.
    std::span<float> staging() {
      if (client_ && !client_->wait_until_sent(sync_.timeout)) {
        throw TimeoutError("convoy: worker " + std::to_string(rank()) +
                           "'s last gradients were never sent");
      }
      return staged_;
    }

    void refuse_on_ps(char const* what) const {
      if (cluster_.is_ps()) {
        throw Error(
            std::string("convoy: a ps task holds one shard and cannot ") + what +
            "; do it on a worker (the chief writes checkpoints). With ZmqPs::exit_after_serving "
            "(the default) a ps task's fit ends its process, and the code after it runs "
            "on the workers only");
      }
    }

    Header request(Op op, std::size_t s) const {
      Header h;
      h.op = op;
      h.fingerprint = fingerprints_.empty() ? 0 : fingerprints_[s];
      h.generation = generation_;
      h.keep_global_batch = keep_global_batch_ ? 1 : 0;
      return h;
    }

    // Every exchange but hello. A shard that lost its state voids the requests in flight: the
    // next exchange says hello again (see Client::check_returned).
    std::vector<Reply> exchange(
        std::function<Header(std::size_t)> const& header,
        std::function<std::vector<zmq::message_t>(std::size_t)> const& payload,
        std::chrono::milliseconds timeout, std::string const& waiting) {
      try {
        return client_->exchange(header, payload, timeout, waiting);
      } catch (StateLostError const&) {
        // Its requests are void: the next connect() says hello again on the same sockets. Closing
        // them would close this worker's connections to the shards that are fine too, and a
        // shard takes a closed connection for a dead worker (lost_worker.hpp).
        rejoin_ = true;
        rolling_back_ = true;
        throw;
      }
    }

    // A worker other than the chief, after a shard lost its state: it connects again (waiting for
    // every shard with a log line naming it) and pulls the state the chief restores from its latest
    // checkpoint, then trains on from there. Bounded by ZmqPs::connect_timeout.
    void recover(StateLostError const& lost) {
      auto const r = rank();
      if (options_.log) {
        *options_.log << lost.what() << "\nconvoy: worker " << r
                      << " waits for the chief to roll the shards back to its latest checkpoint"
                      << std::endl;
      }
      auto const deadline = std::chrono::steady_clock::now() + options_.connect_timeout;
      for (;;) {
        auto const before = generation_;
        connect();
        generation_ = std::max(before + 1, generation_);  // the rollback after `lost`, or later
        auto const left = std::chrono::duration_cast<std::chrono::milliseconds>(
            deadline - std::chrono::steady_clock::now());
        try {
          auto replies = exchange([&](std::size_t s) { return request(Op::pull, s); }, {},
                                  std::max(left, std::chrono::milliseconds(1)),
                                  "to be rolled back by the chief to its latest checkpoint");
          take_weights(replies);
          rolling_back_ = false;
          if (options_.log) {
            *options_.log << "convoy: worker " << r << " carries on from global step "
                          << counters_.global_step << " (generation " << generation_ << ")"
                          << std::endl;
          }
          return;
        } catch (StateLostError const&) {  // rolled back once more meanwhile: pull that state
          if (std::chrono::steady_clock::now() > deadline) throw;
        }
      }
    }

    // Connects and says hello; again after a shard lost its state (rejoin_), on the same sockets.
    void connect() {
      if (client_ && !rejoin_) return;
      if (cluster_.is_ps()) refuse_on_ps("connect to the shards");
      fingerprints_.clear();
      auto const deadline = std::chrono::steady_clock::now() + options_.connect_timeout;
      std::vector<std::string> endpoints;
      for (std::size_t s = 0; s < cluster_.ps_count(); ++s) {
        // A host that does not resolve is said at once, not after connect_timeout.
        if (!client_) {
          wait_until_resolves("ps:" + std::to_string(s), cluster_.ps_address(s), deadline);
        }
        endpoints.push_back(endpoint(cluster_.ps_address(s)));
      }
      for (std::size_t s = 0; s < cluster_.ps_count(); ++s) {
        fingerprints_.push_back(fingerprint(pieces_[s], optimizer_, sync_, cluster_.ps_count(),
                                            cluster_.worker_count()));
      }
      auto fresh =
          client_ ? nullptr
                  : std::make_unique<Client>(endpoints, static_cast<std::uint32_t>(rank()),
                                             options_.log, client_security_, options_.heartbeat);
      Client& client = fresh ? *fresh : *client_;
      auto replies = client.hello(
          [&](std::size_t s) {
            auto h = request(Op::hello, s);
            h.text = std::string(optimizer_.name());
            return h;
          },
          options_.connect_timeout);
      if (fresh) client_ = std::move(fresh);
      rejoin_ = false;
      initialized_.clear();
      for (auto const& r : replies) initialized_.push_back(r.header.initialized != 0);
      tags_.assign(replies.size(), 0);
      for (std::size_t s = 0; s < replies.size(); ++s) {
        tags_[s] = replies[s].header.tag;
        generation_ = std::max(generation_, replies[s].header.generation);
      }
      counters_ = counters_of(replies[0].header);
    }

    // First weights: the chief initializes the shards that have none yet; everyone pulls (a
    // pull waits at the shard until it is initialized).
    void start() {
      auto const& vars = model_->variables();
      if (cluster_.is_chief()) {
        bool any = std::find(initialized_.begin(), initialized_.end(), false) != initialized_.end();
        if (any) {
          auto const weights = host_side(vars.weights());
          exchange([&](std::size_t s) { return request(Op::init, s); },
                   [&](std::size_t s) {
                     std::vector<zmq::message_t> frames;
                     for (auto const* p : pieces_[s]) {
                       frames.emplace_back(weights.data() + p->begin,
                                           (p->end - p->begin) * sizeof(float));
                     }
                     return frames;
                   },
                   sync_.timeout, "to take the initial weights");
        }
      }
      auto replies =
          exchange([&](std::size_t s) { return request(Op::pull, s); }, {},
                   options_.connect_timeout, "to be initialized by the chief and send its weights");
      take_weights(replies);
      pulled_ = true;
    }

    // Copies the weights in `replies` into the replica; takes tags and counters.
    void take_weights(std::vector<Reply>& replies) {
      auto& vars = model_->variables();
      if (vars.arenas_on_device()) {
        auto const staged = staging();
        scatter(replies, 0, staged);
        vars.copy(vars.weights().data(), staged.data(), staged.size());
      } else {
        scatter(replies, 0, vars.weights());
      }
      for (std::size_t s = 0; s < replies.size(); ++s) tags_[s] = replies[s].header.tag;
      counters_ = counters_of(replies[0].header);
      slices_ = replies[0].header.slices;
    }

    // Copies array `array` (0: weights, 1 + k: slot k) of every reply into `out`, piece by piece.
    void scatter(std::vector<Reply> const& replies, std::size_t array, std::span<float> out) {
      for (std::size_t s = 0; s < replies.size(); ++s) {
        auto const& pieces = pieces_[s];
        auto const& payload = replies[s].payload;
        if (payload.size() < (array + 1) * pieces.size()) {
          throw ProtocolError(
              "convoy: ps:" + std::to_string(s) + " sent " + std::to_string(payload.size()) +
              " payload frames, expected at least " + std::to_string((array + 1) * pieces.size()));
        }
        for (std::size_t i = 0; i < pieces.size(); ++i) {
          auto const& frame = payload[array * pieces.size() + i];
          auto const* p = pieces[i];
          check_floats(frame, p->end - p->begin,
                       "ps:" + std::to_string(s) + "'s '" + p->variable + "'");
          std::memcpy(out.data() + p->begin, frame.data(), frame.size());
        }
      }
    }

    Counters counters_of(Header const& h) const {
      Counters c;
      c.global_step = h.global_step;
      c.applied = h.applied;
      c.dropped = h.dropped;
      c.local_steps = h.local;
      if (c.local_steps.size() != size()) c.local_steps.assign(size(), 0);
      return c;
    }

    Placement placement_;
    Sync sync_;
    Options options_;
    std::string bind_endpoint_;                      ///< ps tasks: what the shard binds
    ServerSecurity server_security_;                 ///< ps tasks: keys read at construction
    std::optional<ClientSecurity> client_security_;  ///< workers: keys, or plaintext
    std::unique_ptr<Model> model_;
    Cluster cluster_;
    std::unique_ptr<place::ShardMap> map_;
    std::vector<std::vector<place::Piece const*>> pieces_;  ///< each shard's, from map_, once
    std::pmr::vector<float> staged_;  ///< a replica on a device: its arenas as the host reads them
    optim::Optimizer optimizer_ = optim::Sgd{};
    Counters counters_;
    std::unique_ptr<Client> client_;
    bool rejoin_ = false;  ///< a shard lost its state: say hello again before the next request
    std::vector<std::uint64_t> fingerprints_;
    std::vector<bool> initialized_;
    std::vector<std::int64_t> tags_;
    bool pulled_ = false;
    std::vector<std::int64_t> slices_;  ///< the slices of the data ps:0 gave it to train next
    io::BatchBuffer joined_;            ///< the rows of several slices, trained as one batch
    bool keep_global_batch_ = false;    ///< the plan's: ps:0 may give it several slices
    std::uint64_t generation_ = 0;  ///< rollbacks so far, as the shards count them
    bool rolling_back_ = false;     ///< a shard lost its state: the next restore is a rollback
  };

  template <class Comm>
  Engine(Model prototype, Placement placement, Comm comm, Sync sync)
      : state_(std::make_unique<State>(std::move(prototype), placement, sync, comm.options())) {}

  State& state() { return *state_; }
  State const& state() const { return *state_; }
  /// A callback on a worker sees only its own replica at rest.
  bool lock_step() const { return false; }
  bool chief() const { return state_->cluster().is_chief(); }
  bool serves() const { return state_->serves(); }
  /// A worker hears of its own updates only; under lock-step Synchronous those are all of them.
  bool sees_every_update() const { return false; }

  /// A ps task serves until every worker said goodbye; a worker trains until the plan's goal.
  void run(RunPlan const& plan) {
    if (state_->serves()) {
      state_->serve();
      if (state_->exits_after_serving()) {
        // Errors threw above: only a shard every worker finished with ends here. std::exit
        // flushes the streams; nothing of convoy's is left running on this task.
        std::exit(EXIT_SUCCESS);
      }
    } else {
      state_->train(plan);
    }
  }

  void log_placement(std::ostream& out, std::string_view comm_name) const {
    out << "convoy placement: Strategy<" << Placement::name << ", " << comm_name << ", "
        << Sync::name << ">, " << state_->cluster().ps_count() << " ps task(s), "
        << state_->cluster().worker_count() << " worker(s)\n";
    state_->shard_map().print(out, Placement::name);
  }

 private:
  std::unique_ptr<State> state_;
};

}  // namespace convoy::comm::zmq_ps
