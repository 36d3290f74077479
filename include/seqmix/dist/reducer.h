#pragma once
/// @file reducer.h
/// Gradient averaging for data-parallel training with communication overlapped with the
/// backward pass, following PyTorch's DistributedDataParallel (Li et al., "PyTorch
/// Distributed: Experiences on Accelerating Data Parallel Training", VLDB 2020, Sec. 3.2):
/// parameters are packed into buckets in reverse registration order (the order backward
/// produces their gradients); a hook on each parameter copies its gradient into its bucket
/// as soon as autograd computes it, and a bucket whose gradients are all in is all-reduced
/// asynchronously while backward goes on. Buckets are launched in index order on every rank,
/// so the ranks' collectives always match.
///
/// Example:
/// @code
///   seqmix::dist::GradientReducer reducer(group, model->parameters());
///   loss.backward();                  // hooks launch all-reduces of finished buckets
///   reducer.finish();                 // p.grad() is now the mean over ranks
/// @endcode
#include <ATen/ATen.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <vector>

#include "seqmix/dist/process_group.h"

namespace seqmix::dist {

class GradientReducer {
 public:
  /// Registers a gradient hook on every parameter of `params` that requires a gradient.
  /// `bucket_bytes` caps a bucket (DDP's bucket_cap_mb, default 25 MiB); the first bucket
  /// launched (the last parameters) is capped at `first_bucket_bytes` (DDP: 1 MiB) so that
  /// communication starts early.
  /// @throws std::invalid_argument if a parameter is not a dense CPU or CUDA float/double
  ///         tensor or the sizes are not positive.
  GradientReducer(std::shared_ptr<ProcessGroup> group, const std::vector<at::Tensor>& params,
                  int64_t bucket_bytes = 25 << 20, int64_t first_bucket_bytes = 1 << 20);
  ~GradientReducer();
  GradientReducer(const GradientReducer&) = delete;
  GradientReducer& operator=(const GradientReducer&) = delete;

  /// Where a step's communication time went, seconds.
  struct Timing {
    double exposed = 0;  ///< finish() waiting after backward: the part not hidden under it
    double span = 0;     ///< from the first bucket's launch to the last one's completion
  };
  /// After backward: launches the buckets not launched yet (parameters that got no gradient
  /// contribute zeros), waits for all, and writes the mean over ranks into every parameter's
  /// grad().
  /// @throws PeerLost if a rank is lost.
  Timing finish();

  /// Number of buckets and their sizes in elements, in launch order.
  std::vector<int64_t> bucket_sizes() const;

 private:
  struct Bucket;
  void ready(size_t param, const at::Tensor& grad);
  void launch_ready();
  void reset();

  std::shared_ptr<ProcessGroup> group_;
  std::vector<at::Tensor> params_;
  struct Slot {
    size_t bucket;
    int64_t offset;
    bool done;
  };
  std::vector<Slot> slots_;
  std::vector<std::unique_ptr<Bucket>> buckets_;
  size_t next_launch_ = 0;
  std::chrono::steady_clock::time_point first_launch_;
  std::shared_ptr<bool> alive_;  ///< hooks outlive the reducer: they check this first
};

}  // namespace seqmix::dist
