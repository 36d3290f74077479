#include "seqmix/nn/ces.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cmath>
#include <limits>
#include <stdexcept>

namespace seqmix::nn {

CESShortcut parse_ces_shortcut(const std::string& name) {
  if (name == "omega") return CESShortcut::omega;
  if (name == "sigmoid") return CESShortcut::sigmoid;
  if (name == "none") return CESShortcut::none;
  throw std::invalid_argument("unknown CES shortcut '" + name +
                              "' (expected omega, sigmoid or none)");
}

std::string to_string(CESShortcut s) {
  switch (s) {
    case CESShortcut::omega:
      return "omega";
    case CESShortcut::sigmoid:
      return "sigmoid";
    case CESShortcut::none:
      break;
  }
  return "none";
}

CESImpl::CESImpl(CESOptions options_) : torch::nn::Cloneable<CESImpl>("CES"), options(std::move(options_)) {
  reset();
}

void CESImpl::reset() {
  const auto& o = options;
  if (o.channels() <= 0)
    throw std::invalid_argument(fmt::format("CES: channels must be positive, got {}", o.channels()));
  if (!(o.r_min() > 0 && o.r_min() <= o.r_max() && o.r_max() < 1))
    throw std::invalid_argument(fmt::format(
        "CES: need 0 < r_min <= r_max < 1, got r_min {} and r_max {}", o.r_min(), o.r_max()));
  if (!(o.dt_min() > 0 && o.dt_min() <= o.dt_max()))
    throw std::invalid_argument(fmt::format("CES: need 0 < dt_min <= dt_max, got {} and {}",
                                            o.dt_min(), o.dt_max()));
  if (!(o.max_lambda() > 0 && o.max_lambda() <= 1) || (o.normalize() && o.max_lambda() >= 1))
    throw std::invalid_argument(fmt::format(
        "CES: max_lambda must be in (0, 1] (below 1 with normalize), got {}", o.max_lambda()));
  const int64_t C = o.bidirectional() ? 2 * o.channels() : o.channels();
  const int64_t parts = o.real() ? 1 : 2;
  log_lambda = register_parameter("log_lambda", torch::empty({C, parts}));
  if (o.alpha()) log_alpha = register_parameter("log_alpha", torch::empty({C, parts}));
  if (o.beta()) log_beta = register_parameter("log_beta", torch::empty({C, parts}));
  if (o.shortcut() != CESShortcut::none)
    omega = register_parameter("omega", torch::empty({o.channels()}));
  reset_parameters();
}

void CESImpl::reset_parameters() {
  torch::NoGradGuard no_grad;
  const auto& o = options;
  const int64_t C = log_lambda.size(0);
  const auto opt = at::TensorOptions().dtype(at::kDouble);
  // |lambda|^2 ~ U(r_min^2, r_max^2); log lambda = -nu + i theta with nu = -log |lambda|.
  const at::Tensor u1 = at::rand({C}, opt), u2 = at::rand({C}, opt);
  const at::Tensor nu =
      -0.5 * at::log(u1 * (o.r_max() * o.r_max() - o.r_min() * o.r_min()) + o.r_min() * o.r_min());
  const at::Tensor theta = o.real() ? at::zeros_like(u2) : o.max_phase() * u2;
  // lambda' = log(log lambda) = log(-nu + i theta): modulus and argument (the argument is pi
  // for a real lambda, fixed in coefficients()).
  log_lambda.select(1, 0).copy_(0.5 * at::log(nu * nu + theta * theta));
  if (!o.real()) log_lambda.select(1, 1).copy_(at::atan2(theta, -nu));
  // Drawn even when unused, so that the other parameters get the same values with and
  // without an ablation.
  const at::Tensor log_dt = std::log(o.dt_min()) +
                            at::rand({C}, opt) * (std::log(o.dt_max()) - std::log(o.dt_min()));
  if (log_alpha.defined()) log_alpha.copy_(log_dt.unsqueeze(1).expand_as(log_alpha));
  if (log_beta.defined()) log_beta.normal_(0.0, 0.2);
  if (omega.defined()) omega.normal_(0.0, 1.0);
}

void CESImpl::pretty_print(std::ostream& stream) const {
  stream << "seqmix::nn::CES(channels=" << options.channels()
         << ", bidirectional=" << options.bidirectional() << ", max_lambda=" << options.max_lambda()
         << ", shortcut=" << to_string(options.shortcut()) << ", normalize=" << options.normalize()
         << ", alpha=" << options.alpha() << ", beta=" << options.beta()
         << ", real=" << options.real()
         << ", backend=" << ops::to_string(options.backend()) << ")";
}

ops::CESCoefficients CESImpl::coefficients() const {
  // The ablations as [C, 2] parameters of ces_coefficients: a real parameter gets the
  // imaginary part that keeps its number real (lambda' = log(log lambda) has argument pi for
  // lambda in (0, 1); alpha = e^{a0} + i e^{a1} needs e^{a1} = 0; beta = e^{b0 + i b1} needs
  // b1 = 0); an absent alpha or beta is the constant 1.
  const double inf = std::numeric_limits<double>::infinity();
  auto complete = [&](const at::Tensor& p, double imaginary) {
    return options.real() ? at::cat({p, at::full_like(p, imaginary)}, 1) : p;
  };
  const auto C = log_lambda.size(0);
  const at::Tensor one = at::tensor({0.0, -inf}, log_lambda.options().requires_grad(false))
                             .expand({C, 2});  // alpha = 1
  const at::Tensor ll = complete(log_lambda, M_PI);
  const at::Tensor la = log_alpha.defined() ? complete(log_alpha, -inf) : one;
  const at::Tensor lb = log_beta.defined() ? complete(log_beta, 0.0)
                                           : at::zeros({C, 2}, log_lambda.options());
  return ops::ces_coefficients(ll, la, lb, options.max_lambda(), options.normalize());
}

at::Tensor CESImpl::shortcut(const at::Tensor& x) const {
  switch (options.shortcut()) {
    case CESShortcut::omega:
      return x * omega;
    case CESShortcut::sigmoid:
      return x * at::sigmoid(omega);
    case CESShortcut::none:
      break;
  }
  return at::Tensor();
}

at::Tensor CESImpl::forward(const at::Tensor& x, const at::Tensor& mask) {
  if (x.dim() != 3 || x.size(2) != options.channels())
    throw std::invalid_argument(fmt::format("CES: x must be [B, L, {}], got [{}]",
                                            options.channels(), fmt::join(x.sizes(), ", ")));
  at::Tensor y = ops::ces_scan(x, coefficients(), mask,
                               options.bidirectional() ? ops::Direction::bidirectional
                                                       : ops::Direction::causal,
                               options.backend());
  const at::Tensor s = shortcut(x);
  return s.defined() ? y + s : y;
}

at::Tensor CESImpl::init_state(int64_t batch) const {
  if (options.bidirectional())
    throw std::logic_error("CES: a bidirectional CES cannot decode step by step");
  return torch::zeros({batch, options.channels(), 2}, log_lambda.options().requires_grad(false));
}

at::Tensor CESImpl::step(const at::Tensor& x_t, at::Tensor& state) {
  if (options.bidirectional())
    throw std::logic_error("CES: a bidirectional CES cannot decode step by step");
  if (x_t.dim() != 2 || x_t.size(1) != options.channels())
    throw std::invalid_argument(fmt::format("CES::step: x_t must be [B, {}], got [{}]",
                                            options.channels(), fmt::join(x_t.sizes(), ", ")));
  if (!state.defined() || state.dim() != 3 || state.size(0) != x_t.size(0) ||
      state.size(1) != options.channels() || state.size(2) != 2)
    throw std::invalid_argument("CES::step: state was not made by init_state for this batch");
  const ops::CESCoefficients k = coefficients();
  const at::Tensor mr = k.mu.select(1, 0), mi = k.mu.select(1, 1);
  const at::Tensor sr = state.select(2, 0), si = state.select(2, 1);
  // s <- mu s + x, y = Re(c s): the recurrence of the kernel, one position.
  const at::Tensor nr = mr * sr - mi * si + x_t, ni = mr * si + mi * sr;
  state = at::stack({nr, ni}, 2);
  at::Tensor y = k.c.select(1, 0) * nr - k.c.select(1, 1) * ni;
  const at::Tensor s = shortcut(x_t);
  return s.defined() ? y + s : y;
}

ESMLPImpl::ESMLPImpl(ESMLPOptions options_)
    : Mixer<ESMLPImpl>("ESMLP"), options(std::move(options_)) {
  reset();
}

void ESMLPImpl::reset() {
  const int64_t D = options.d_model(), H = options.d_hidden();
  if (D <= 0 || H <= 0)
    throw std::invalid_argument(
        fmt::format("ESMLP: d_model and d_hidden must be positive, got {} and {}", D, H));
  in_proj = register_module("in_proj", torch::nn::Linear(D, H));
  CESOptions co = options.ces();
  co.channels(H).bidirectional(!options.causal());
  ces = register_module("ces", CES(co));
  out_proj = register_module("out_proj", torch::nn::Linear(H, D));
  if (options.gate()) gate_proj = register_module("gate_proj", torch::nn::Linear(D, D));
  reset_parameters();
}

void ESMLPImpl::reset_parameters() {
  torch::NoGradGuard no_grad;
  for (auto* lin : {&in_proj, &out_proj, &gate_proj}) {
    if (!*lin) continue;
    torch::nn::init::xavier_uniform_((*lin)->weight);
    (*lin)->bias.zero_();
  }
}

void ESMLPImpl::pretty_print(std::ostream& stream) const {
  stream << "seqmix::nn::ESMLP(d_model=" << options.d_model() << ", d_hidden=" << options.d_hidden()
         << ", causal=" << options.causal() << ", gate=" << options.gate() << ")";
}

at::Tensor ESMLPImpl::forward(const at::Tensor& x, const at::Tensor& mask) {
  if (x.dim() != 3 || x.size(2) != options.d_model())
    throw std::invalid_argument(fmt::format("ESMLP: x must be [B, L, {}], got [{}]",
                                            options.d_model(), fmt::join(x.sizes(), ", ")));
  at::Tensor h = in_proj(x);
  if (mask.defined()) h = h.masked_fill(mask.logical_not().unsqueeze(-1), 0);
  at::Tensor z = out_proj(at::relu(ces(h, mask)));
  return gate_proj ? z * at::sigmoid(gate_proj(x)) : z;
}

MixerState ESMLPImpl::init_state(int64_t batch) const {
  MixerState s;
  s.tensors = {ces->init_state(batch)};  // throws for the bidirectional form
  return s;
}

at::Tensor ESMLPImpl::step(const at::Tensor& x_t, MixerState& state) {
  if (state.tensors.size() != 1)
    throw std::invalid_argument("ESMLP::step: state was not made by init_state");
  at::Tensor z = out_proj(at::relu(ces->step(in_proj(x_t), state.tensors[0])));
  ++state.pos;
  return gate_proj ? z * at::sigmoid(gate_proj(x_t)) : z;
}

Block make_esmlp_block(const ESMLPOptions& options, const std::string& norm_type, bool pre_norm,
                       double dropout, bool norm) {
  return Block(std::make_shared<ESMLPImpl>(options),
               FeedForwardOptions(options.d_model(), options.d_hidden()), pre_norm, dropout, norm,
               /*with_ffn=*/false, norm_type);
}

}  // namespace seqmix::nn
