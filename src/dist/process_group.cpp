#include "seqmix/dist/process_group.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fmt/format.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <c10/util/Logging.h>

// NCCL comes with a CUDA build of PyTorch (its CMake package defines USE_C10D_NCCL), and its
// header needs NCCL's and the CUDA runtime's headers on the include path: without them the
// CPU build leaves it out and a request for it is an error.
#if defined(USE_C10D_NCCL) && __has_include(<nccl.h>) && __has_include(<cuda_runtime_api.h>)
#define SEQMIX_HAVE_NCCL 1
#include <c10/cuda/CUDAFunctions.h>
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#else
#define SEQMIX_HAVE_NCCL 0
#endif

#include <algorithm>
#include <condition_variable>
#include <cstdlib>
#include <future>
#include <mutex>

namespace seqmix::dist {

namespace {

// An environment variable as an integer in [lo, hi]; nullopt when unset.
std::optional<int64_t> env_int(const char* name, int64_t lo, int64_t hi) {
  const char* v = std::getenv(name);
  if (!v) return std::nullopt;
  const std::string s(v);
  size_t used = 0;
  int64_t x = 0;
  try {
    x = std::stoll(s, &used);
  } catch (...) {
    used = 0;
  }
  if (s.empty() || used != s.size() || x < lo || x > hi)
    throw std::invalid_argument(fmt::format("environment variable {}: must be an integer in "
                                            "[{}, {}], got '{}'",
                                            name, lo, hi, s));
  return x;
}

std::string bytes_to_string(const std::vector<uint8_t>& v) { return std::string(v.begin(), v.end()); }
std::vector<uint8_t> string_to_bytes(const std::string& s) { return std::vector<uint8_t>(s.begin(), s.end()); }

// The local address this machine uses to reach `host` (a UDP "connection" sends nothing):
// Gloo must listen where the other ranks can reach it, and inside a network namespace the
// machine's host name may resolve to an address that does not exist there.
std::string local_address_towards(const std::string& host, int port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* res = nullptr;
  if (getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res) != 0 || !res)
    throw std::runtime_error(fmt::format("MASTER_ADDR '{}': cannot resolve this host name", host));
  std::string out;
  for (addrinfo* a = res; a && out.empty(); a = a->ai_next) {
    const int fd = socket(a->ai_family, SOCK_DGRAM, 0);
    if (fd < 0) continue;
    sockaddr_storage local{};
    socklen_t len = sizeof local;
    if (connect(fd, a->ai_addr, a->ai_addrlen) == 0 &&
        getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) == 0) {
      char buf[INET6_ADDRSTRLEN] = {};
      const void* src = local.ss_family == AF_INET
                            ? static_cast<const void*>(&reinterpret_cast<sockaddr_in*>(&local)->sin_addr)
                            : static_cast<const void*>(&reinterpret_cast<sockaddr_in6*>(&local)->sin6_addr);
      if (inet_ntop(local.ss_family, src, buf, sizeof buf)) out = buf;
    }
    close(fd);
  }
  freeaddrinfo(res);
  if (out.empty())
    throw std::runtime_error(fmt::format("MASTER_ADDR '{}': no route from this machine", host));
  return out;
}

// c10d's messages carry a C++ backtrace after the first line; the first line is the cause.
std::string first_line(const std::string& s) { return s.substr(0, s.find('\n')); }

}  // namespace

LaunchEnv LaunchEnv::from_environment() {
  static const char* names[] = {"RANK",      "WORLD_SIZE",  "LOCAL_RANK",
                                "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"};
  std::vector<std::string> set, unset;
  for (const char* n : names) (std::getenv(n) ? set : unset).push_back(n);
  LaunchEnv e;
  if (set.empty()) return e;
  if (!unset.empty()) {
    std::string a, b;
    for (const auto& n : set) a += (a.empty() ? "" : ", ") + n;
    for (const auto& n : unset) b += (b.empty() ? "" : ", ") + n;
    throw std::invalid_argument(
        "distributed launch: " + a + " set but " + b +
        " not; a worker needs all of RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, "
        "MASTER_ADDR and MASTER_PORT (as torchrun sets them), or none");
  }
  e.world_size = static_cast<int>(*env_int("WORLD_SIZE", 1, 65536));
  e.rank = static_cast<int>(*env_int("RANK", 0, e.world_size - 1));
  e.local_world_size = static_cast<int>(*env_int("LOCAL_WORLD_SIZE", 1, e.world_size));
  e.local_rank = static_cast<int>(*env_int("LOCAL_RANK", 0, e.local_world_size - 1));
  e.master_port = static_cast<int>(*env_int("MASTER_PORT", 1, 65535));
  e.master_addr = std::getenv("MASTER_ADDR");
  if (e.master_addr.empty())
    throw std::invalid_argument("environment variable MASTER_ADDR: must be a host name or "
                                "address, got ''");
  if (const char* a = std::getenv("TORCHELASTIC_USE_AGENT_STORE"))
    e.agent_store = std::string(a) == "True" || std::string(a) == "true" || std::string(a) == "1";
  e.restart_count = static_cast<int>(env_int("TORCHELASTIC_RESTART_COUNT", 0, 1 << 30).value_or(0));
  return e;
}

std::vector<std::string> LaunchEnv::to_environment() const {
  return {"RANK=" + std::to_string(rank),
          "WORLD_SIZE=" + std::to_string(world_size),
          "LOCAL_RANK=" + std::to_string(local_rank),
          "LOCAL_WORLD_SIZE=" + std::to_string(local_world_size),
          "MASTER_ADDR=" + master_addr,
          "MASTER_PORT=" + std::to_string(master_port)};
}

std::chrono::milliseconds heartbeat_interval(std::chrono::milliseconds timeout) {
  return std::clamp(timeout / 40, std::chrono::milliseconds(50), std::chrono::milliseconds(1000));
}

std::string describe_ranks(const std::vector<int>& ranks) {
  if (ranks.empty()) return "no rank (every heartbeat is alive)";
  std::string s = ranks.size() == 1 ? "rank " : "ranks ";
  for (size_t i = 0; i < ranks.size(); ++i) s += (i ? ", " : "") + std::to_string(ranks[i]);
  return s;
}

struct ProcessGroup::Impl {
  c10::intrusive_ptr<c10d::TCPStore> store;      // the main thread's client (or server)
  c10::intrusive_ptr<c10d::TCPStore> beat_store;  // the heartbeat thread's own client
  c10::intrusive_ptr<c10d::ProcessGroupGloo> gloo;
  // CUDA tensors' collectives once use_device chose NCCL; CPU tensors always go through Gloo.
  c10::intrusive_ptr<c10d::Backend> nccl;
  c10d::Backend& backend_for(const at::Tensor& t) {
    return nccl && t.is_cuda() ? static_cast<c10d::Backend&>(*nccl)
                               : static_cast<c10d::Backend&>(*gloo);
  }
  std::mutex beat_mu;
  std::condition_variable beat_cv;
};

struct ProcessGroup::Pending {
  c10::intrusive_ptr<c10d::Work> work;
  std::string what;
};

ProcessGroup::ProcessGroup(LaunchEnv env, std::chrono::milliseconds timeout)
    : env_(std::move(env)), timeout_(timeout), impl_(std::make_unique<Impl>()) {
  // A process may join several jobs in turn (seqmix.train called twice): each its own keys.
  static std::atomic<int> generation{0};
  prefix_ = fmt::format("seqmix/{}/{}/", env_.restart_count, generation++);
}

std::string ProcessGroup::key(const std::string& name) const { return prefix_ + name; }

namespace {

// c10d reports a failed connection attempt itself, as a log line with a C++ backtrace, before
// it throws the error seqmix turns into one line. Its logging is turned down to fatal errors
// for the process, unless the user asked for a level with TORCH_CPP_LOG_LEVEL (c10's own
// variable, read when LibTorch loads).
void quiet_c10d_logging() {
  static std::once_flag once;
  std::call_once(once, [] {
    if (std::getenv("TORCH_CPP_LOG_LEVEL") == nullptr) FLAGS_caffe2_log_level = c10::GLOG_FATAL;
  });
}

// A TCPStore client (or server) made under a deadline. LibTorch 2.x's constructor checks the
// connection with a ping whose reply it waits for without a timeout, so a server that accepts
// the connection and never answers (another service on MASTER_PORT, a proxy) would block it
// for ever. It runs in a thread of its own; past twice `timeout` this throws, and the
// blocked thread is left behind (the process is about to stop with that error).
c10::intrusive_ptr<c10d::TCPStore> connect_store(const std::string& addr,
                                                 const c10d::TCPStoreOptions& o,
                                                 std::chrono::milliseconds timeout) {
  quiet_c10d_logging();
  auto made = std::make_shared<std::promise<c10::intrusive_ptr<c10d::TCPStore>>>();
  auto result = made->get_future();
  std::thread([made, addr, o] {
    try {
      made->set_value(c10::make_intrusive<c10d::TCPStore>(addr, o));
    } catch (...) {
      made->set_exception(std::current_exception());
    }
  }).detach();
  // c10d itself gives up on an address where nothing listens after `timeout` plus one retry
  // delay (measured: 4.3-5.3 s for 3 s); the margin leaves it that.
  if (result.wait_for(2 * timeout + std::chrono::seconds(1)) != std::future_status::ready)
    throw std::runtime_error(
        "the server there accepted the connection but did not answer as a c10d store");
  return result.get();
}

}  // namespace

std::shared_ptr<ProcessGroup> ProcessGroup::create(const LaunchEnv& env,
                                                   std::chrono::milliseconds timeout) {
  if (timeout < std::chrono::seconds(1))
    throw std::invalid_argument(fmt::format("distributed timeout: must be at least 1 s, got {} ms",
                                            timeout.count()));
  // An address that does not resolve is said as such, before c10d tries it (and logs, and
  // blames the port).
  (void)local_address_towards(env.master_addr, env.master_port);
  std::shared_ptr<ProcessGroup> g(new ProcessGroup(env, timeout));
  const std::string where = fmt::format("{}:{}", env.master_addr, env.master_port);
  // The store: rank 0 serves it, every rank (rank 0 too) is a client of it.
  c10d::TCPStoreOptions o;
  o.port = static_cast<uint16_t>(env.master_port);
  o.isServer = env.rank == 0 && !env.agent_store;
  o.waitWorkers = false;
  o.timeout = timeout;
  try {
    g->impl_->store = connect_store(env.master_addr, o, timeout);
  } catch (const std::exception& e) {
    if (o.isServer)
      throw std::runtime_error(fmt::format(
          "rank 0 cannot serve the rendezvous store on port {} (MASTER_PORT, `master_port`): {} "
          "(is the port in use? give another one)",
          env.master_port, first_line(e.what())));
    throw std::runtime_error(fmt::format(
        "rank {} cannot reach the rendezvous store at {} (MASTER_ADDR, MASTER_PORT) within {} "
        "s: {}",
        env.rank, where, timeout.count() / 1000.0, first_line(e.what())));
  }
  auto& store = *g->impl_->store;
  // The server must be this job's store, not another service that accepts connections on
  // that address (a proxy answers anything): rank 0 writes a marker the others must read
  // back, in a thread with a deadline because a foreign server may never answer.
  {
    const std::string marker = "seqmix rendezvous store 1";
    const std::string k = g->key("marker");
    auto client = g->impl_->store;
    auto check = std::make_shared<std::promise<std::string>>();
    auto result = check->get_future();
    std::thread([client, check, k, marker, timeout, rank = env.rank] {
      try {
        if (rank == 0) client->set(k, string_to_bytes(marker));
        client->wait({k}, timeout);
        const std::string got = bytes_to_string(client->get(k));
        check->set_value(got == marker ? std::string() : "it answered with another store's data");
      } catch (const std::exception& e) {
        check->set_value(first_line(e.what()));
      }
    }).detach();
    std::string problem = result.wait_for(timeout + std::chrono::seconds(1)) ==
                                  std::future_status::ready
                              ? result.get()
                              : std::string("it did not answer");
    if (!problem.empty())
      throw std::runtime_error(fmt::format(
          "rank {}: the server at {} (MASTER_ADDR, MASTER_PORT) is not this job's rendezvous "
          "store, which rank 0 serves: {}",
          env.rank, where, problem));
  }
  // Every rank must describe the same job before Gloo connects them (a mismatch there would
  // wait for ranks that never come).
  auto abort = [&](const std::string& why) {
    try {
      store.set(g->key("abort"), string_to_bytes(why));
    } catch (...) {
    }
    throw std::runtime_error(why);
  };
  if (store.add(g->key("claim/" + std::to_string(env.rank)), 1) > 1)
    abort(fmt::format("RANK {} was started twice (each worker needs its own RANK)", env.rank));
  store.set(g->key("world/" + std::to_string(env.rank)), string_to_bytes(std::to_string(env.world_size)));
  std::vector<std::string> joined;
  for (int r = 0; r < env.world_size; ++r) joined.push_back(g->key("world/" + std::to_string(r)));
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  bool checked_rank0 = env.rank == 0;
  for (;;) {
    if (store.check({g->key("abort")})) throw std::runtime_error(bytes_to_string(store.get(g->key("abort"))));
    if (!checked_rank0 && store.check({g->key("world/0")})) {
      const std::string w0 = bytes_to_string(store.get(g->key("world/0")));
      if (w0 != std::to_string(env.world_size))
        abort(fmt::format("WORLD_SIZE differs between ranks: rank {} has {}, rank 0 has {}",
                          env.rank, env.world_size, w0));
      checked_rank0 = true;
    }
    if (checked_rank0 && store.check(joined)) {
      // Every rank reads every rank's WORLD_SIZE, so that a mismatch stops all of them.
      for (int r = 0; r < env.world_size; ++r) {
        const std::string w = bytes_to_string(store.get(joined[static_cast<size_t>(r)]));
        if (w != std::to_string(env.world_size))
          abort(fmt::format("WORLD_SIZE differs between ranks: rank {} has {}, rank {} has {}", r,
                            w, env.rank, env.world_size));
      }
      if (store.check({g->key("abort")}))
        throw std::runtime_error(bytes_to_string(store.get(g->key("abort"))));
      break;
    }
    if (std::chrono::steady_clock::now() > deadline) {
      std::vector<int> missing;
      for (int r = 0; r < env.world_size; ++r)
        if (!store.check({joined[static_cast<size_t>(r)]})) missing.push_back(r);
      throw std::runtime_error(fmt::format(
          "{} of WORLD_SIZE {} did not join the rendezvous at {} within {} s", describe_ranks(missing),
          env.world_size, where, timeout.count() / 1000.0));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  // Gloo's collectives time out a few heartbeats before `timeout`, leaving the probe for the
  // lost rank inside it.
  auto opts = c10d::ProcessGroupGloo::Options::create(timeout - 4 * heartbeat_interval(timeout));
  if (const char* ifname = std::getenv("GLOO_SOCKET_IFNAME"); ifname && *ifname)
    opts->devices.push_back(c10d::ProcessGroupGloo::createDeviceForInterface(ifname));
  else
    opts->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname(
        local_address_towards(env.master_addr, env.master_port)));
  opts->threads = 2;
  try {
    g->impl_->gloo = c10::make_intrusive<c10d::ProcessGroupGloo>(
        c10::static_intrusive_pointer_cast<c10d::Store>(
            c10::make_intrusive<c10d::PrefixStore>(g->key("gloo"), g->impl_->store)),
        env.rank, env.world_size, opts);
  } catch (const std::exception& e) {
    throw std::runtime_error(fmt::format("rank {}: the Gloo process group did not connect: {}",
                                         env.rank, first_line(e.what())));
  }
  g->start_heartbeat();
  return g;
}

void ProcessGroup::start_heartbeat() {
  c10d::TCPStoreOptions o;
  o.port = static_cast<uint16_t>(env_.master_port);
  o.isServer = false;
  o.waitWorkers = false;
  o.timeout = timeout_;
  impl_->beat_store = connect_store(env_.master_addr, o, timeout_);
  const std::string k = key("alive/" + std::to_string(env_.rank));
  heartbeat_ = std::thread([this, k] {
    const auto every = heartbeat_interval(timeout_);
    while (!stop_heartbeat_) {
      try {
        impl_->beat_store->add(k, 1);
      } catch (...) {
        return;  // the store's host is gone; the collectives will say so
      }
      // Locked only while waiting, so the destructor never waits on a blocked store call
      // (the thread is then detached instead of joined, see ~ProcessGroup).
      std::unique_lock<std::mutex> lock(impl_->beat_mu);
      impl_->beat_cv.wait_for(lock, every, [this] { return stop_heartbeat_.load(); });
    }
  });
}

ProcessGroup::~ProcessGroup() {
  {
    std::lock_guard<std::mutex> lock(impl_->beat_mu);
    stop_heartbeat_ = true;
  }
  impl_->beat_cv.notify_all();
  if (heartbeat_.joinable()) heartbeat_.join();
  if (impl_->nccl) {
    try {
      impl_->nccl->shutdown();
    } catch (const std::exception&) {  // a peer already gone: nothing left to release
    }
  }
}

bool nccl_available() { return SEQMIX_HAVE_NCCL != 0; }

void ProcessGroup::use_device(const c10::Device& device, bool nccl) {
  if (!device.is_cuda() || !nccl || impl_->nccl) return;
#if SEQMIX_HAVE_NCCL
  c10::cuda::set_device(device.index());
  auto opts = c10d::ProcessGroupNCCL::Options::create();
  opts->timeout = timeout_ - 4 * heartbeat_interval(timeout_);
  try {
    impl_->nccl = c10::make_intrusive<c10d::ProcessGroupNCCL>(
        c10::make_intrusive<c10d::PrefixStore>(key("nccl"), impl_->store), env_.rank,
        env_.world_size, opts);
  } catch (const std::exception& e) {
    raise_lost("creating the NCCL process group", e.what());
  }
#else
  throw std::runtime_error(fmt::format(
      "rank {}: data-parallel training on {} needs NCCL, and this seqmix was built without it "
      "(its PyTorch has no NCCL, or NCCL's and CUDA's headers were not found at build time); "
      "train on the CPU (train.device = 'cpu'), or name one GPU for the workers to share "
      "(train.device = 'cuda:0', reduced through Gloo)",
      env_.rank, device.str()));
#endif
}

std::string ProcessGroup::backend_name() const { return impl_->nccl ? "NCCL" : "Gloo"; }

std::vector<int> ProcessGroup::lost_ranks() {
  // Read every counter, wait three heartbeats, read again: in a separate thread, because a
  // store whose host is stopped (SIGSTOP) may never answer.
  const auto every = heartbeat_interval(timeout_);
  auto store = impl_->store;
  const int W = env_.world_size, me = env_.rank;
  std::vector<std::string> keys;
  for (int r = 0; r < W; ++r) keys.push_back(key("alive/" + std::to_string(r)));
  auto probe = std::make_shared<std::promise<std::vector<int>>>();
  auto result = probe->get_future();
  std::thread([store, keys, every, W, me, probe] {
    try {
      std::vector<int64_t> before(static_cast<size_t>(W));
      for (int r = 0; r < W; ++r) before[static_cast<size_t>(r)] = store->add(keys[static_cast<size_t>(r)], 0);
      std::this_thread::sleep_for(3 * every);
      std::vector<int> lost;
      for (int r = 0; r < W; ++r)
        if (r != me && store->add(keys[static_cast<size_t>(r)], 0) == before[static_cast<size_t>(r)])
          lost.push_back(r);
      probe->set_value(lost);
    } catch (...) {
      probe->set_value(me == 0 ? std::vector<int>{} : std::vector<int>{0});
    }
  }).detach();
  if (result.wait_for(5 * every) != std::future_status::ready)
    return me == 0 ? std::vector<int>{} : std::vector<int>{0};  // rank 0 serves the store
  return result.get();
}

void ProcessGroup::raise_lost(const std::string& what, const std::string& cause) {
  const std::vector<int> lost = lost_ranks();
  if (lost.empty())
    throw PeerLost(fmt::format("rank {}: {} failed: {}", env_.rank, what, first_line(cause)), lost);
  throw PeerLost(fmt::format("rank {}: lost {} during {}: its heartbeat stopped ({})", env_.rank,
                             describe_ranks(lost), what, first_line(cause)),
                 lost);
}

std::shared_ptr<ProcessGroup::Pending> ProcessGroup::all_reduce_sum_async(at::Tensor t,
                                                                          const std::string& what) {
  std::vector<at::Tensor> v{std::move(t)};
  auto p = std::make_shared<Pending>();
  p->what = what;
  try {
    p->work = impl_->backend_for(v[0]).allreduce(v);
  } catch (const std::exception& e) {
    raise_lost(what, e.what());
  }
  return p;
}

double ProcessGroup::wait(Pending& pending) {
  const auto t0 = std::chrono::steady_clock::now();
  try {
    pending.work->wait();
  } catch (const std::exception& e) {
    raise_lost(pending.what, e.what());
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void ProcessGroup::all_reduce_max(at::Tensor& t, const std::string& what) {
  std::vector<at::Tensor> v{t};
  c10d::AllreduceOptions o;
  o.reduceOp = c10d::ReduceOp::MAX;
  try {
    impl_->backend_for(t).allreduce(v, o)->wait();
  } catch (const std::exception& e) {
    raise_lost(what, e.what());
  }
}

void ProcessGroup::all_reduce_sum(at::Tensor& t, const std::string& what) {
  auto p = all_reduce_sum_async(t, what);
  wait(*p);
}

void ProcessGroup::broadcast(std::vector<at::Tensor>& tensors, int root, const std::string& what) {
  if (tensors.empty()) return;
  c10d::BroadcastOptions o;
  o.rootRank = root;
  // Gloo broadcasts a list of tensors only when they share a dtype and device: one at a time.
  std::vector<c10::intrusive_ptr<c10d::Work>> works;
  try {
    for (auto& t : tensors) {
      std::vector<at::Tensor> one{t};
      works.push_back(impl_->backend_for(t).broadcast(one, o));
    }
    for (auto& w : works) w->wait();
  } catch (const std::exception& e) {
    raise_lost(what, e.what());
  }
}

void ProcessGroup::broadcast_bytes(std::string& data, int root, const std::string& what) {
  std::vector<at::Tensor> size{at::full({1}, static_cast<int64_t>(data.size()), at::kLong)};
  broadcast(size, root, what);
  const int64_t n = size[0].item<int64_t>();
  std::vector<at::Tensor> bytes{at::empty({std::max<int64_t>(n, 1)}, at::kByte)};
  if (rank() == root && n > 0) std::memcpy(bytes[0].data_ptr(), data.data(), static_cast<size_t>(n));
  broadcast(bytes, root, what);
  if (rank() != root) data.assign(static_cast<const char*>(bytes[0].data_ptr()), static_cast<size_t>(n));
}

void ProcessGroup::agree(
    const std::string& what, const std::string& value,
    const std::function<std::string(const std::string&, const std::string&)>& describe) {
  const std::string base = fmt::format("agree/{}/", sequence_++);
  std::string v0 = value;
  broadcast_bytes(v0, 0, what + " (start-up check)");
  at::Tensor differs = at::zeros({world_size()}, at::kInt);
  if (value != v0) {
    differs[rank()] = 1;
    impl_->store->set(key(base + std::to_string(rank())), string_to_bytes(value));
  }
  all_reduce_sum(differs, what + " (start-up check)");
  for (int r = 0; r < world_size(); ++r) {
    if (differs[r].item<int>() == 0) continue;
    std::string theirs = r == rank() ? value : bytes_to_string(impl_->store->get(key(base + std::to_string(r))));
    std::string detail = describe ? describe(v0, theirs) : std::string();
    throw std::runtime_error(fmt::format("{} differs between ranks: rank {} does not match rank 0{}{}",
                                         what, r, detail.empty() ? "" : ": ", detail));
  }
}

void ProcessGroup::all_or_none(const std::string& what, const std::function<void()>& fn) {
  const std::string base = fmt::format("failed/{}/", sequence_++);
  std::exception_ptr error;
  try {
    fn();
  } catch (const std::exception& e) {
    error = std::current_exception();
    impl_->store->set(key(base + std::to_string(rank())), string_to_bytes(e.what()));
  } catch (...) {
    error = std::current_exception();
    impl_->store->set(key(base + std::to_string(rank())), string_to_bytes("unknown error"));
  }
  at::Tensor failed = at::zeros({world_size()}, at::kInt);
  if (error) failed[rank()] = 1;
  all_reduce_sum(failed, what);
  if (error) std::rethrow_exception(error);
  for (int r = 0; r < world_size(); ++r)
    if (failed[r].item<int>() != 0)
      throw std::runtime_error(fmt::format(
          "{}: rank {} failed: {}", what, r,
          bytes_to_string(impl_->store->get(key(base + std::to_string(r))))));
}

}  // namespace seqmix::dist
