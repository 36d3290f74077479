#pragma once
/// @file launcher.h
/// Starts the local workers of a data-parallel job, as `torchrun` does: N copies of this
/// program on this machine, each with RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE,
/// MASTER_ADDR and MASTER_PORT in its environment (process_group.h reads them).
///
/// `--standalone` (one machine, torchrun's name): MASTER_ADDR is 127.0.0.1 and MASTER_PORT a
/// free port the launcher picks. Several machines: the same command on each, with `nnodes`,
/// `node_rank`, and rank 0's machine as master_addr:master_port; node k runs ranks
/// k * nproc_per_node .. (k + 1) * nproc_per_node - 1.
///
/// The launcher forwards SIGINT and SIGTERM to its workers (which checkpoint and stop), and
/// when a worker fails it gives the others `timeout` plus a few seconds to notice and exit
/// with their own message before it terminates them. Its exit status is the first failed
/// worker's (128 + signal for a worker killed by a signal), 0 if all succeeded.
#include <chrono>
#include <string>
#include <vector>

namespace seqmix::dist {

struct LaunchOptions {
  int nproc_per_node = 1;
  int nnodes = 1;
  int node_rank = 0;
  std::string master_addr;  ///< empty: 127.0.0.1 (one machine only)
  int master_port = 0;      ///< 0: a free port (one machine only)
  std::chrono::milliseconds timeout{60000};
  /// Checks the combination: nproc_per_node in [1, max_workers_per_node()], nnodes in
  /// [1, 1024], node_rank in [0, nnodes), port in [0, 65535]; several machines need
  /// master_addr and master_port.
  /// @throws std::invalid_argument naming the flag (--nproc-per-node, --nnodes, ...).
  void validate() const;
};

/// Runs `argv` (argv[0] is ignored: the workers run /proc/self/exe) as this machine's
/// workers and waits for them. Returns the exit status described above.
/// @throws std::runtime_error if a worker cannot be started.
int launch_workers(const LaunchOptions& options, const std::vector<std::string>& argv);

/// The most workers one machine starts: 2 per CPU core this process may run on
/// (sched_getaffinity). Each worker computes on at least one core; beyond that they only
/// time-slice the cores, every step gets slower, and each costs a LibTorch process's memory
/// (1,000 workers on 2 cores took the machine to a load average of 320).
int max_workers_per_node();

/// A TCP port that was free on 127.0.0.1 a moment ago (bound to port 0 and released).
int free_port();

}  // namespace seqmix::dist
