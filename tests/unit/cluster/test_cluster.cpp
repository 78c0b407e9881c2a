// Tests for cluster/: the queries and describe() of a Cluster, every source (flags, TF_CONFIG,
// torchrun, Open MPI, MPICH/Hydra PMI, Slurm) with the variables each launcher really sets, the
// order resolve() tries them in, Slurm node-list expansion, and malformed descriptions, each of
// whose messages must quote the offending part and name where it came from.
#include <doctest/doctest.h>

#include <chrono>
#include <convoy/cluster.hpp>
#include <convoy/cluster/host_lookup.hpp>
#include <convoy/core/error.hpp>
#include <functional>
#include <helpers.hpp>
#include <map>
#include <sstream>
#include <string>
#include <vector>

namespace test_cluster_cluster {

using convoy::testing::message_of;

namespace {

using convoy::Cluster;
using convoy::ClusterError;
using convoy::Environment;
using convoy::RankJobs;
using Vars = std::map<std::string, std::string>;
using Strings = std::vector<std::string>;

// Cluster::resolve over a command line given as strings (argv[0] is the program).
Cluster resolve(Strings const& args, Vars const& vars = {}) {
  std::vector<char const*> argv{"trainer"};
  for (auto const& a : args) argv.push_back(a.c_str());
  return Cluster::resolve(static_cast<int>(argv.size()), argv.data(), Environment{vars});
}

Cluster from_env(Vars const& vars) { return Cluster::from_environment(Environment{vars}); }

// What torchrun sets for one process of `world` (nproc_per_node processes per node).
Vars torchrun(int rank, int world, int per_node, std::string addr = "10.0.0.1",
              std::string port = "29400") {
  return {{"RANK", std::to_string(rank)},
          {"LOCAL_RANK", std::to_string(rank % per_node)},
          {"WORLD_SIZE", std::to_string(world)},
          {"LOCAL_WORLD_SIZE", std::to_string(per_node)},
          {"GROUP_RANK", std::to_string(rank / per_node)},
          {"ROLE_RANK", std::to_string(rank)},
          {"ROLE_NAME", "default"},
          {"ROLE_WORLD_SIZE", std::to_string(world)},
          {"MASTER_ADDR", addr},
          {"MASTER_PORT", port},
          {"TORCHELASTIC_RESTART_COUNT", "0"},
          {"TORCHELASTIC_MAX_RESTARTS", "0"},
          {"TORCHELASTIC_RUN_ID", "none"},
          {"TORCHELASTIC_USE_AGENT_STORE", "True"},
          {"OMP_NUM_THREADS", "1"}};
}

// What Open MPI's mpirun sets for one process.
Vars open_mpi(int rank, int size, int local_rank) {
  return {{"OMPI_COMM_WORLD_RANK", std::to_string(rank)},
          {"OMPI_COMM_WORLD_SIZE", std::to_string(size)},
          {"OMPI_COMM_WORLD_LOCAL_RANK", std::to_string(local_rank)},
          {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"},
          {"OMPI_COMM_WORLD_NODE_RANK", "0"},
          {"OMPI_UNIVERSE_SIZE", std::to_string(size)},
          {"PMIX_RANK", std::to_string(rank)},
          {"PMIX_NAMESPACE", "prterun-host-1234@1"}};
}

// What MPICH's Hydra (mpiexec) sets for one process.
Vars hydra(int rank, int size, int local_rank) {
  return {{"PMI_RANK", std::to_string(rank)},
          {"PMI_SIZE", std::to_string(size)},
          {"PMI_FD", "6"},
          {"MPI_LOCALRANKID", std::to_string(local_rank)},
          {"MPI_LOCALNRANKS", "2"},
          {"PMI_JOBID", "1"}};
}

// What srun sets for one task of a 3-node step "gpu[07-09]" with 2, 2 and 1 tasks.
Vars srun(int procid, int localid) {
  return {{"SLURM_PROCID", std::to_string(procid)},
          {"SLURM_LOCALID", std::to_string(localid)},
          {"SLURM_NTASKS", "5"},
          {"SLURM_NPROCS", "5"},
          {"SLURM_NNODES", "3"},
          {"SLURM_JOB_ID", "4242"},
          {"SLURM_STEP_ID", "0"},
          {"SLURM_JOB_NODELIST", "gpu[07-09]"},
          {"SLURM_NODELIST", "gpu[07-09]"},
          {"SLURM_STEP_NODELIST", "gpu[07-09]"},
          {"SLURM_TASKS_PER_NODE", "2(x2),1"},
          {"SLURM_STEP_TASKS_PER_NODE", "2(x2),1"},
          {"SLURM_NODEID", "0"},
          {"SLURMD_NODENAME", "gpu07"}};
}

Vars merged(Vars base, Vars const& more) {
  for (auto const& [k, v] : more) base[k] = v;
  return base;
}

std::string const tf_config_two_workers_one_ps =
    R"({"cluster": {"chief": ["c0:2222"], "worker": ["w0:2222", "w1:2222"], "ps": ["p0:2222"]},
        "task": {"type": "worker", "index": 1}})";

}  // namespace

TEST_CASE("a single process: no jobs, worker 0 of 1 and the chief") {
  Cluster const c = Cluster::local();
  CHECK(c.single_process());
  CHECK(c.source == "none");
  CHECK(c.ps_count() == 0);
  CHECK(c.worker_count() == 1);
  CHECK(c.worker_rank() == 0);
  CHECK(c.is_chief());
  CHECK_FALSE(c.is_ps());
  CHECK_NOTHROW(c.validate());
  CHECK(resolve({}).source == "none");
  CHECK(from_env({{"HOME", "/root"}, {"PATH", "/usr/bin"}}).single_process());
  CHECK_THROWS_AS(c.ps_address(0), convoy::Error);
  CHECK_THROWS_AS(c.worker_address(0), convoy::Error);
  CHECK(c.worker_task(0) == "worker:0");
}

TEST_CASE("a program resolves its cluster once, from its command line and environment") {
  std::vector<char const*> args{"trainer", "--steps=10"};
  int const argc = static_cast<int>(args.size());
  char const* const* argv = args.data();
  std::ostringstream log;
  // example-begin resolve
  convoy::Cluster const cluster = convoy::Cluster::resolve(argc, argv);
  log << cluster.describe() << "\n";
  if (cluster.is_ps()) {
    // serve variables until the workers are done
  } else if (cluster.worker_rank() >= 0) {
    // train as worker cluster.worker_rank() of cluster.worker_count()
  }
  // example-end resolve
  CHECK(cluster.describe() == Cluster::resolve(argc, argv, Environment::process()).describe());
  CHECK(log.str().starts_with("cluster from "));
}

TEST_CASE("a cluster built by hand is checked by validate()") {
  // example-begin by-hand
  convoy::Cluster cluster;  // source "arguments"
  cluster.jobs = {{"worker", {"10.0.0.1:2222", "10.0.0.2:2222"}}, {"ps", {"10.0.0.3:2222"}}};
  cluster.job = "worker";
  cluster.index = 1;
  cluster.validate();  // throws convoy::ClusterError naming what is wrong
  // example-end by-hand
  CHECK(cluster.worker_rank() == 1);
  CHECK(cluster.ps_address(0) == "10.0.0.3:2222");
}

TEST_CASE("queries: ranks with and without a chief, ps and evaluator tasks") {
  Cluster c;
  c.jobs = {{"chief", {"c:1"}},
            {"worker", {"w0:1", "w1:1"}},
            {"ps", {"p0:1", "p1:1"}},
            {"evaluator", {"e:1"}}};
  c.job = "worker";
  c.index = 1;
  CHECK_NOTHROW(c.validate());
  CHECK(c.source == "arguments");
  CHECK(c.worker_count() == 3);  // chief + 2 workers; the evaluator does not train
  CHECK(c.ps_count() == 2);
  CHECK(c.worker_rank() == 2);
  CHECK_FALSE(c.is_chief());
  CHECK(c.worker_address(0) == "c:1");
  CHECK(c.worker_address(2) == "w1:1");
  // What messages call the training process of each rank: the chief is rank 0.
  CHECK(c.worker_task(0) == "chief:0");
  CHECK(c.worker_task(2) == "worker:1");
  CHECK_THROWS_AS((void)c.worker_task(3), convoy::ClusterError);
  CHECK(c.ps_address(1) == "p1:1");
  CHECK(message_of<convoy::Error>([&] { (void)c.ps_address(2); }).find("2 ps task(s)") !=
        std::string::npos);
  CHECK(message_of<convoy::Error>([&] { (void)c.worker_address(3); }).find("worker_address(3)") !=
        std::string::npos);
  c.job = "chief";
  c.index = 0;
  CHECK(c.worker_rank() == 0);
  CHECK(c.is_chief());
  c.job = "ps";
  CHECK(c.worker_rank() == -1);
  CHECK(c.is_ps());
  CHECK_FALSE(c.is_chief());
  c.job = "evaluator";
  CHECK(c.worker_rank() == -1);
  CHECK_FALSE(c.is_chief());

  Cluster no_chief;
  no_chief.jobs = {{"worker", {"w0:1", "w1:1"}}};
  no_chief.job = "worker";
  CHECK(no_chief.is_chief());
  CHECK(no_chief.worker_rank() == 0);
  CHECK(no_chief.worker_address(1) == "w1:1");
  CHECK(no_chief.worker_task(1) == "worker:1");
  no_chief.index = 1;
  CHECK_FALSE(no_chief.is_chief());
  CHECK(no_chief.worker_rank() == 1);
}

TEST_CASE("describe() names the source, every job and this task") {
  Cluster const c = convoy::resolvers::parse_tf_config(tf_config_two_workers_one_ps);
  CHECK(c.describe() ==
        "cluster from TF_CONFIG: chief [c0:2222], worker [w0:2222, w1:2222], ps [p0:2222]\n"
        "this task: worker 1 at w1:2222, worker rank 2 of 3, not the chief; local rank 0");
  CHECK(Cluster::local().describe() == "cluster from none: a single process, which is the chief");

  auto ps = from_env(torchrun(0, 3, 1));
  CHECK(
      ps.describe() ==
      "cluster from torchrun: worker [10.0.0.1:29402, 10.0.0.1:29403], ps [10.0.0.1:29401]\n"
      "this task: ps 0 at 10.0.0.1:29401, a parameter server for 2 training task(s); local rank 0");

  Cluster big;
  big.jobs["worker"] = {"w0:1", "w1:1", "w2:1", "w3:1", "w4:1",
                        "w5:1", "w6:1", "w7:1", "w8:1", "w9:1"};
  big.jobs["evaluator"] = {"e:1"};
  big.job = "evaluator";
  CHECK(big.describe() ==
        "cluster from arguments: worker [w0:1, w1:1, w2:1, ..., w8:1, w9:1 (10 tasks)], "
        "evaluator [e:1]\nthis task: evaluator 0 at e:1, which does not train; local rank 0");
}

TEST_CASE("flags of the TensorFlow examples, in both spellings, beside the program's own") {
  Cluster const c = resolve({"--steps=100", "--job_name=worker", "--task_index", "1",
                             "--ps_hosts=ps0:2222,ps1:2222", "--worker_hosts", "w0:2222,w1:2222",
                             "--learning_rate", "0.1"});
  CHECK(c.source == "flags");
  CHECK(c.job == "worker");
  CHECK(c.index == 1);
  CHECK(c.jobs.at("ps") == Strings{"ps0:2222", "ps1:2222"});
  CHECK(c.jobs.at("worker") == Strings{"w0:2222", "w1:2222"});
  CHECK(c.worker_rank() == 1);

  Cluster const ps = resolve(
      {"--job_name", "ps", "--task_index=0", "--ps_hosts=ps0:2222", "--worker_hosts=w0:2222"});
  CHECK(ps.is_ps());
  Cluster const chief =
      resolve({"--job_name=chief", "--task_index=0", "--chief_hosts=c:1", "--worker_hosts=w:1"});
  CHECK(chief.is_chief());
  CHECK(chief.worker_count() == 2);
  // Flags after "--" belong to someone else.
  CHECK(resolve({"--", "--job_name=worker"}).single_process());
}

TEST_CASE("TF_CONFIG: every job, the task, and TensorFlow's extra keys") {
  Cluster const c = from_env({{"TF_CONFIG", tf_config_two_workers_one_ps}});
  CHECK(c.source == "TF_CONFIG");
  CHECK(c.job == "worker");
  CHECK(c.index == 1);
  CHECK(c.worker_count() == 3);
  CHECK(c.ps_count() == 1);

  Cluster const eval = from_env({{"TF_CONFIG",
                                  R"({"cluster": {"worker": ["[::1]:2222", "host-b:2222"],
                                      "evaluator": ["host-c:2222"]},
                                      "task": {"type": "evaluator", "index": 0},
                                      "environment": "cloud", "rpc_layer": "grpc"})"}});
  CHECK(eval.job == "evaluator");
  CHECK(eval.worker_count() == 2);
  CHECK(eval.worker_rank() == -1);
  CHECK(eval.worker_address(0) == "[::1]:2222");
}

TEST_CASE("torchrun: ranks become ps then workers, ports above MASTER_PORT on MASTER_ADDR") {
  for (int rank = 0; rank < 4; ++rank) {
    CAPTURE(rank);
    Cluster const c = from_env(torchrun(rank, 4, 2));
    CHECK(c.source == "torchrun");
    CHECK(c.local_rank == rank % 2);
    CHECK(c.jobs.at("ps") == Strings{"10.0.0.1:29401"});
    CHECK(c.jobs.at("worker") == Strings{"10.0.0.1:29402", "10.0.0.1:29403", "10.0.0.1:29404"});
    CHECK(c.job == (rank == 0 ? "ps" : "worker"));
    CHECK(c.index == (rank == 0 ? 0 : rank - 1));
    CHECK(c.is_chief() == (rank == 1));
    CHECK(c.jobs.count("chief") == 0);
  }
  // CONVOY_PS_TASKS, CONVOY_PORT and CONVOY_COORDINATOR win over torchrun's defaults.
  Cluster const c = from_env(
      merged(torchrun(2, 4, 4),
             {{"CONVOY_PS_TASKS", "2"}, {"CONVOY_PORT", "40000"}, {"CONVOY_COORDINATOR", "head"}}));
  CHECK(c.jobs.at("ps") == Strings{"head:40001", "head:40002"});
  CHECK(c.jobs.at("worker") == Strings{"head:40003", "head:40004"});
  CHECK(c.job == "worker");
  CHECK(c.index == 0);
  CHECK(c.is_chief());
  // No ps at all: every rank trains.
  Cluster const allreduce = from_env(merged(torchrun(1, 2, 2), {{"CONVOY_PS_TASKS", "0"}}));
  CHECK(allreduce.ps_count() == 0);
  CHECK(allreduce.worker_rank() == 1);
  // What a collective asks for (comm::Gloo, comm::Nccl): every rank a worker without
  // CONVOY_PS_TASKS, rank 0 the chief; the variable still wins when it is set.
  for (int rank = 0; rank < 3; ++rank) {
    CAPTURE(rank);
    Cluster const c = Cluster::from_environment(Environment{torchrun(rank, 3, 3)},
                                                RankJobs::all_workers);
    CHECK(c.ps_count() == 0);
    CHECK(c.jobs.at("worker") == Strings{"10.0.0.1:29401", "10.0.0.1:29402", "10.0.0.1:29403"});
    CHECK(c.worker_rank() == rank);
    CHECK(c.is_chief() == (rank == 0));
  }
  Cluster const told = Cluster::from_environment(
      Environment{merged(torchrun(0, 3, 3), {{"CONVOY_PS_TASKS", "1"}})}, RankJobs::all_workers);
  CHECK(told.is_ps());
  CHECK(Cluster::from_environment(Environment{srun(0, 0)}, RankJobs::all_workers).ps_count() ==
        0);
  // A TF_CONFIG names its jobs itself: the split asked for does not touch it.
  CHECK(Cluster::from_environment(Environment{Vars{{"TF_CONFIG", tf_config_two_workers_one_ps}}},
                                  RankJobs::all_workers)
            .ps_count() == 1);
  // A world of one is a single process, unless ps tasks are asked for (then it is an error).
  Cluster const one = from_env(torchrun(0, 1, 1));
  CHECK(one.single_process());
  CHECK(one.source == "torchrun");
  // Without MASTER_* the defaults: 127.0.0.1 and 29500.
  Cluster const bare = from_env({{"RANK", "1"}, {"WORLD_SIZE", "2"}});
  CHECK(bare.jobs.at("worker") == Strings{"127.0.0.1:29502"});
}

TEST_CASE("Open MPI and MPICH/Hydra: the same rule, with their local ranks") {
  Cluster const o = from_env(open_mpi(3, 4, 1));
  CHECK(o.source == "Open MPI");
  CHECK(o.job == "worker");
  CHECK(o.index == 2);
  CHECK(o.local_rank == 1);
  CHECK(o.worker_address(2) == "127.0.0.1:29504");

  Cluster const h = from_env(merged(hydra(0, 2, 0), {{"CONVOY_COORDINATOR", "node1"}}));
  CHECK(h.source == "MPICH/PMI");
  CHECK(h.is_ps());
  CHECK(h.ps_address(0) == "node1:29501");
  CHECK(from_env(hydra(1, 2, 1)).local_rank == 1);
}

TEST_CASE("Slurm: each task on the node the block distribution gives it") {
  // gpu07: tasks 0 1, gpu08: tasks 2 3, gpu09: task 4.
  Cluster const c = from_env(srun(3, 1));
  CHECK(c.source == "Slurm");
  CHECK(c.local_rank == 1);
  CHECK(c.jobs.at("ps") == Strings{"gpu07:29501"});
  CHECK(c.jobs.at("worker") == Strings{"gpu07:29502", "gpu08:29503", "gpu08:29504", "gpu09:29505"});
  CHECK(c.job == "worker");
  CHECK(c.index == 2);

  // Cyclic distribution deals the tasks round the nodes.
  Cluster const cyclic = from_env(merged(srun(0, 0), {{"SLURM_DISTRIBUTION", "cyclic:block"}}));
  CHECK(cyclic.worker_address(0) == "gpu08:29502");
  CHECK(cyclic.worker_address(3) == "gpu08:29505");

  // No task counts: SLURM_NTASKS spread evenly, in blocks, over the job's node list.
  Cluster const even =
      from_env({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "5"}, {"SLURM_JOB_NODELIST", "a,b"}});
  CHECK(even.jobs.at("ps") == Strings{"a:29501"});
  CHECK(even.jobs.at("worker") == Strings{"a:29502", "a:29503", "b:29504", "b:29505"});

  // SLURM_NODELIST when SLURM_JOB_NODELIST is absent.
  Cluster const old = from_env({{"SLURM_PROCID", "1"},
                                {"SLURM_NTASKS", "2"},
                                {"SLURM_NODELIST", "n[1-2]"},
                                {"SLURM_TASKS_PER_NODE", "1(x2)"}});
  CHECK(old.jobs.at("worker") == Strings{"n2:29502"});
}

TEST_CASE("Slurm node lists expand, keeping zero padding") {
  using convoy::slurm::expand_nodelist;
  CHECK(expand_nodelist("node[01-04,07]") ==
        Strings{"node01", "node02", "node03", "node04", "node07"});
  CHECK(expand_nodelist("gpu-[1-3],login1") == Strings{"gpu-1", "gpu-2", "gpu-3", "login1"});
  CHECK(expand_nodelist("rack[1-2]-n[01-02]") ==
        Strings{"rack1-n01", "rack1-n02", "rack2-n01", "rack2-n02"});
  CHECK(expand_nodelist("single") == Strings{"single"});
  CHECK(expand_nodelist("n[8-11]") == Strings{"n8", "n9", "n10", "n11"});
  CHECK(expand_nodelist("n[098-101]") == Strings{"n098", "n099", "n100", "n101"});
  CHECK(expand_nodelist("a[1],b[2-3]c,d") == Strings{"a1", "b2c", "b3c", "d"});
  CHECK(expand_nodelist("10.0.0.[1-2]") == Strings{"10.0.0.1", "10.0.0.2"});

  using convoy::slurm::expand_tasks_per_node;
  CHECK(expand_tasks_per_node("2(x3),1") == std::vector<int>{2, 2, 2, 1});
  CHECK(expand_tasks_per_node("4") == std::vector<int>{4});
  CHECK(expand_tasks_per_node("1,3(x2)") == std::vector<int>{1, 3, 3});
}

TEST_CASE("resolve() takes the first source that applies") {
  Vars const everything = merged(
      merged(merged(merged(torchrun(1, 2, 2), open_mpi(0, 2, 0)), hydra(0, 2, 0)), srun(0, 0)),
      {{"TF_CONFIG", tf_config_two_workers_one_ps}});
  Strings const flags{"--job_name=ps", "--task_index=0", "--ps_hosts=p:1", "--worker_hosts=w:1"};
  CHECK(resolve(flags, everything).source == "flags");
  CHECK(resolve({"--verbose"}, everything).source == "TF_CONFIG");
  CHECK(Cluster::from_environment(Environment{everything}).source == "TF_CONFIG");

  Vars rest = everything;
  rest.erase("TF_CONFIG");
  CHECK(from_env(rest).source == "torchrun");
  rest.erase("RANK");
  rest.erase("WORLD_SIZE");
  CHECK(from_env(rest).source == "Open MPI");
  rest.erase("OMPI_COMM_WORLD_RANK");
  rest.erase("OMPI_COMM_WORLD_SIZE");
  CHECK(from_env(rest).source == "MPICH/PMI");
  rest.erase("PMI_RANK");
  rest.erase("PMI_SIZE");
  CHECK(from_env(rest).source == "Slurm");
  rest.erase("SLURM_PROCID");
  CHECK(from_env(rest).source == "none");
  // An empty variable counts as unset.
  CHECK(from_env({{"TF_CONFIG", ""}, {"RANK", ""}}).source == "none");
}

TEST_CASE("local_rank() gives what from_environment() would, without resolving the cluster") {
  // Distinct local ranks per launcher, so the one taken shows which launcher applied.
  Vars rest =
      merged(merged(merged(torchrun(3, 4, 2), open_mpi(2, 4, 2)), hydra(3, 4, 3)), srun(1, 1));
  auto const same = [](Vars const& vars) {
    INFO(vars.size(), " variables");
    CHECK(convoy::local_rank(Environment{vars}) == from_env(vars).local_rank);
  };
  same(merged(rest, {{"TF_CONFIG", tf_config_two_workers_one_ps}}));  // 0, whatever else is set
  same(rest);                                                         // torchrun: 1
  CHECK(convoy::local_rank(Environment{rest}) == 1);
  // Take away each launcher's variables in turn: Open MPI gives 2, PMI 3, Slurm 1, then none 0.
  std::vector<Strings> const launchers{{"RANK", "WORLD_SIZE"},
                                       {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"},
                                       {"PMI_RANK", "PMI_SIZE"},
                                       {"SLURM_PROCID"}};
  for (auto const& variables : launchers) {
    for (auto const& name : variables) rest.erase(name);
    same(rest);
  }
  CHECK(convoy::local_rank(Environment{rest}) == 0);
  // Without its local-rank variable a launcher gives 0; a malformed one is refused alike.
  same(torchrun(1, 2, 1));
  Vars no_local = open_mpi(1, 2, 1);
  no_local.erase("OMPI_COMM_WORLD_LOCAL_RANK");
  same(no_local);
  Vars const bad = merged(hydra(0, 2, 0), {{"MPI_LOCALRANKID", "x1"}});
  CHECK(message_of<ClusterError>([&] { convoy::local_rank(Environment{bad}); }) ==
        message_of<ClusterError>([&] { from_env(bad); }));
}

TEST_CASE("the process's own environment is read through getenv") {
  CHECK(Environment::process().get("PATH").has_value());
  CHECK_FALSE(Environment::process().get("CONVOY_TEST_SURELY_UNSET_VARIABLE").has_value());
  CHECK_FALSE(Environment{}.has("PATH"));
}

namespace {

// One malformed description: what to run, and the parts its message must contain.
struct Malformed {
  std::string name;
  std::function<void()> run;
  Strings expected;
};

std::function<void()> flags(Strings args) {
  return [args] { (void)resolve(args); };
}
std::function<void()> env(Vars vars) {
  return [vars] { (void)from_env(vars); };
}
std::function<void()> tf(std::string text) { return env({{"TF_CONFIG", std::move(text)}}); }
std::function<void()> tf_cluster(std::string cluster, std::string task) {
  return tf(R"({"cluster": )" + cluster + R"(, "task": )" + task + "}");
}
std::function<void()> nodelist(std::string list) {
  return [list] { (void)convoy::slurm::expand_nodelist(list); };
}
std::function<void()> built(Cluster c) {
  return [c] { c.validate(); };
}

Cluster with(std::map<std::string, Strings> jobs, std::string job, int index = 0) {
  Cluster c;
  c.jobs = std::move(jobs);
  c.job = std::move(job);
  c.index = index;
  return c;
}

std::string const w = R"({"worker": ["w0:1", "w1:1"]})";
std::string const task_w0 = R"({"type": "worker", "index": 0})";
Strings const hosts{"--ps_hosts=p:1", "--worker_hosts=w:1"};

Strings with_hosts(Strings args) {
  args.insert(args.end(), hosts.begin(), hosts.end());
  return args;
}

}  // namespace

TEST_CASE("malformed descriptions: each message quotes the offending part and names its source") {
  std::vector<Malformed> const cases{
      // Flags.
      {"near miss --job-name",
       flags({"--job-name=worker"}),
       {"\"--job-name=worker\"", "\"--job_name\""}},
      {"near miss --taskindex",
       flags({"--taskindex", "0"}),
       {"\"--taskindex\"", "\"--task_index\""}},
      {"near miss --ps_host", flags({"--ps_host=p:1"}), {"\"--ps_host=p:1\"", "\"--ps_hosts\""}},
      {"near miss --Worker_Hosts",
       flags({"--Worker_Hosts=w:1"}),
       {"\"--Worker_Hosts=w:1\"", "\"--worker_hosts\""}},
      {"single dash", flags({"-job_name=ps"}), {"\"-job_name=ps\"", "\"--job_name\""}},
      {"no job name", flags({"--task_index=0", "--worker_hosts=w:1"}), {"--job_name"}},
      {"unknown job",
       flags(with_hosts({"--job_name=wroker", "--task_index=0"})),
       {"--job_name", "\"wroker\"", "did you mean \"worker\""}},
      {"no task index",
       flags(with_hosts({"--job_name=worker"})),
       {"--task_index", "--job_name=worker"}},
      {"bad task index",
       flags(with_hosts({"--job_name=worker", "--task_index=one"})),
       {"--task_index", "\"one\""}},
      {"negative task index",
       flags(with_hosts({"--job_name=worker", "--task_index", "-1"})),
       {"--task_index", "\"-1\""}},
      {"task index out of range",
       flags(with_hosts({"--job_name=worker", "--task_index=1"})),
       {"--task_index=1", "--worker_hosts", "1 host"}},
      {"no value", flags({"--worker_hosts=w:1", "--job_name"}), {"\"--job_name\"", "no value"}},
      {"flag as value", flags({"--job_name", "--task_index=0"}), {"\"--job_name\"", "no value"}},
      {"empty value", flags({"--job_name="}), {"\"--job_name=\"", "empty value"}},
      {"flag twice",
       flags(with_hosts({"--job_name=ps", "--task_index=0", "--task_index=1"})),
       {"--task_index", "twice", "\"0\"", "\"1\""}},
      {"own hosts missing",
       flags({"--job_name=ps", "--task_index=0", "--worker_hosts=w:1"}),
       {"--job_name=ps", "--ps_hosts"}},
      {"no worker hosts",
       flags({"--job_name=ps", "--task_index=0", "--ps_hosts=p:1"}),
       {"--worker_hosts"}},
      {"empty host entry",
       flags({"--job_name=worker", "--task_index=0", "--worker_hosts=w:1,,x:2"}),
       {"--worker_hosts entry 1", "\"w:1,,x:2\"", "empty"}},
      {"host without port",
       flags({"--job_name=worker", "--task_index=0", "--worker_hosts=w"}),
       {"--worker_hosts", "\"w\"", "no port"}},
      {"port out of range",
       flags({"--job_name=worker", "--task_index=0", "--worker_hosts=w:70000"}),
       {"--worker_hosts", "\"w:70000\"", "\"70000\"", "1..65535"}},
      {"duplicate address",
       flags({"--job_name=worker", "--task_index=0", "--worker_hosts=w:1", "--ps_hosts=w:1"}),
       {"flags", "\"w:1\"", "two tasks, ps[0] and worker[0]"}},

      // TF_CONFIG.
      {"not JSON",
       tf(R"({"cluster": {"worker": ["w:1"]} "task": {}})"),
       {"TF_CONFIG", "not valid JSON", "offset 32", "line 1, column 33", "\"\"task\": {}}\"",
        "missing a comma"}},
      {"JSON error line",
       tf("{\"cluster\":\n  {\"worker\": [\"w:1\",]}}"),
       {"TF_CONFIG", "line 2, column 21", "reads \"]}}\""}},
      {"trailing garbage", tf(R"({"cluster": {}} x)"), {"TF_CONFIG", "offset 16", "\"x\""}},
      {"not an object", tf(R"(["w:1"])"), {"TF_CONFIG", "an array"}},
      {"top-level typo clustr",
       tf(R"({"clustr": {}, "task": {}})"),
       {"\"clustr\"", "did you mean \"cluster\""}},
      {"top-level typo taks",
       tf(R"({"cluster": {"worker": ["w:1"]}, "taks": {}})"),
       {"\"taks\"", "did you mean \"task\""}},
      {"unknown top-level key",
       tf(R"({"cluster": {"worker": ["w:1"]}, "mode": 1})"),
       {"TF_CONFIG", "\"mode\""}},
      {"no cluster",
       tf(R"({"task": {"type": "worker", "index": 0}})"),
       {"TF_CONFIG", "no \"cluster\""}},
      {"no task", tf(R"({"cluster": {"worker": ["w:1"]}})"), {"TF_CONFIG", "no \"task\""}},
      {"cluster not an object",
       tf_cluster(R"(["w:1"])", task_w0),
       {"TF_CONFIG \"cluster\"", "an array"}},
      {"cluster empty", tf_cluster("{}", task_w0), {"TF_CONFIG \"cluster\"", "{}"}},
      {"job typo wroker",
       tf_cluster(R"({"wroker": ["w:1"]})", task_w0),
       {"TF_CONFIG", "\"wroker\"", "did you mean \"worker\""}},
      {"unknown job",
       tf_cluster(R"({"trainer": ["w:1"]})", task_w0),
       {"TF_CONFIG", "\"trainer\"", "chief, worker, ps, evaluator"}},
      {"job not an array",
       tf_cluster(R"({"worker": "w:1"})", task_w0),
       {"TF_CONFIG cluster.worker", "a string"}},
      {"job empty", tf_cluster(R"({"worker": []})", task_w0), {"TF_CONFIG cluster.worker", "[]"}},
      {"address not a string",
       tf_cluster(R"({"worker": ["w:1", 7]})", task_w0),
       {"TF_CONFIG cluster.worker[1]", "a number"}},
      {"address without port",
       tf_cluster(R"({"worker": ["w:1", "w2"]})", task_w0),
       {"TF_CONFIG cluster.worker[1]", "\"w2\"", "no port"}},
      {"port zero",
       tf_cluster(R"({"worker": ["w:0"]})", task_w0),
       {"cluster.worker[0]", "\"w:0\"", "1..65535"}},
      {"port far too large",
       tf_cluster(R"({"worker": ["w:99999999999"]})", task_w0),
       {"cluster.worker[0]", "\"99999999999\"", "1..65535"}},
      {"port not a number",
       tf_cluster(R"({"worker": ["w:http"]})", task_w0),
       {"cluster.worker[0]", "\"http\""}},
      {"empty host",
       tf_cluster(R"({"worker": [":2222"]})", task_w0),
       {"cluster.worker[0]", "\":2222\"", "empty host"}},
      {"unbracketed IPv6",
       tf_cluster(R"({"worker": ["::1:2222"]})", task_w0),
       {"cluster.worker[0]", "\"::1:2222\"", "brackets"}},
      {"duplicate address",
       tf_cluster(R"({"worker": ["w:1"], "ps": ["w:1"]})", task_w0),
       {"TF_CONFIG", "\"w:1\"", "two tasks"}},
      {"two chiefs",
       tf_cluster(R"({"chief": ["a:1", "b:1"], "worker": ["w:1"]})", task_w0),
       {"TF_CONFIG", "\"chief\"", "a:1, b:1", "at most one chief"}},
      {"duplicate key",
       tf(R"({"cluster": {"worker": ["w:1"], "worker": ["x:1"]}, "task": {}})"),
       {"TF_CONFIG", "\"worker\"", "twice"}},
      {"task not an object", tf_cluster(w, R"("worker")"), {"TF_CONFIG \"task\"", "a string"}},
      {"task key typo",
       tf_cluster(w, R"({"typ": "worker", "index": 0})"),
       {"TF_CONFIG task", "\"typ\"", "did you mean \"type\""}},
      {"task key typo index",
       tf_cluster(w, R"({"type": "worker", "idx": 0})"),
       {"\"idx\"", "did you mean \"index\""}},
      {"task type missing", tf_cluster(w, R"({"index": 0})"), {"TF_CONFIG task", "\"type\""}},
      {"task type not present",
       tf_cluster(w, R"({"type": "ps", "index": 0})"),
       {"TF_CONFIG task.type", "\"ps\"", "(worker)"}},
      {"task type typo",
       tf_cluster(w, R"({"type": "wroker", "index": 0})"),
       {"\"wroker\"", "did you mean \"worker\""}},
      {"task index missing",
       tf_cluster(w, R"({"type": "worker"})"),
       {"TF_CONFIG task", "\"index\""}},
      {"task index a string",
       tf_cluster(w, R"({"type": "worker", "index": "1"})"),
       {"TF_CONFIG task.index", "\"1\"", "not an integer"}},
      {"task index fractional",
       tf_cluster(w, R"({"type": "worker", "index": 1.5})"),
       {"TF_CONFIG task.index", "1.5"}},
      {"task index out of range",
       tf_cluster(w, R"({"type": "worker", "index": 2})"),
       {"TF_CONFIG task.index 2", "\"worker\"", "2 task(s)"}},
      {"task index negative",
       tf_cluster(w, R"({"type": "worker", "index": -1})"),
       {"TF_CONFIG task.index -1"}},
      {"no trainer",
       tf_cluster(R"({"ps": ["p:1"]})", R"({"type": "ps", "index": 0})"),
       {"TF_CONFIG", "no \"chief\" or \"worker\""}},

      // torchrun.
      {"RANK malformed", env({{"RANK", "1x"}, {"WORLD_SIZE", "2"}}), {"RANK", "\"1x\""}},
      {"WORLD_SIZE missing", env({{"RANK", "0"}}), {"RANK is set", "torchrun", "WORLD_SIZE"}},
      {"RANK missing", env({{"WORLD_SIZE", "2"}}), {"WORLD_SIZE is set", "RANK is not set"}},
      {"RANK out of range", env(torchrun(4, 4, 4)), {"RANK", "\"4\"", "WORLD_SIZE=4"}},
      {"WORLD_SIZE zero",
       env({{"RANK", "0"}, {"WORLD_SIZE", "0"}}),
       {"WORLD_SIZE", "0", "torchrun"}},
      {"LOCAL_RANK too big",
       env(merged(torchrun(0, 2, 1), {{"LOCAL_RANK", "2"}})),
       {"LOCAL_RANK is \"2\"", "WORLD_SIZE=2"}},
      {"LOCAL_RANK malformed",
       env(merged(torchrun(0, 2, 1), {{"LOCAL_RANK", "zero"}})),
       {"LOCAL_RANK", "\"zero\""}},
      {"MASTER_PORT malformed", env(torchrun(0, 2, 1, "h", "29k")), {"MASTER_PORT", "\"29k\""}},
      {"MASTER_PORT too high",
       env(torchrun(0, 2, 1, "h", "65535")),
       {"MASTER_PORT", "\"65535\"", "65537"}},
      {"MASTER_ADDR with a port",
       env(torchrun(0, 2, 1, "head:29400")),
       {"MASTER_ADDR", "\"head:29400\"", "host alone"}},
      {"CONVOY_PS_TASKS malformed",
       env(merged(torchrun(0, 2, 1), {{"CONVOY_PS_TASKS", "two"}})),
       {"CONVOY_PS_TASKS", "\"two\""}},
      {"no worker left",
       env(merged(torchrun(0, 2, 1), {{"CONVOY_PS_TASKS", "2"}})),
       {"CONVOY_PS_TASKS", "\"2\"", "WORLD_SIZE", "at least one worker"}},
      {"ps asked of one process",
       env(merged(torchrun(0, 1, 1), {{"CONVOY_PS_TASKS", "1"}})),
       {"CONVOY_PS_TASKS", "\"1\""}},
      {"CONVOY_PORT zero",
       env(merged(torchrun(0, 2, 1), {{"CONVOY_PORT", "0"}})),
       {"CONVOY_PORT", "\"0\"", "1..65535"}},
      {"CONVOY_COORDINATOR with a space",
       env(merged(torchrun(0, 2, 1), {{"CONVOY_COORDINATOR", "my host"}})),
       {"CONVOY_COORDINATOR", "\"my host:1\"", "space"}},

      // Open MPI and MPICH/PMI.
      {"OMPI rank malformed",
       env({{"OMPI_COMM_WORLD_RANK", "-1"}, {"OMPI_COMM_WORLD_SIZE", "2"}}),
       {"OMPI_COMM_WORLD_RANK", "\"-1\""}},
      {"OMPI size missing",
       env({{"OMPI_COMM_WORLD_RANK", "0"}}),
       {"Open MPI", "OMPI_COMM_WORLD_SIZE"}},
      {"OMPI rank out of range",
       env(open_mpi(5, 4, 0)),
       {"OMPI_COMM_WORLD_RANK", "\"5\"", "OMPI_COMM_WORLD_SIZE=4"}},
      {"OMPI local rank malformed",
       env(merged(open_mpi(0, 2, 0), {{"OMPI_COMM_WORLD_LOCAL_RANK", "a"}})),
       {"OMPI_COMM_WORLD_LOCAL_RANK", "\"a\""}},
      {"PMI size malformed",
       env({{"PMI_RANK", "0"}, {"PMI_SIZE", "2.0"}}),
       {"PMI_SIZE", "\"2.0\""}},
      {"PMI rank missing", env({{"PMI_SIZE", "2"}}), {"MPICH/PMI", "PMI_RANK"}},

      // Slurm.
      {"SLURM_NTASKS missing",
       env({{"SLURM_PROCID", "0"}, {"SLURM_JOB_NODELIST", "a"}}),
       {"Slurm", "SLURM_NTASKS"}},
      {"SLURM_PROCID out of range",
       env(merged(srun(0, 0), {{"SLURM_PROCID", "5"}})),
       {"SLURM_PROCID", "\"5\"", "SLURM_NTASKS=5"}},
      {"SLURM_LOCALID malformed",
       env(merged(srun(0, 0), {{"SLURM_LOCALID", "x"}})),
       {"SLURM_LOCALID", "\"x\""}},
      {"node list missing",
       env({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}}),
       {"SLURM_JOB_NODELIST"}},
      {"node list does not parse",
       env(merged(srun(0, 0), {{"SLURM_STEP_NODELIST", "gpu[07-09"}})),
       {"SLURM_STEP_NODELIST", "\"gpu[07-09\"", "not closed"}},
      {"tasks per node malformed",
       env(merged(srun(0, 0), {{"SLURM_STEP_TASKS_PER_NODE", "2(x2,1"}})),
       {"SLURM_STEP_TASKS_PER_NODE", "\"2(x2\""}},
      {"tasks per node total",
       env(merged(srun(0, 0),
                  {{"SLURM_STEP_TASKS_PER_NODE", "2(x3)"}, {"SLURM_STEP_NODELIST", "n[1-3]"}})),
       {"SLURM_STEP_TASKS_PER_NODE", "\"2(x3)\"", "6 tasks", "SLURM_NTASKS is 5"}},
      {"tasks per node count",
       env(merged(srun(0, 0), {{"SLURM_STEP_TASKS_PER_NODE", "5"}})),
       {"SLURM_STEP_TASKS_PER_NODE", "\"5\"", "\"gpu[07-09]\"", "3 node(s)"}},
      {"unknown distribution",
       env(merged(srun(0, 0), {{"SLURM_DISTRIBUTION", "plane=2"}})),
       {"SLURM_DISTRIBUTION", "\"plane=2\""}},

      // Node lists alone.
      {"range backwards",
       nodelist("n[5-3]"),
       {"SLURM_JOB_NODELIST", "\"n[5-3]\"", "\"5-3\"", "backwards"}},
      {"range not a number", nodelist("n[a-c]"), {"\"n[a-c]\"", "\"a-c\""}},
      {"empty brackets", nodelist("n[]"), {"\"n[]\"", "empty brackets"}},
      {"stray close", nodelist("n1]"), {"\"n1]\"", "']'"}},
      {"empty name", nodelist("a,,b"), {"\"a,,b\"", "empty name"}},
      {"trailing comma", nodelist("a,"), {"\"a,\"", "ends with a comma"}},
      {"space", nodelist("a b"), {"\"a b\"", "space"}},
      {"empty range item", nodelist("n[1,,3]"), {"\"n[1,,3]\"", "\"\""}},
      {"too many nodes", nodelist("n[0-9999999]"), {"\"n[0-9999999]\"", "more than"}},
      {"tasks per node zero",
       [] { (void)convoy::slurm::expand_tasks_per_node("0"); },
       {"SLURM_TASKS_PER_NODE", "\"0\""}},

      // A Cluster built by hand.
      {"hand: unknown job",
       built(with({{"wrker", {"w:1"}}}, "wrker")),
       {"arguments", "\"wrker\"", "did you mean \"worker\""}},
      {"hand: empty job",
       built(with({{"worker", {"w:1"}}, {"ps", {}}}, "worker")),
       {"arguments", "\"ps\"", "no addresses"}},
      {"hand: bad address",
       built(with({{"worker", {"w:1", "w:x"}}}, "worker")),
       {"arguments", "worker[1]", "\"w:x\""}},
      {"hand: job not present",
       built(with({{"worker", {"w:1"}}}, "ps")),
       {"arguments", "\"ps\"", "(worker)"}},
      {"hand: index out of range",
       built(with({{"worker", {"w:1"}}}, "worker", 3)),
       {"arguments", "index 3", "\"worker\""}},
      {"hand: job without jobs", built(with({}, "worker")), {"arguments", "\"worker\"", "no jobs"}},
  };
  CHECK(cases.size() >= 40);
  for (auto const& bad : cases) {
    CAPTURE(bad.name);
    std::string const message = message_of<ClusterError>(bad.run);
    CAPTURE(message);
    CHECK(message.starts_with("convoy: "));
    for (auto const& part : bad.expected) {
      CAPTURE(part);
      CHECK(message.find(part) != std::string::npos);
    }
  }
}

TEST_CASE("a TF_CONFIG nested past any cluster's depth is refused, never parsed into a crash") {
  // 130,000 '[' used to overflow the stack in the JSON parser: a segmentation fault in every
  // program that resolved its cluster.
  std::string const deep = "{\"cluster\": " + std::string(130'000, '[');
  CHECK_THROWS_WITH_AS(Cluster::from_environment(Environment({{"TF_CONFIG", deep}})),
                       doctest::Contains("TF_CONFIG nests arrays and objects more than 64 levels"),
                       ClusterError);
}

TEST_CASE("a control character in a host name is refused, naming the byte") {
  std::string const spec = std::string("{\"cluster\": {\"worker\": [\"host\\u0000evil:2222\"]}, ") +
                           "\"task\": {\"type\": \"worker\", \"index\": 0}}";
  CHECK_THROWS_WITH_AS(Cluster::from_environment(Environment({{"TF_CONFIG", spec}})),
                       doctest::Contains("has a control character (byte 0) in its host"),
                       ClusterError);
  CHECK_THROWS_WITH_AS(convoy::parse_address(std::string("a\x01"
                                                         "b:1"),
                                             "test"),
                       doctest::Contains("control character (byte 1)"), ClusterError);
}

TEST_CASE("a peer's host is looked up before connecting: numeric hosts and loopback names pass") {
  // An unknown name fails at once, naming it: tests/netns (its resolver reads only /etc/hosts,
  // so no query leaves the machine). Here: what must pass at once, without a name server.
  auto const deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  CHECK_NOTHROW(convoy::wait_until_resolves("ps:0", "127.0.0.1:2222", deadline));
  CHECK_NOTHROW(convoy::wait_until_resolves("ps:0", "[::1]:2222", deadline));
  CHECK_NOTHROW(convoy::wait_until_resolves("ps:0", "localhost:2222", deadline));
  CHECK_THROWS_WITH_AS(convoy::wait_until_resolves("ps:0", "localhost", deadline),
                       doctest::Contains("has no port"), ClusterError);
}

TEST_CASE("what ZeroMQ binds: a host name becomes its address, numeric hosts and * stay") {
  // ZeroMQ takes a name for a network interface ("No such device"): a Slurm node name or a
  // TF_CONFIG host must be looked up first. An unknown name is refused naming it (tests/netns).
  CHECK(convoy::zmq_bind_endpoint("localhost:2222", "test") == "tcp://127.0.0.1:2222");
  CHECK(convoy::zmq_bind_endpoint("10.1.2.3:2222", "test") == "tcp://10.1.2.3:2222");
  CHECK(convoy::zmq_bind_endpoint("[::1]:2222", "test") == "tcp://[::1]:2222");
  CHECK(convoy::zmq_bind_endpoint("*:2222", "test") == "tcp://*:2222");
  CHECK_THROWS_WITH_AS(convoy::zmq_bind_endpoint("localhost", "rank 0's address"),
                       doctest::Contains("rank 0's address 'localhost' has no port"),
                       ClusterError);
}

}  // namespace test_cluster_cluster
