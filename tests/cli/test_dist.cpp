// Data-parallel training on c10d Gloo over 127.0.0.1, through the command line as a user runs
// it: W workers on batch B/W train the same model as one worker on batch B, resume each
// other's checkpoints, evaluate alike, and fail cleanly (a lost worker is named in time; bad
// launch settings are errors, never hangs).
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <thread>

#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include "seqmix/dist/launcher.h"
#include "seqmix/train/reporting/metrics.h"
#include "support/cli.h"
#include "support/temp_dir.h"

extern char** environ;

namespace {

using seqmix::testing::json_lines;
using seqmix::testing::read_text;
using seqmix::testing::run_cli;
using seqmix::testing::seqmix_bin;
namespace fs = std::filesystem;

// A tiny language model on a small corpus: fast, no dropout, one thread per worker.
std::string lm_flags(const std::string& corpus) {
  return "--data " + corpus +
         " --model weird-net --size tiny --max-len 32 --batch-size 8 --threads 1 --seed 3 "
         "--set train.log_interval=1 --set train.eval_interval=10 --set "
         "train.eval_max_bytes=2048 --set train.warmup_steps=5 --set model.dropout=0";
}

std::string task_flags() {
  return "--task listops --model weird-net-a --threads 1 --batch-size 8 --seed 5 --set "
         "data.train_examples=64 --set data.valid_examples=24 --set data.test_examples=24 "
         "--set model.n_layers=2 --set model.d_model=16 --set model.d_ff=32 --set "
         "model.n_heads=2 --set train.log_interval=1 --set train.eval_interval=10 --set "
         "model.dropout=0";
}

// Training losses by step, and the final held-out figures by split, from a run folder.
struct Curve {
  std::map<int64_t, double> train;
  std::map<std::string, double> final_loss;
};
Curve curve_of(const std::string& run) {
  Curve c;
  for (const auto& l : seqmix::train::read_metrics(run + "/metrics.jsonl")) {
    if (l.value("split", "") == "train") c.train[l["step"].get<int64_t>()] = l["loss"].get<double>();
    if (l.value("final", false)) c.final_loss[l["split"].get<std::string>()] = l["loss"].get<double>();
  }
  return c;
}

// Every step of `b` in [first, last] matches `a` to `rel` relative; prints them side by side.
void expect_same_losses(const Curve& a, const Curve& b, int64_t first, int64_t last, double rel,
                        const std::string& what) {
  double worst = 0;
  std::string table;
  for (int64_t s = first; s <= last; ++s) {
    ASSERT_TRUE(a.train.count(s) && b.train.count(s)) << what << ": step " << s << " missing";
    const double x = a.train.at(s), y = b.train.at(s);
    const double d = std::abs(x - y) / std::abs(x);
    worst = std::max(worst, d);
    table += "  step " + std::to_string(s) + ": " + std::to_string(x) + " vs " +
             std::to_string(y) + " (rel " + std::to_string(d) + ")\n";
  }
  std::printf("%s: worst relative difference %.3g over steps %lld..%lld\n%s", what.c_str(),
              worst, static_cast<long long>(first), static_cast<long long>(last), table.c_str());
  EXPECT_LE(worst, rel) << what;
}

// A command run in the background, its output in a file.
struct Background {
  pid_t pid = -1;
  std::string log;
  Background(const std::string& command, const std::string& log_path) : log(log_path) {
    const std::string sh = "exec " + command + " > '" + log_path + "' 2>&1";
    const char* argv[] = {"/bin/sh", "-c", sh.c_str(), nullptr};
    posix_spawn(&pid, "/bin/sh", nullptr, nullptr, const_cast<char**>(argv), environ);
  }
  // The exit status (-1: killed by a signal, -2: still running after `limit`).
  int wait_for(std::chrono::seconds limit) {
    const auto end = std::chrono::steady_clock::now() + limit;
    while (std::chrono::steady_clock::now() < end) {
      int status = 0;
      if (waitpid(pid, &status, WNOHANG) == pid) {
        pid = -1;
        return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return -2;
  }
  ~Background() {
    if (pid > 0) {
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
    }
  }
};

// A TCP socket listening on an ephemeral port of `addr` (INADDR_LOOPBACK, INADDR_ANY) with
// `backlog`; its port in *port. -1 if the socket cannot be made.
int listening_socket(uint32_t addr, int backlog, int* port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(addr);
  socklen_t len = sizeof a;
  if (fd < 0 || bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
      listen(fd, backlog) != 0 || getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    if (fd >= 0) close(fd);
    return -1;
  }
  *port = ntohs(a.sin_port);
  return fd;
}

// The worker of `launcher` whose environment has RANK=`rank`.
pid_t worker_pid(pid_t launcher, int rank) {
  for (const auto& e : fs::directory_iterator("/proc")) {
    const std::string name = e.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream stat(e.path() / "stat");
    std::string line;
    std::getline(stat, line);
    const size_t close = line.rfind(')');
    if (close == std::string::npos) continue;
    char state = 0;
    int ppid = 0;
    if (std::sscanf(line.c_str() + close + 1, " %c %d", &state, &ppid) != 2 || ppid != launcher)
      continue;
    const std::string env = read_text((e.path() / "environ").string());
    const std::string want = "RANK=" + std::to_string(rank);
    size_t pos = 0;
    while (pos < env.size()) {
      const size_t end = env.find('\0', pos);
      if (env.compare(pos, end - pos, want) == 0 && end - pos == want.size())
        return static_cast<pid_t>(std::stoi(name));
      if (end == std::string::npos) break;
      pos = end + 1;
    }
  }
  return -1;
}

int64_t checkpoint_step(const std::string& run) {
  int64_t step = -1;
  for (const auto& l : seqmix::train::read_metrics(run + "/metrics.jsonl"))
    step = std::max<int64_t>(step, l.value("step", int64_t{-1}));
  return step;
}

class Dist : public ::testing::Test {
 protected:
  std::string dir = seqmix::testing::temp_dir(
      ::testing::UnitTest::GetInstance()->current_test_info()->name());
  std::string corpus = seqmix::testing::tiny_corpus(dir);
  ~Dist() override { fs::remove_all(dir); }
};

TEST_F(Dist, TwoWorkersTrainTheLanguageModelOneWorkerTrains) {
  auto one = run_cli("train " + lm_flags(corpus) + " --max-steps 20 --out " + dir + "/one");
  ASSERT_EQ(one.code, 0) << one.output;
  auto two = run_cli("train --nproc-per-node 2 " + lm_flags(corpus) + " --max-steps 20 --out " +
                     dir + "/two");
  ASSERT_EQ(two.code, 0) << two.output;
  EXPECT_NE(two.output.find("x 2 workers (Gloo)"), std::string::npos) << two.output;
  // Rank 0 alone reports.
  EXPECT_EQ(json_lines(two.output).size(), 1u) << two.output;
  const Curve a = curve_of(dir + "/one"), b = curve_of(dir + "/two");
  expect_same_losses(a, b, 1, 20, 1e-5, "language model, 1 x B=8 vs 2 x B=4");
  // Distributed evaluation (sharded by batch, sums added) equals one process's.
  ASSERT_TRUE(a.final_loss.count("valid") || a.final_loss.count("test"));
  for (const auto& [split, loss] : a.final_loss) {
    ASSERT_TRUE(b.final_loss.count(split)) << split;
    EXPECT_NEAR(b.final_loss.at(split), loss, 1e-5 * loss) << split;
  }
  // Only rank 0 wrote into the folder.
  EXPECT_TRUE(fs::exists(dir + "/two/checkpoint.pt"));
  // The single-process evaluation of the 2-worker checkpoint agrees with its own final one.
  auto ev = run_cli("eval " + dir + "/two --threads 1");
  ASSERT_EQ(ev.code, 0) << ev.output;
  const auto rows = json_lines(ev.output);
  ASSERT_EQ(rows.size(), 1u) << ev.output;
  EXPECT_NEAR(rows[0]["loss"].get<double>(), b.final_loss.begin()->second,
              1e-5 * b.final_loss.begin()->second);
}

TEST_F(Dist, TwoWorkersTrainTheClassifierOneWorkerTrains) {
  auto one = run_cli("train " + task_flags() + " --max-steps 20 --data-dir " + dir +
                     " --out " + dir + "/one");
  ASSERT_EQ(one.code, 0) << one.output;
  auto two = run_cli("train --nproc-per-node 2 " + task_flags() + " --max-steps 20 --data-dir " +
                     dir + " --out " + dir + "/two");
  ASSERT_EQ(two.code, 0) << two.output;
  const Curve a = curve_of(dir + "/one"), b = curve_of(dir + "/two");
  expect_same_losses(a, b, 1, 20, 1e-5, "listops classifier, 1 x B=8 vs 2 x B=4");
  for (const char* split : {"valid", "test", "train_eval"}) {
    ASSERT_TRUE(a.final_loss.count(split) && b.final_loss.count(split)) << split;
    EXPECT_NEAR(b.final_loss.at(split), a.final_loss.at(split), 1e-5 * a.final_loss.at(split))
        << split;
  }
}

TEST_F(Dist, CompareTrainsEveryModelDistributed) {
  const std::string f = "--data " + corpus +
                        " --size tiny --max-len 16 --batch-size 4 --max-steps 6 --threads 1 "
                        "--bucket 2 --seeds 1 --run 'aib=weird-net model.dropout=0' --run "
                        "'tf=transformer model.dropout=0'";
  auto one = run_cli("compare --out " + dir + "/one " + f);
  ASSERT_EQ(one.code, 0) << one.output;
  auto two = run_cli("compare --nproc-per-node 2 --out " + dir + "/two " + f);
  ASSERT_EQ(two.code, 0) << two.output;
  const auto a = json_lines(one.output), b = json_lines(two.output);
  ASSERT_EQ(a.size(), 2u) << one.output;
  ASSERT_EQ(b.size(), 2u) << two.output;  // rank 0 alone reports
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(a[i]["name"], b[i]["name"]);
    EXPECT_NEAR(b[i]["loss"].get<double>(), a[i]["loss"].get<double>(),
                1e-5 * a[i]["loss"].get<double>());
  }
  EXPECT_TRUE(fs::exists(dir + "/two/compare.png"));
  EXPECT_TRUE(fs::exists(dir + "/two/summary.jsonl"));
  // A second distributed compare reuses the finished runs on every rank.
  auto again = run_cli("compare --nproc-per-node 2 --out " + dir + "/two " + f);
  ASSERT_EQ(again.code, 0) << again.output;
  EXPECT_NE(again.output.find("already trained"), std::string::npos) << again.output;
}

TEST_F(Dist, CheckpointsResumeWithAnotherNumberOfWorkers) {
  const std::string f = lm_flags(corpus) + " --set train.checkpoint_interval=10";
  ASSERT_EQ(run_cli("train " + f + " --max-steps 20 --out " + dir + "/ref").code, 0);
  // 2 workers to step 10, then 1 worker to 20.
  auto r = run_cli("train --nproc-per-node 2 " + f + " --max-steps 10 --set train.decay_steps=20 "
                   "--out " + dir + "/a");
  ASSERT_EQ(r.code, 0) << r.output;
  r = run_cli("train --out " + dir + "/a --resume --max-steps 20 --threads 1");
  ASSERT_EQ(r.code, 0) << r.output;
  // 1 worker to step 10, then 2 workers to 20.
  r = run_cli("train " + f + " --max-steps 10 --set train.decay_steps=20 --out " + dir + "/b");
  ASSERT_EQ(r.code, 0) << r.output;
  r = run_cli("train --nproc-per-node 2 --out " + dir + "/b --resume --max-steps 20 --threads 1");
  ASSERT_EQ(r.code, 0) << r.output;
  const Curve ref = curve_of(dir + "/ref");
  expect_same_losses(ref, curve_of(dir + "/a"), 1, 20, 1e-5, "2 workers, resumed by 1");
  expect_same_losses(ref, curve_of(dir + "/b"), 1, 20, 1e-5, "1 worker, resumed by 2");
}

TEST_F(Dist, AKilledWorkerEndsTheRunNamingItAndTheCheckpointResumes) {
  const std::string run = dir + "/run";
  Background job(seqmix_bin() + " train --nproc-per-node 2 --dist-timeout 10 " +
                     lm_flags(corpus) + " --max-steps 100000 --set train.checkpoint_interval=5 "
                     "--set train.eval_interval=0 --out " + run,
                 dir + "/log");
  const auto t0 = std::chrono::steady_clock::now();
  while (!fs::exists(run + "/checkpoint.pt") &&
         std::chrono::steady_clock::now() - t0 < std::chrono::seconds(120))
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  ASSERT_TRUE(fs::exists(run + "/checkpoint.pt")) << read_text(job.log);
  const pid_t victim = worker_pid(job.pid, 1);
  ASSERT_GT(victim, 0);
  const auto killed_at = std::chrono::steady_clock::now();
  kill(victim, SIGKILL);
  const int code = job.wait_for(std::chrono::seconds(60));
  const double took =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - killed_at).count();
  const std::string log = read_text(job.log);
  std::printf("killed rank 1: the run ended after %.1f s with status %d\n", took, code);
  ASSERT_NE(code, -2) << "still running 60 s after rank 1 was killed\n" << log;
  EXPECT_NE(code, 0) << log;
  EXPECT_LE(took, 15.0) << log;  // --dist-timeout 10 bounds it; a dead peer is seen at once
  EXPECT_NE(log.find("lost rank 1"), std::string::npos) << log;
  EXPECT_NE(log.find("worker rank 1"), std::string::npos) << log;
  // The last checkpoint is whole: it evaluates and resumes.
  const int64_t step = checkpoint_step(run);
  EXPECT_GT(step, 0);
  auto ev = run_cli("eval " + run + " --threads 1");
  EXPECT_EQ(ev.code, 0) << ev.output;
  auto re = run_cli("train --out " + run + " --resume --max-steps " + std::to_string(step + 5) +
                    " --threads 1");
  EXPECT_EQ(re.code, 0) << re.output;
}

TEST_F(Dist, CtrlCOnTheLauncherStopsEveryWorkerAtOneStepAfterACheckpoint) {
  const std::string run = dir + "/run";
  Background job(seqmix_bin() + " train --nproc-per-node 2 " + lm_flags(corpus) +
                     " --max-steps 100000 --set train.checkpoint_interval=50 "
                     "--set train.eval_interval=0 --out " + run,
                 dir + "/log");
  const auto t0 = std::chrono::steady_clock::now();
  while (!fs::exists(run + "/checkpoint.pt") &&
         std::chrono::steady_clock::now() - t0 < std::chrono::seconds(120))
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  ASSERT_TRUE(fs::exists(run + "/checkpoint.pt")) << read_text(job.log);
  kill(job.pid, SIGINT);
  const int code = job.wait_for(std::chrono::seconds(60));
  const std::string log = read_text(job.log);
  EXPECT_EQ(code, 128 + SIGINT) << log;
  EXPECT_NE(log.find("interrupted by SIGINT"), std::string::npos) << log;
  // The checkpoint holds the step at which both ranks stopped, and the run resumes from it.
  int64_t interrupted_at = -1;
  for (const auto& l : seqmix::train::read_metrics(run + "/metrics.jsonl"))
    if (l.value("event", "") == "interrupted") interrupted_at = l["step"].get<int64_t>();
  ASSERT_GT(interrupted_at, 0) << log;
  auto re = run_cli("train --nproc-per-node 2 --out " + run + " --resume --max-steps " +
                    std::to_string(interrupted_at + 3) + " --threads 1");
  ASSERT_EQ(re.code, 0) << re.output;
  EXPECT_NE(re.output.find("resuming at step " + std::to_string(interrupted_at)),
            std::string::npos)
      << re.output;
}

TEST_F(Dist, AHungWorkerEndsTheRunWithinTheTimeout) {
  const std::string run = dir + "/run";
  Background job(seqmix_bin() + " train --nproc-per-node 2 --dist-timeout 4 " +
                     lm_flags(corpus) + " --max-steps 100000 --set train.checkpoint_interval=5 "
                     "--set train.eval_interval=0 --out " + run,
                 dir + "/log");
  const auto t0 = std::chrono::steady_clock::now();
  while (!fs::exists(run + "/checkpoint.pt") &&
         std::chrono::steady_clock::now() - t0 < std::chrono::seconds(120))
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  ASSERT_TRUE(fs::exists(run + "/checkpoint.pt")) << read_text(job.log);
  const pid_t victim = worker_pid(job.pid, 1);
  ASSERT_GT(victim, 0);
  const auto stopped_at = std::chrono::steady_clock::now();
  kill(victim, SIGSTOP);
  // Rank 0 names rank 1 within the timeout; the launcher then stops the hung worker.
  double named_after = -1;
  while (std::chrono::steady_clock::now() - stopped_at < std::chrono::seconds(30)) {
    if (read_text(job.log).find("lost rank 1") != std::string::npos) {
      named_after = std::chrono::duration<double>(std::chrono::steady_clock::now() - stopped_at).count();
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  std::printf("stopped rank 1: rank 0 named it after %.1f s (--dist-timeout 4)\n", named_after);
  EXPECT_GT(named_after, 0) << read_text(job.log);
  EXPECT_LE(named_after, 4.0 + 1.5) << read_text(job.log);
  const int code = job.wait_for(std::chrono::seconds(60));
  const double took =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - stopped_at).count();
  const std::string log = read_text(job.log);
  std::printf("stopped rank 1: the run ended after %.1f s with status %d\n", took, code);
  ASSERT_NE(code, -2) << log;
  EXPECT_NE(code, 0) << log;
  EXPECT_NE(log.find("lost rank 1"), std::string::npos) << log;
  kill(victim, SIGKILL);
}

TEST_F(Dist, BadLaunchSettingsAreErrorsNotHangs) {
  const std::string base = "train " + lm_flags(corpus) + " --max-steps 2 --dist-timeout 3 --out ";
  auto expect_error = [&](const std::string& args, const std::string& env,
                          const std::string& text) {
    const auto t0 = std::chrono::steady_clock::now();
    auto r = run_cli(args, env);
    const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_NE(r.code, 0) << args << "\n" << r.output;
    EXPECT_NE(r.output.find(text), std::string::npos) << args << "\n" << r.output;
    EXPECT_LE(took, 20.0) << args;
  };
  // Part of the launch variables.
  expect_error(base + dir + "/a", "RANK=0", "LOCAL_RANK");
  expect_error(base + dir + "/a",
               "RANK=2 WORLD_SIZE=2 LOCAL_RANK=0 LOCAL_WORLD_SIZE=1 MASTER_ADDR=127.0.0.1 "
               "MASTER_PORT=29999",
               "RANK");
  // Nobody serves the store: rank 1 gives up within the timeout.
  expect_error(base + dir + "/a",
               "RANK=1 WORLD_SIZE=2 LOCAL_RANK=0 LOCAL_WORLD_SIZE=1 MASTER_ADDR=127.0.0.1 "
               "MASTER_PORT=" + std::to_string(seqmix::dist::free_port()),
               "cannot reach the rendezvous store");
  // Something else answers at MASTER_ADDR:MASTER_PORT (here an HTTP-like server that
  // replies with text to anything).
  {
    int port = 0;
    const int fd = listening_socket(INADDR_LOOPBACK, 4, &port);
    ASSERT_GE(fd, 0);
    std::thread server([fd] {
      for (int i = 0; i < 4; ++i) {
        const int c = accept(fd, nullptr, nullptr);
        if (c < 0) return;
        char buf[256];
        (void)!read(c, buf, sizeof buf);
        const char reply[] = "HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\n";
        (void)!write(c, reply, sizeof reply - 1);
        close(c);
      }
    });
    expect_error(base + dir + "/a",
                 "RANK=1 WORLD_SIZE=2 LOCAL_RANK=0 LOCAL_WORLD_SIZE=1 MASTER_ADDR=127.0.0.1 "
                 "MASTER_PORT=" + std::to_string(port),
                 // LibTorch's client reads the reply as a c10d one ("is not this job's
                 // rendezvous store") or, once the server stops accepting, waits for one
                 // ("cannot reach the rendezvous store ... did not answer").
                 "rendezvous store");
    shutdown(fd, SHUT_RDWR);
    close(fd);
    server.join();
  }
  // Something accepts connections there and never answers (LibTorch's TCPStore would wait for
  // its ping's reply for ever): an error within about twice the timeout, not a hang.
  {
    int port = 0;
    const int fd = listening_socket(INADDR_LOOPBACK, 4, &port);  // nobody ever reads
    ASSERT_GE(fd, 0);
    expect_error(base + dir + "/a",
                 "RANK=1 WORLD_SIZE=2 LOCAL_RANK=0 LOCAL_WORLD_SIZE=1 MASTER_ADDR=127.0.0.1 "
                 "MASTER_PORT=" + std::to_string(port),
                 "did not answer as a c10d store");
    close(fd);
  }
  // The port is taken.
  {
    int port = 0;
    const int fd = listening_socket(INADDR_ANY, 1, &port);
    ASSERT_GE(fd, 0);
    expect_error(base + dir + "/a",
                 "RANK=0 WORLD_SIZE=2 LOCAL_RANK=0 LOCAL_WORLD_SIZE=1 MASTER_ADDR=127.0.0.1 "
                 "MASTER_PORT=" + std::to_string(port),
                 "port");
    close(fd);
  }
  // The global batch must split evenly: the launcher says so before starting any worker
  // (they would say "WORLD_SIZE"), and leaves nothing behind.
  expect_error("train --nproc-per-node 3 " + lm_flags(corpus) + " --max-steps 2 --out " + dir +
                   "/b",
               "", "not a multiple of the 3 workers");
  EXPECT_FALSE(fs::exists(dir + "/b"));
  // A configuration error too.
  expect_error("train --nproc-per-node 2 " + lm_flags(corpus) + " --set train.lr=-1 --out " +
                   dir + "/b",
               "", "train.lr");
  EXPECT_FALSE(fs::exists(dir + "/b"));
  // More workers than twice the cores is refused, saying why.
  expect_error("train --nproc-per-node 1000 " + lm_flags(corpus) + " --out " + dir + "/b", "",
               "per CPU core");
  expect_error(base + dir + "/c --nnodes 2", "", "--nproc-per-node");
  expect_error("train --nproc-per-node 2 --nnodes 2 --node-rank 0 " + lm_flags(corpus) +
                   " --out " + dir + "/c",
               "", "--master-addr");
  expect_error("train --nproc-per-node 0 " + lm_flags(corpus) + " --out " + dir + "/c", "",
               "--nproc-per-node");
  expect_error(base + dir + "/c --dist-timeout 0 --nproc-per-node 2", "", "--dist-timeout");
}

TEST_F(Dist, UnderTorchrunsAgentStoreEveryRankIsAClient) {
  // torchrun's agent serves the store on MASTER_PORT and sets TORCHELASTIC_USE_AGENT_STORE:
  // here the test process plays the agent (the next test runs torchrun itself).
  const int port = seqmix::dist::free_port();
  c10d::TCPStoreOptions o;
  o.port = static_cast<uint16_t>(port);
  o.isServer = true;
  o.waitWorkers = false;
  auto agent = c10::make_intrusive<c10d::TCPStore>("127.0.0.1", o);
  ASSERT_EQ(run_cli("train " + lm_flags(corpus) + " --max-steps 12 --out " + dir + "/one").code, 0);
  std::vector<std::unique_ptr<Background>> workers;
  for (int rank = 0; rank < 2; ++rank)
    workers.push_back(std::make_unique<Background>(
        "env TORCHELASTIC_USE_AGENT_STORE=True TORCHELASTIC_RESTART_COUNT=1 RANK=" +
            std::to_string(rank) + " WORLD_SIZE=2 LOCAL_RANK=" + std::to_string(rank) +
            " LOCAL_WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=" + std::to_string(port) +
            " " + seqmix_bin() + " train " + lm_flags(corpus) + " --max-steps 12 --out " + dir +
            "/agent",
        dir + "/log" + std::to_string(rank)));
  for (int rank = 0; rank < 2; ++rank)
    EXPECT_EQ(workers[rank]->wait_for(std::chrono::seconds(120)), 0)
        << read_text(dir + "/log" + std::to_string(rank));
  expect_same_losses(curve_of(dir + "/one"), curve_of(dir + "/agent"), 1, 12, 1e-5,
                     "2 workers on an agent's store vs 1 worker");
}

TEST_F(Dist, TorchrunFromTheEnvironmentRunsTwoWorkersAsOne) {
  // The torchrun of the PyTorch seqmix is built against (the project environment's), with
  // its own rendezvous (--standalone: a c10d store served by the agent) and --no-python.
  const std::string torchrun =
      (fs::path(SEQMIX_PYTHON).parent_path() / "torchrun").string();
  ASSERT_TRUE(fs::exists(torchrun)) << torchrun;
  ASSERT_EQ(run_cli("train " + lm_flags(corpus) + " --max-steps 12 --out " + dir + "/one").code, 0);
  Background launcher(torchrun + " --standalone --nproc-per-node 2 --no-python " + seqmix_bin() +
                          " train " + lm_flags(corpus) + " --max-steps 12 --out " + dir +
                          "/torchrun",
                      dir + "/torchrun.log");
  ASSERT_EQ(launcher.wait_for(std::chrono::seconds(180)), 0) << read_text(dir + "/torchrun.log");
  expect_same_losses(curve_of(dir + "/one"), curve_of(dir + "/torchrun"), 1, 12, 1e-5,
                     "2 workers under torchrun vs 1 worker");
}

TEST_F(Dist, RanksMustAgreeOnWorldSizeAndConfiguration) {
  const int port = seqmix::dist::free_port();
  const std::string env0 = "RANK=0 LOCAL_RANK=0 LOCAL_WORLD_SIZE=1 MASTER_ADDR=127.0.0.1 "
                           "MASTER_PORT=" + std::to_string(port);
  const std::string env1 = "RANK=1 LOCAL_RANK=0 LOCAL_WORLD_SIZE=1 MASTER_ADDR=127.0.0.1 "
                           "MASTER_PORT=" + std::to_string(port);
  const std::string cmd = seqmix_bin() + " train " + lm_flags(corpus) +
                          " --max-steps 2 --dist-timeout 8 --out ";
  {
    Background r0("env WORLD_SIZE=2 " + env0 + " " + cmd + dir + "/w", dir + "/log0");
    Background r1("env WORLD_SIZE=3 " + env1 + " " + cmd + dir + "/w", dir + "/log1");
    EXPECT_NE(r0.wait_for(std::chrono::seconds(30)), 0);
    EXPECT_NE(r1.wait_for(std::chrono::seconds(30)), 0);
    const std::string both = read_text(dir + "/log0") + read_text(dir + "/log1");
    EXPECT_NE(both.find("WORLD_SIZE differs between ranks"), std::string::npos) << both;
  }
  const int port2 = seqmix::dist::free_port();
  const std::string e0 = "RANK=0 LOCAL_RANK=0 LOCAL_WORLD_SIZE=1 MASTER_ADDR=127.0.0.1 "
                         "WORLD_SIZE=2 MASTER_PORT=" + std::to_string(port2);
  const std::string e1 = "RANK=1 LOCAL_RANK=0 LOCAL_WORLD_SIZE=1 MASTER_ADDR=127.0.0.1 "
                         "WORLD_SIZE=2 MASTER_PORT=" + std::to_string(port2);
  Background r0("env " + e0 + " " + cmd + dir + "/c --lr 0.001", dir + "/log2");
  Background r1("env " + e1 + " " + cmd + dir + "/c --lr 0.002", dir + "/log3");
  EXPECT_EQ(r0.wait_for(std::chrono::seconds(30)), 1);
  EXPECT_EQ(r1.wait_for(std::chrono::seconds(30)), 1);
  const std::string log0 = read_text(dir + "/log2"), log1 = read_text(dir + "/log3");
  EXPECT_NE(log0.find("the configuration differs between ranks"), std::string::npos) << log0;
  EXPECT_NE(log0.find("train.lr"), std::string::npos) << log0;
  EXPECT_NE(log1.find("the configuration differs between ranks"), std::string::npos) << log1;
  // Nothing was trained into the folder.
  EXPECT_FALSE(fs::exists(dir + "/c/checkpoint.pt"));
}

}  // namespace
