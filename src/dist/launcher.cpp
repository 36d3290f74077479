#include "seqmix/dist/launcher.h"

#include <netinet/in.h>
#include <sched.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <map>
#include <stdexcept>
#include <thread>

#include "seqmix/dist/process_group.h"

extern char** environ;

namespace seqmix::dist {

namespace {

std::atomic<int> g_forward_signal{0};
extern "C" void remember_signal(int sig) { g_forward_signal = sig; }

// The launch variables a worker gets override any inherited ones.
bool is_launch_variable(const std::string& entry) {
  for (const char* n : {"RANK=", "WORLD_SIZE=", "LOCAL_RANK=", "LOCAL_WORLD_SIZE=",
                        "MASTER_ADDR=", "MASTER_PORT=", "GROUP_RANK="})
    if (entry.rfind(n, 0) == 0) return true;
  return false;
}

std::string status_text(int status) {
  if (WIFSIGNALED(status)) return fmt::format("was killed by signal {} ({})", WTERMSIG(status),
                                              strsignal(WTERMSIG(status)));
  return fmt::format("exited with status {}", WEXITSTATUS(status));
}

int exit_code(int status) {
  return WIFSIGNALED(status) ? 128 + WTERMSIG(status) : WEXITSTATUS(status);
}

}  // namespace

int max_workers_per_node() {
  cpu_set_t set;
  CPU_ZERO(&set);
  int cores = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 0;
  if (cores < 1) cores = std::max(1u, std::thread::hardware_concurrency());
  return 2 * cores;
}

void LaunchOptions::validate() const {
  auto bad = [](const char* flag, const std::string& what, long long got) {
    throw std::invalid_argument(fmt::format("{}: must be {}, got {}", flag, what, got));
  };
  const int most = max_workers_per_node();
  if (nproc_per_node < 1 || nproc_per_node > most)
    bad("`nproc_per_node`",
        fmt::format("an integer in [1, {}] (2 per CPU core this process may use: each worker "
                    "computes on at least one core, more only time-slice them)",
                    most),
        nproc_per_node);
  if (nnodes < 1 || nnodes > 1024) bad("`nnodes`", "an integer in [1, 1024]", nnodes);
  if (node_rank < 0 || node_rank >= nnodes)
    bad("`node_rank`", fmt::format("an integer in [0, `nnodes`) = [0, {})", nnodes), node_rank);
  if (master_port < 0 || master_port > 65535)
    bad("`master_port`", "a TCP port in [1, 65535] (or 0: a free one, one machine only)",
        master_port);
  if (timeout < std::chrono::seconds(1))
    bad("`dist_timeout`", "at least 1 second", static_cast<long long>(timeout.count() / 1000));
  if (nnodes > 1 && (master_addr.empty() || master_port == 0))
    throw std::invalid_argument(
        "`nnodes` > 1: every machine needs `master_addr` and `master_port` (the address and a "
        "free port of the machine with `node_rank` 0)");
}

int free_port() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) throw std::runtime_error(std::string("free_port: socket: ") + std::strerror(errno));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  socklen_t len = sizeof a;
  if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    const std::string e = std::strerror(errno);
    close(fd);
    throw std::runtime_error("free_port: " + e);
  }
  close(fd);
  return ntohs(a.sin_port);
}

int launch_workers(const LaunchOptions& o, const std::vector<std::string>& argv) {
  o.validate();
  LaunchEnv env;
  env.world_size = o.nproc_per_node * o.nnodes;
  env.local_world_size = o.nproc_per_node;
  env.master_addr = o.master_addr.empty() ? "127.0.0.1" : o.master_addr;
  env.master_port = o.master_port > 0 ? o.master_port : free_port();

  std::vector<std::string> base_env;
  for (char** e = environ; *e; ++e)
    if (!is_launch_variable(*e)) base_env.emplace_back(*e);

  // Forward the first SIGINT / SIGTERM to the workers, which checkpoint and stop; a second
  // one is forwarded too (the workers then end at once).
  struct sigaction sa {};
  sa.sa_handler = remember_signal;
  sigemptyset(&sa.sa_mask);
  struct sigaction old_int {}, old_term {}, old_hup {}, old_chld {}, dfl {};
  sigaction(SIGINT, &sa, &old_int);
  sigaction(SIGTERM, &sa, &old_term);
  // A hangup (closed terminal) reaches the launcher alone: forwarded too, unless ignored.
  sigaction(SIGHUP, nullptr, &old_hup);
  if (old_hup.sa_handler != SIG_IGN) sigaction(SIGHUP, &sa, nullptr);
  // waitpid needs SIGCHLD's default action (an inherited SIG_IGN reaps children unseen).
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  sigaction(SIGCHLD, &dfl, &old_chld);
  auto restore = [&] {
    sigaction(SIGINT, &old_int, nullptr);
    sigaction(SIGTERM, &old_term, nullptr);
    sigaction(SIGHUP, &old_hup, nullptr);
    sigaction(SIGCHLD, &old_chld, nullptr);
  };
  // Each worker in its own process group: a terminal's Ctrl-C reaches the launcher alone,
  // which forwards it once (the workers would otherwise get it twice and take the second as
  // "end now").
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP);
  posix_spawnattr_setpgroup(&attr, 0);
  const std::string launcher_pid = "SEQMIX_LAUNCHER_PID=" + std::to_string(getpid());

  std::map<pid_t, int> rank_of;  // running workers
  auto terminate_all = [&](int sig) {
    for (const auto& [pid, r] : rank_of) kill(pid, sig);
  };
  int started = 0;
  for (int i = 0; i < o.nproc_per_node; ++i) {
    // Ctrl-C or SIGTERM while starting: start no more (the loop below forwards it to those
    // already running, which stop).
    if (g_forward_signal.load() != 0) break;
    env.local_rank = i;
    env.rank = o.node_rank * o.nproc_per_node + i;
    std::vector<std::string> envs = base_env;
    for (auto& v : env.to_environment()) envs.push_back(v);
    envs.push_back(launcher_pid);  // the worker ends with its launcher (see DistFlags::join)
    std::vector<char*> cargv, cenv;
    cargv.push_back(const_cast<char*>("seqmix"));
    for (size_t k = 1; k < argv.size(); ++k) cargv.push_back(const_cast<char*>(argv[k].c_str()));
    cargv.push_back(nullptr);
    for (auto& v : envs) cenv.push_back(v.data());
    cenv.push_back(nullptr);
    pid_t pid = 0;
    const int rc = posix_spawn(&pid, "/proc/self/exe", nullptr, &attr, cargv.data(), cenv.data());
    if (rc != 0) {
      terminate_all(SIGKILL);
      for (const auto& [p, r] : rank_of) waitpid(p, nullptr, 0);
      posix_spawnattr_destroy(&attr);
      restore();
      throw std::runtime_error(fmt::format("cannot start worker rank {}: {}", env.rank, std::strerror(rc)));
    }
    rank_of[pid] = env.rank;
    ++started;
  }
  posix_spawnattr_destroy(&attr);
  if (started < o.nproc_per_node)
    std::fprintf(stderr, "seqmix: stopping: a signal came while starting workers (%d of %d "
                         "started)\n", started, o.nproc_per_node);
  else
    std::fprintf(stderr, "seqmix: started %d workers (ranks %d..%d of %d), rendezvous %s:%d\n",
                 o.nproc_per_node, o.node_rank * o.nproc_per_node,
                 (o.node_rank + 1) * o.nproc_per_node - 1, env.world_size,
                 env.master_addr.c_str(), env.master_port);
  int result = 0;
  if (started < o.nproc_per_node) result = 128 + g_forward_signal.load();

  int forwarded = 0;
  std::chrono::steady_clock::time_point failed_at{};
  bool failed = false, terminated = false;
  while (!rank_of.empty()) {
    if (const int sig = g_forward_signal.exchange(0); sig != 0) {
      terminate_all(sig);
      ++forwarded;
    }
    int status = 0;
    const pid_t pid = waitpid(-1, &status, WNOHANG);
    if (pid > 0 && rank_of.count(pid)) {
      const int r = rank_of[pid];
      rank_of.erase(pid);
      if (!(WIFEXITED(status) && WEXITSTATUS(status) == 0)) {
        if (!failed) {
          failed = true;
          failed_at = std::chrono::steady_clock::now();
          result = exit_code(status);
        }
        if (WIFSIGNALED(status) || forwarded == 0)
          std::fprintf(stderr, "seqmix: worker rank %d (pid %d) %s\n", r, static_cast<int>(pid),
                       status_text(status).c_str());
      }
      continue;
    }
    if (pid < 0 && errno == ECHILD) break;
    // After a failure the others get the collectives' timeout to see it and exit on their
    // own (each names the lost rank); then they are stopped.
    if (failed && !rank_of.empty()) {
      const auto waited = std::chrono::steady_clock::now() - failed_at;
      if (!terminated && waited > o.timeout + std::chrono::seconds(5)) {
        std::fprintf(stderr, "seqmix: stopping the remaining workers %zu s after the failure\n",
                     static_cast<size_t>(std::chrono::duration_cast<std::chrono::seconds>(waited).count()));
        terminate_all(SIGTERM);
        terminated = true;
      } else if (terminated && waited > o.timeout + std::chrono::seconds(10)) {
        terminate_all(SIGKILL);
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  restore();
  return result;
}

}  // namespace seqmix::dist
