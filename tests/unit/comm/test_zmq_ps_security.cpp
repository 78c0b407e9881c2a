// CurveZMQ security of the parameter server, on loopback only: key files round-trip and bad ones
// are refused naming the file; a worker with an authorized key trains to the same weights as in
// plaintext; a live CURVE shard refuses an unauthorized key (logged, counted) and a wrong server
// key or a plaintext worker fails fast on the worker, while an authorized worker is served after
// them; a plaintext ps on a non-loopback address is refused before anything is bound.
#include <doctest/doctest.h>
#include <sys/stat.h>

#include <chrono>
#include <convoy/comm/zmq_ps.hpp>
#include <convoy/convoy.hpp>
#include <exception>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "processes.hpp"
#include "temp_dir.hpp"

namespace test_comm_zmq_ps_security {

using namespace convoy;
using namespace convoy::comm::zmq_ps;
using Clock = std::chrono::steady_clock;

namespace {

// A thread joined however the test leaves (the shard it runs stops on its own timeout).
struct Joined {
  std::thread thread;
  ~Joined() {
    if (thread.joinable()) thread.join();
  }
};

void write_text(std::filesystem::path const& file, std::string const& text) {
  std::ofstream(file) << text;
}

// Deterministic batches for Mlp({6, 4, 3}).
struct Data {
  std::vector<float> features;
  std::vector<std::int32_t> labels;
  static constexpr std::size_t rows = 8;
  Data() {
    for (std::size_t i = 0; i < 64 * rows * 6; ++i)
      features.push_back(float((i * 37) % 17) / 17.0f - 0.5f);
    for (std::size_t i = 0; i < 64 * rows; ++i) labels.push_back(std::int32_t((i * 7) % 3));
  }
  Batch batch(std::int64_t step) const {
    auto const at = static_cast<std::size_t>(step % 64);
    return {std::span<float const>(features).subspan(at * rows * 6, rows * 6),
            std::span<std::int32_t const>(labels).subspan(at * rows, rows),
            {},
            rows};
  }
};

Cluster loopback_cluster(std::string const& job) {
  Cluster c;
  c.jobs["ps"] = {"127.0.0.1:" + std::to_string(testing::free_port())};
  c.jobs["worker"] = {"127.0.0.1:" + std::to_string(testing::free_port())};
  c.job = job;
  c.index = 0;
  c.source = "arguments";
  return c;
}

using PsStrategy = Strategy<nn::Mlp, place::Sharded<>, comm::ZmqPs, sync::Synchronous>;

// One ps and one worker, each a Strategy of its own in this process; returns the worker's weights
// after `steps` steps. The ps's log goes to `ps_log`.
std::vector<float> train(comm::ZmqPs::Security const& security, std::ostringstream& ps_log,
                         std::int64_t steps = 6) {
  auto ps_cluster = loopback_cluster("ps");
  auto worker_cluster = ps_cluster;
  worker_cluster.job = "worker";
  auto const policy = sync::Synchronous{.timeout = std::chrono::seconds(20)};
  Data const data;
  RunPlan plan;
  plan.until = steps;
  plan.batch = [&](std::size_t, std::int64_t local) { return data.batch(local); };
  PsStrategy ps{
      nn::Mlp({6, 4, 3}),
      {},
      // Its run() returns: this process goes on to the worker and the other cases.
      comm::ZmqPs{
          .cluster = ps_cluster, .log = &ps_log, .security = security, .exit_after_serving = false},
      policy};
  std::exception_ptr failed;
  Joined server{std::thread([&] {
    try {
      ps.run(plan);
    } catch (...) {
      failed = std::current_exception();
    }
  })};
  std::vector<float> weights;
  {
    std::ostringstream worker_log;
    PsStrategy worker{nn::Mlp({6, 4, 3}),
                      {},
                      comm::ZmqPs{.cluster = worker_cluster,
                                  .connect_timeout = std::chrono::seconds(20),
                                  .log = &worker_log,
                                  .security = security},
                      policy};
    worker.run(plan);
    weights = worker.weights();
  }  // goodbye: the ps stops
  server.thread.join();
  if (failed) std::rethrow_exception(failed);
  return weights;
}

}  // namespace

TEST_CASE("is_loopback knows 127.0.0.0/8, ::1 and localhost, and nothing else") {
  for (auto const* host : {"127.0.0.1", "127.1.2.3", "::1", "[::1]", "localhost"}) {
    CAPTURE(host);
    CHECK(is_loopback(host));
  }
  for (auto const* host :
       {"10.0.0.1", "0.0.0.0", "*", "128.0.0.1", "127.0.0.1.5", "example.org", ""}) {
    CAPTURE(host);
    CHECK_FALSE(is_loopback(host));
  }
  CHECK(endpoint_host("tcp://10.0.0.1:1234") == "10.0.0.1");
  CHECK(endpoint_host("tcp://[::1]:1234") == "[::1]");
}

TEST_CASE("a key pair round-trips through its files, which are never overwritten") {
  testing::TempDir dir("keys");
  auto const pair = write_curve_key_pair(dir / "ps");
  CHECK(valid_z85_key(pair.public_key));
  CHECK(valid_z85_key(pair.secret_key));
  struct stat st {};
  REQUIRE(::stat((dir / "ps.key").c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0600);
  auto const loaded = load_secret_key(dir / "ps.key");
  CHECK(loaded.public_key == pair.public_key);
  CHECK(loaded.secret_key == pair.secret_key);
  CHECK(load_public_key(dir / "ps.pub") == pair.public_key);
  CHECK(load_public_key(dir / "ps.key") == pair.public_key);
  std::ifstream pub(dir / "ps.pub");
  std::string const pub_text{std::istreambuf_iterator<char>(pub), {}};
  CHECK(pub_text.find(pair.secret_key) == std::string::npos);  // the secret stays in ps.key
  CHECK_THROWS_WITH_AS(write_curve_key_pair(dir / "ps"), doctest::Contains("is not overwritten"),
                       Error);
  CHECK(load_secret_key(dir / "ps.key").secret_key == pair.secret_key);  // untouched
  CHECK(make_curve_key_pair().public_key != pair.public_key);
}

TEST_CASE("bad key files are refused, naming the file and the fix") {
  testing::TempDir dir("badkeys");
  auto const pair = write_curve_key_pair(dir / "w");
  ::chmod((dir / "w.key").c_str(), 0644);
  CHECK_THROWS_WITH_AS(load_secret_key(dir / "w.key"), doctest::Contains("chmod 600"), Error);
  ::chmod((dir / "w.key").c_str(), 0600);
  CHECK_NOTHROW(load_secret_key(dir / "w.key"));

  write_text(dir / "short.pub", "public-key = \"" + pair.public_key.substr(1) + "\"\n");
  CHECK_THROWS_WITH_AS(
      load_public_key(dir / "short.pub"),
      doctest::Contains("short.pub' is not a CURVE key (40 Z85 characters; it has 39)"), Error);
  write_text(dir / "bad.pub", "public-key = \"" + std::string(40, '~') + "\"\n");  // '~' is not Z85
  CHECK_THROWS_WITH_AS(load_public_key(dir / "bad.pub"), doctest::Contains("bad.pub"), Error);
  write_text(dir / "garbage.pub", "hello\n");
  CHECK_THROWS_WITH_AS(load_public_key(dir / "garbage.pub"), doctest::Contains("line 1"), Error);
  CHECK_THROWS_WITH_AS(load_public_key(dir / "missing.pub"),
                       doctest::Contains("cannot read the key file"), Error);
  CHECK_THROWS_WITH_AS(load_secret_key(dir / "w.pub"), doctest::Contains("give the .key file"),
                       Error);

  // A secret key whose public-key line belongs to another pair.
  auto const other = make_curve_key_pair();
  write_text(dir / "mixed.key", "public-key = \"" + other.public_key + "\"\nsecret-key = \"" +
                                    pair.secret_key + "\"\n");
  ::chmod((dir / "mixed.key").c_str(), 0600);
  CHECK_THROWS_WITH_AS(load_secret_key(dir / "mixed.key"), doctest::Contains("does not belong"),
                       Error);
}

TEST_CASE("authorized keys come from a directory of .pub files or one file of public-key lines") {
  testing::TempDir dir("authorized");
  std::filesystem::create_directories(dir / "workers");
  auto const a = write_curve_key_pair(dir / "workers" / "a");
  auto const b = write_curve_key_pair(dir / "workers" / "b");
  std::filesystem::remove(dir / "workers" / "a.key");  // only .pub files are read
  auto const keys = load_authorized_keys(dir / "workers");
  CHECK(keys.size() == 2);
  CHECK(std::find(keys.begin(), keys.end(), a.public_key) != keys.end());
  CHECK(std::find(keys.begin(), keys.end(), b.public_key) != keys.end());
  write_text(dir / "list", "# workers\npublic-key = \"" + a.public_key + "\"\npublic-key = \"" +
                               b.public_key + "\"\n");
  CHECK(load_authorized_keys(dir / "list") == keys);
  std::filesystem::create_directories(dir / "empty");
  CHECK_THROWS_WITH_AS(load_authorized_keys(dir / "empty"),
                       doctest::Contains("no authorized public key"), Error);
}

TEST_CASE("a plaintext ps on a non-loopback address is refused before anything is bound") {
  auto cluster = loopback_cluster("ps");
  cluster.jobs["ps"] = {"10.0.0.1:1234"};
  std::ostringstream log;
  auto build = [&](comm::ZmqPs::Security security) {
    PsStrategy s{nn::Mlp({6, 4, 3}),
                 {},
                 comm::ZmqPs{.cluster = cluster, .log = &log, .security = security},
                 {}};
  };
  CHECK_THROWS_WITH_AS(
      build({}), doctest::Contains("ps:0 would serve plaintext on tcp://10.0.0.1:1234"), Error);
  CHECK_THROWS_WITH_AS(build({}), doctest::Contains("allow_plaintext = true"), Error);
  CHECK_THROWS_WITH_AS(build({}), doctest::Contains("convoy-keygen"), Error);
  CHECK_NOTHROW(build({.allow_plaintext = true}));  // built, not run: nothing is bound
  CHECK(log.str().empty());

  // The shard checks too, before its socket: the error is the security one, not a failed bind.
  nn::Mlp model({6, 4, 3});
  auto const map = place::GreedyBySize{}.assign(model.variables(), 1);
  for (auto const* host : {"10.0.0.1", "*", "0.0.0.0"}) {
    CAPTURE(host);
    Shard<sync::Asynchronous> shard(
        map.pieces_of(0), optim::Sgd{}, sync::Asynchronous{},
        {.endpoint = std::string("tcp://") + host + ":1234", .log = &log});
    CHECK_THROWS_WITH_AS(shard.serve(), doctest::Contains("not a loopback address"), Error);
  }
  CHECK(log.str().empty());

  // Keys given to a ps but half of them: the missing one is named.
  testing::TempDir dir("halfkeys");
  write_curve_key_pair(dir / "ps");
  CHECK_THROWS_WITH_AS(build({.server_secret_key = dir / "ps.key"}),
                       doctest::Contains("authorized_keys is empty"), Error);
}

TEST_CASE(
    "a worker with an authorized key trains to the same weights under CURVE as in plaintext") {
  testing::TempDir dir("curvetrain");
  std::filesystem::create_directories(dir / "workers");
  write_curve_key_pair(dir / "ps");
  write_curve_key_pair(dir / "workers" / "w0");
  std::ostringstream plain_log, curve_log;
  auto const plain = train({}, plain_log);
  auto const secure = train({.server_secret_key = dir / "ps.key",
                             .server_public_key = dir / "ps.pub",
                             .client_secret_key = dir / "workers" / "w0.key",
                             .authorized_keys = dir / "workers"},
                            curve_log);
  REQUIRE(plain.size() == secure.size());
  CHECK(plain == secure);
  CHECK(plain_log.str().find("plaintext (loopback only)") != std::string::npos);
  CHECK(curve_log.str().find("CURVE on, 1 authorized worker key(s)") != std::string::npos);
  CHECK(curve_log.str().find("0 worker key(s) refused") != std::string::npos);
}

TEST_CASE("a CURVE shard refuses unauthorized workers fast, logs and counts them, and serves on") {
  testing::TempDir dir("curverefuse");
  std::filesystem::create_directories(dir / "workers");
  write_curve_key_pair(dir / "ps");
  write_curve_key_pair(dir / "workers" / "good");
  write_curve_key_pair(dir / "intruder");
  write_curve_key_pair(dir / "impostor");  // a server key the shard does not have

  nn::Mlp model({6, 4, 3});
  auto const map = place::GreedyBySize{}.assign(model.variables(), 1);
  auto const pieces = map.pieces_of(0);
  optim::Optimizer const optimizer = optim::Sgd{0.1f};
  auto const policy = sync::Asynchronous{.timeout = std::chrono::seconds(20)};
  std::string const endpoint = "tcp://127.0.0.1:" + std::to_string(testing::free_port());
  std::ostringstream log;
  Shard<sync::Asynchronous> shard(
      pieces, optimizer, policy,
      {.index = 0,
       .shards = 1,
       .workers = 1,
       .endpoint = endpoint,
       .log = &log,
       .security = server_security(
           {.server_secret_key = dir / "ps.key", .authorized_keys = dir / "workers"})});
  std::exception_ptr failed;
  Joined server{std::thread([&] {
    try {
      shard.serve();
    } catch (...) {
      failed = std::current_exception();
    }
  })};
  auto const fp = fingerprint(pieces, optimizer, policy, 1, 1);
  auto hello = [&](std::optional<ClientSecurity> security) {
    Client client({endpoint}, 0, nullptr, std::move(security));
    return client.hello(
        [&](std::size_t) {
          Header h;
          h.fingerprint = fp;
          h.text = "Sgd";
          return h;
        },
        std::chrono::seconds(20));
  };
  auto const server_key = load_public_key(dir / "ps.pub");
  auto within = [](auto&& f, char const* message) {
    auto const start = Clock::now();
    CHECK_THROWS_WITH_AS(f(), doctest::Contains(message), Error);
    CHECK(Clock::now() - start < std::chrono::seconds(5));  // not the 20 s connect timeout
  };
  within(
      [&] {
        hello(ClientSecurity{server_key, load_secret_key(dir / "intruder.key")});
      },
      "refused this worker's key");
  within(
      [&] {
        hello(ClientSecurity{load_public_key(dir / "impostor.pub"),
                             load_secret_key(dir / "workers" / "good.key")});
      },
      "server_public_key is not the public key");
  within([&] { hello(std::nullopt); }, "requires CURVE keys");

  {  // the authorized worker is still served
    Client client({endpoint}, 0, nullptr,
                  ClientSecurity{server_key, load_secret_key(dir / "workers" / "good.key")});
    auto replies = client.hello(
        [&](std::size_t) {
          Header h;
          h.fingerprint = fp;
          h.text = "Sgd";
          return h;
        },
        std::chrono::seconds(20));
    CHECK(replies[0].header.status == Status::ok);
    replies = client.exchange(
        [&](std::size_t) {
          Header h;
          h.op = Op::bye;
          h.fingerprint = fp;
          return h;
        },
        {}, std::chrono::seconds(20), "to take its goodbye");
    CHECK(replies[0].header.status == Status::ok);
  }
  server.thread.join();
  if (failed) std::rethrow_exception(failed);
  CHECK(shard.refused() == 1);  // the intruder; the others failed before the ZAP handler
  auto const text = log.str();
  auto const intruder = load_public_key(dir / "intruder.pub");
  CHECK(text.find("ps:0 refused a worker at 127.0.0.1") != std::string::npos);
  CHECK(text.find("key " + intruder + " is not authorized") != std::string::npos);
  CHECK(text.find("1 worker key(s) refused") != std::string::npos);
  CHECK(text.find("CURVE on") != std::string::npos);
}

}  // namespace test_comm_zmq_ps_security
