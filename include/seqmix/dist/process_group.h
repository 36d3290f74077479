#pragma once
/// @file process_group.h
/// Data-parallel processes on PyTorch's c10d: the launch variables torchrun sets, a
/// rendezvous on c10d::TCPStore, and collectives on c10d::ProcessGroupGloo, with the checks a
/// training run needs to fail cleanly: a bounded timeout on every collective, a heartbeat per
/// rank so that a lost worker is named, and start-up agreement on configuration and data.
///
/// Security: the store (like PyTorch's) is an unauthenticated TCP server on MASTER_PORT that
/// accepts any client. Run distributed jobs on trusted networks only.
///
/// Example (two processes, as `seqmix train --nproc-per-node 2` starts them):
/// @code
///   auto env = seqmix::dist::LaunchEnv::from_environment();   // RANK, WORLD_SIZE, ...
///   auto group = seqmix::dist::ProcessGroup::create(env, std::chrono::seconds(60));
///   at::Tensor t = at::ones({4});
///   group->all_reduce_sum(t, "a test");                       // t == 2 on both ranks
/// @endcode
#include <ATen/ATen.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace seqmix::dist {

/// The launch variables torchrun sets (torch.distributed's names), read and checked.
struct LaunchEnv {
  int rank = 0;              ///< RANK: this process's index in [0, world_size)
  int world_size = 1;        ///< WORLD_SIZE: processes in the job
  int local_rank = 0;        ///< LOCAL_RANK: index among this machine's processes
  int local_world_size = 1;  ///< LOCAL_WORLD_SIZE: processes on this machine
  std::string master_addr;   ///< MASTER_ADDR: host of rank 0, which serves the store
  int master_port = 0;       ///< MASTER_PORT: the store's TCP port
  /// torchrun's agent already serves the store on MASTER_PORT
  /// (TORCHELASTIC_USE_AGENT_STORE=True): every rank, rank 0 too, is only its client.
  bool agent_store = false;
  /// TORCHELASTIC_RESTART_COUNT (0 if unset): keys of a restarted job do not meet the old ones.
  int restart_count = 0;

  bool distributed() const { return world_size > 1 || !master_addr.empty(); }

  /// Reads RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR and MASTER_PORT. With
  /// none of them set the process is alone (world_size 1). With any set, all six must be:
  /// integers in range (0 <= RANK < WORLD_SIZE <= 65536, 0 <= LOCAL_RANK < LOCAL_WORLD_SIZE
  /// <= WORLD_SIZE, 1 <= MASTER_PORT <= 65535), MASTER_ADDR non-empty.
  /// @throws std::invalid_argument naming the variable, what was expected and what was set.
  static LaunchEnv from_environment();
  /// The six variables as "NAME=value" strings (what a launcher puts in a worker's
  /// environment).
  std::vector<std::string> to_environment() const;
};

/// A collective failed or timed out: `lost` holds the ranks found without a heartbeat.
struct PeerLost : std::runtime_error {
  PeerLost(const std::string& what, std::vector<int> lost)
      : std::runtime_error(what), lost(std::move(lost)) {}
  std::vector<int> lost;
};

/// One process's membership in a data-parallel job. Every collective is called by every
/// rank in the same order (c10d's contract); each waits at most timeout() and then throws
/// PeerLost naming the ranks that stopped answering.
class ProcessGroup {
 public:
  /// Joins the job `env` describes: rank 0 serves a c10d::TCPStore on MASTER_PORT, the others
  /// connect to MASTER_ADDR:MASTER_PORT; every rank checks that all agree on WORLD_SIZE and
  /// that no RANK is taken twice, then the Gloo process group connects all pairs.
  /// @throws std::runtime_error within about `timeout` naming the cause: the port in use on
  ///         rank 0, the store unreachable (MASTER_ADDR / MASTER_PORT), WORLD_SIZE differing
  ///         between ranks, a duplicate RANK, ranks that did not join in time.
  static std::shared_ptr<ProcessGroup> create(const LaunchEnv& env,
                                              std::chrono::milliseconds timeout);
  ~ProcessGroup();
  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;

  int rank() const { return env_.rank; }
  int world_size() const { return env_.world_size; }
  const LaunchEnv& env() const { return env_; }
  std::chrono::milliseconds timeout() const { return timeout_; }

  /// Collectives on tensors of `device` from now on: with `nccl` and a CUDA `device` (this
  /// rank's own GPU), through a c10d::ProcessGroupNCCL on the same store, made current with
  /// c10::cuda::set_device; CPU tensors (and CUDA tensors otherwise) keep going through
  /// Gloo, which copies CUDA tensors through the host. Every rank calls it alike, once.
  /// @throws std::runtime_error when NCCL is asked for and this build has none
  ///         (nccl_available() false), naming the alternatives.
  void use_device(const c10::Device& device, bool nccl);
  /// "NCCL" once use_device chose it, else "Gloo".
  std::string backend_name() const;
  /// Sums `t` over all ranks in place (synchronously). `what` names the collective in errors.
  void all_reduce_sum(at::Tensor& t, const std::string& what);
  /// The element-wise maximum over all ranks, in place.
  void all_reduce_max(at::Tensor& t, const std::string& what);
  /// Starts a sum of `t` over all ranks in place; wait() finishes it.
  struct Pending;
  std::shared_ptr<Pending> all_reduce_sum_async(at::Tensor t, const std::string& what);
  /// Waits for an all_reduce_sum_async; returns the seconds spent waiting.
  double wait(Pending& pending);
  /// Copies `tensors` of rank `root` into every rank's tensors (same shapes and dtypes).
  void broadcast(std::vector<at::Tensor>& tensors, int root, const std::string& what);
  /// Rank `root`'s bytes on every rank (`data` is replaced on the others).
  void broadcast_bytes(std::string& data, int root, const std::string& what);
  /// Every rank's `value` checked against rank 0's: if any rank's differs, every rank throws
  /// std::runtime_error "<what> differs between ranks: rank R does not match rank 0:
  /// <describe(rank 0's, R's)>".
  /// `describe` (optional) explains a difference, e.g. the first differing key.
  void agree(const std::string& what, const std::string& value,
             const std::function<std::string(const std::string& ours, const std::string& theirs)>&
                 describe = {});
  /// Runs `fn` on every rank; if it throws on any rank, every rank throws: the failing rank
  /// its own exception, the others std::runtime_error("<what>: rank R failed: <its message>"). A step at
  /// which one rank alone can fail (opening the run folder on rank 0) must go through this,
  /// so that the others do not wait for it until the timeout.
  void all_or_none(const std::string& what, const std::function<void()>& fn);

  /// The ranks whose heartbeat stopped (probed over ~3 heartbeat intervals); rank 0 when the
  /// store it serves no longer answers.
  std::vector<int> lost_ranks();
  /// Wraps a failure of a collective into PeerLost naming the lost ranks.
  [[noreturn]] void raise_lost(const std::string& what, const std::string& cause);

 private:
  ProcessGroup(LaunchEnv env, std::chrono::milliseconds timeout);
  void start_heartbeat();
  std::string key(const std::string& name) const;

  LaunchEnv env_;
  std::chrono::milliseconds timeout_;
  struct Impl;
  std::unique_ptr<Impl> impl_;
  std::atomic<bool> stop_heartbeat_{false};
  std::thread heartbeat_;
  std::string prefix_;  ///< this job's keys in the store
  int64_t sequence_ = 0;  ///< numbers the keys of agree / all_or_none / broadcast_bytes
};

/// Whether this build can make NCCL process groups (a CUDA PyTorch, and NCCL's and CUDA's
/// headers found at build time).
bool nccl_available();
/// Heartbeat interval: a rank whose counter does not advance over three intervals is lost.
std::chrono::milliseconds heartbeat_interval(std::chrono::milliseconds timeout);

/// "rank 1", "ranks 1, 3", or "no rank (every heartbeat is alive)".
std::string describe_ranks(const std::vector<int>& ranks);

}  // namespace seqmix::dist
