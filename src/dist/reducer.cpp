#include "seqmix/dist/reducer.h"

#include <fmt/format.h>

#include <stdexcept>

namespace seqmix::dist {

struct GradientReducer::Bucket {
  at::Tensor flat;             // [numel] the gradients of its parameters, back to back
  std::vector<size_t> params;  // indices into params_
  int64_t pending = 0;         // gradients not in yet this step
  std::shared_ptr<ProcessGroup::Pending> work;
};

GradientReducer::GradientReducer(std::shared_ptr<ProcessGroup> group,
                                 const std::vector<at::Tensor>& params, int64_t bucket_bytes,
                                 int64_t first_bucket_bytes)
    : group_(std::move(group)), alive_(std::make_shared<bool>(true)) {
  if (bucket_bytes < 1 || first_bucket_bytes < 1)
    throw std::invalid_argument("GradientReducer: bucket sizes must be positive");
  for (const auto& p : params)
    if (p.requires_grad()) {
      // CUDA parameters go through NCCL (or Gloo, which stages them through the host),
      // as ProcessGroup::use_device chose.
      if (p.is_sparse() || !(p.device().is_cpu() || p.device().is_cuda()) ||
          (p.scalar_type() != at::kFloat && p.scalar_type() != at::kDouble))
        throw std::invalid_argument(fmt::format(
            "GradientReducer: parameter {} is {} on {}; only dense CPU or CUDA float32/float64 "
            "parameters are supported",
            params_.size(), c10::toString(p.scalar_type()), p.device().str()));
      params_.push_back(p);
    }
  slots_.resize(params_.size());
  // Reverse registration order, one dtype and device per bucket.
  std::unique_ptr<Bucket> cur;
  int64_t cur_bytes = 0, cap = first_bucket_bytes;
  at::ScalarType cur_type = at::kFloat;
  c10::Device cur_device(c10::kCPU);
  auto close = [&] {
    if (!cur) return;
    int64_t n = 0;
    for (size_t i : cur->params) {
      slots_[i] = {buckets_.size(), n, false};
      n += params_[i].numel();
    }
    cur->flat = at::zeros({n}, at::TensorOptions().dtype(cur_type).device(cur_device));
    buckets_.push_back(std::move(cur));
    cur_bytes = 0;
    cap = bucket_bytes;
  };
  for (size_t k = params_.size(); k-- > 0;) {
    const auto& p = params_[k];
    const int64_t bytes = p.numel() * static_cast<int64_t>(p.element_size());
    if (cur && (cur_type != p.scalar_type() || cur_device != p.device() ||
                cur_bytes + bytes > cap))
      close();
    if (!cur) {
      cur = std::make_unique<Bucket>();
      cur_type = p.scalar_type();
      cur_device = p.device();
    }
    cur->params.push_back(k);
    cur_bytes += bytes;
  }
  close();
  reset();
  for (size_t i = 0; i < params_.size(); ++i) {
    std::weak_ptr<bool> alive = alive_;
    params_[i].register_hook([this, i, alive](const at::Tensor& g) {
      if (alive.lock()) ready(i, g);
      return at::Tensor();  // leaves the gradient as it is
    });
  }
}

GradientReducer::~GradientReducer() { *alive_ = false, alive_.reset(); }

void GradientReducer::reset() {
  for (auto& b : buckets_) {
    b->pending = static_cast<int64_t>(b->params.size());
    b->work.reset();
  }
  for (auto& s : slots_) s.done = false;
  next_launch_ = 0;
}

void GradientReducer::ready(size_t i, const at::Tensor& grad) {
  Slot& s = slots_[i];
  Bucket& b = *buckets_[s.bucket];
  auto view = b.flat.narrow(0, s.offset, params_[i].numel());
  if (s.done) {
    // A second gradient for the same parameter in one backward (autograd normally sums them
    // before the hook): add it, unless its bucket has already gone out.
    if (b.work) throw std::logic_error("GradientReducer: a gradient arrived after its bucket was reduced");
    view.add_(grad.reshape(-1));
    return;
  }
  view.copy_(grad.reshape(-1));
  s.done = true;
  if (--b.pending == 0) launch_ready();
}

void GradientReducer::launch_ready() {
  while (next_launch_ < buckets_.size() && buckets_[next_launch_]->pending == 0) {
    Bucket& b = *buckets_[next_launch_];
    if (next_launch_ == 0) first_launch_ = std::chrono::steady_clock::now();
    b.flat.div_(group_->world_size());
    b.work = group_->all_reduce_sum_async(b.flat, fmt::format("gradient all-reduce (bucket {} of {})",
                                                              next_launch_ + 1, buckets_.size()));
    ++next_launch_;
  }
}

GradientReducer::Timing GradientReducer::finish() {
  // Parameters that took no part in this step's loss got no gradient: they count as zero.
  for (size_t i = 0; i < params_.size(); ++i) {
    Slot& s = slots_[i];
    if (s.done) continue;
    Bucket& b = *buckets_[s.bucket];
    b.flat.narrow(0, s.offset, params_[i].numel()).zero_();
    s.done = true;
    --b.pending;
  }
  launch_ready();
  Timing timing;
  for (auto& b : buckets_) timing.exposed += group_->wait(*b->work);
  timing.span = std::chrono::duration<double>(std::chrono::steady_clock::now() - first_launch_).count();
  at::NoGradGuard no_grad;
  for (size_t i = 0; i < params_.size(); ++i) {
    const Slot& s = slots_[i];
    auto mean = buckets_[s.bucket]->flat.narrow(0, s.offset, params_[i].numel()).view(params_[i].sizes());
    at::Tensor& g = params_[i].mutable_grad();
    if (g.defined())
      g.copy_(mean);
    else
      g = mean.clone();
  }
  reset();
  return timing;
}

std::vector<int64_t> GradientReducer::bucket_sizes() const {
  std::vector<int64_t> n;
  for (const auto& b : buckets_) n.push_back(b->flat.numel());
  return n;
}

}  // namespace seqmix::dist
