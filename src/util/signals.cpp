#include "seqmix/util/signals.h"

#include <csignal>
#include <cstring>
#include <ctime>
#include <mutex>
#include <utility>

namespace seqmix::util {

namespace {
volatile std::sig_atomic_t g_signal = 0;
// Whether SIGHUP is ours: not when it was ignored at start (nohup), which stays so.
volatile std::sig_atomic_t g_hup_handled = 0;
// Seconds (CLOCK_MONOTONIC) of the first signal, and how long a repeat is ignored.
volatile double g_first_at = 0, g_grace_s = 0;

double now_s() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);  // async-signal-safe
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

extern "C" void on_stop_signal(int sig) {
  if (g_signal != 0 && g_grace_s > 0) {
    // A repeat within the grace period is the same request arriving twice (a terminal's
    // Ctrl-C reaches the whole process group, and a launcher forwards it too): ignored.
    if (now_s() - g_first_at < g_grace_s) return;
    struct sigaction dfl;
    std::memset(&dfl, 0, sizeof dfl);
    dfl.sa_handler = SIG_DFL;
    sigemptyset(&dfl.sa_mask);
    sigaction(sig, &dfl, nullptr);
    raise(sig);
    return;
  }
  g_signal = sig;
  g_first_at = now_s();
  if (g_grace_s > 0) return;  // the handler stays; see above
  // Whichever of the two comes next ends the process (sigaction is async-signal-safe).
  struct sigaction dfl;
  std::memset(&dfl, 0, sizeof dfl);
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  sigaction(SIGINT, &dfl, nullptr);
  sigaction(SIGTERM, &dfl, nullptr);
  if (g_hup_handled) sigaction(SIGHUP, &dfl, nullptr);
}

// SA_RESTART keeps reads and writes in progress going: the step being computed, or the file
// being written, finishes normally.
void set_action(int sig, void (*handler)(int)) {
  struct sigaction sa;
  std::memset(&sa, 0, sizeof sa);
  sa.sa_handler = handler;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigaction(sig, &sa, nullptr);
}

// The handler runs once and restores the default actions: the next SIGINT or SIGTERM ends
// the process at once, as a user pressing Ctrl-C twice expects.
void install(int sig) { set_action(sig, on_stop_signal); }
}  // namespace

void install_stop_signals() {
  install(SIGINT);
  install(SIGTERM);
  // A closed terminal or a dropped SSH session (SIGHUP) stops a run as SIGTERM does, with a
  // checkpoint, unless the program was started to ignore it (nohup).
  struct sigaction old;
  std::memset(&old, 0, sizeof old);
  if (g_hup_handled || (sigaction(SIGHUP, nullptr, &old) == 0 && old.sa_handler != SIG_IGN)) {
    g_hup_handled = 1;
    install(SIGHUP);
  }
}

void install_stop_signals(double repeat_grace_s) {
  g_grace_s = repeat_grace_s;
  install_stop_signals();
}

int stop_signal() { return g_signal; }

void reset_stop_signal() {
  g_signal = 0;
  install_stop_signals();
}

const char* signal_name(int sig) {
  switch (sig) {
    case SIGINT:
      return "SIGINT";
    case SIGTERM:
      return "SIGTERM";
    case SIGHUP:
      return "SIGHUP";
    default:
      return "a signal";
  }
}

namespace {
std::mutex g_hold_mutex;
int g_hold_depth = 0;
volatile std::sig_atomic_t g_held = 0;
// The signals a hold took over from their default action.
bool g_hold_took[3] = {false, false, false};
constexpr int kHeld[3] = {SIGINT, SIGTERM, SIGHUP};

extern "C" void on_held_signal(int sig) {
  if (g_held == 0) g_held = sig;
}

}  // namespace

HoldStopSignals::HoldStopSignals() {
  const std::lock_guard<std::mutex> lock(g_hold_mutex);
  if (g_hold_depth++ > 0) return;
  for (int i = 0; i < 3; ++i) {
    struct sigaction old;
    std::memset(&old, 0, sizeof old);
    g_hold_took[i] = sigaction(kHeld[i], nullptr, &old) == 0 &&
                     !(old.sa_flags & SA_SIGINFO) && old.sa_handler == SIG_DFL;
    if (g_hold_took[i]) set_action(kHeld[i], on_held_signal);
  }
}

HoldStopSignals::~HoldStopSignals() {
  const std::lock_guard<std::mutex> lock(g_hold_mutex);
  if (--g_hold_depth > 0) return;
  for (int i = 0; i < 3; ++i)
    if (g_hold_took[i]) set_action(kHeld[i], SIG_DFL);
  const int sig = g_held;
  g_held = 0;
  if (sig != 0) raise(sig);  // its default action now: the process ends, the file whole
}

namespace {
thread_local const std::function<void()>* t_interrupt_check = nullptr;
}  // namespace

void check_interrupt() {
  if (t_interrupt_check) (*t_interrupt_check)();
}

// A check set inside another runs first, then the outer one: the trainer's stop-signal check
// during an evaluation keeps the Python bindings' Ctrl-C check working.
ScopedInterruptCheck::ScopedInterruptCheck(std::function<void()> check)
    : previous_(t_interrupt_check) {
  check_ = [inner = std::move(check), outer = previous_] {
    inner();
    if (outer) (*outer)();
  };
  t_interrupt_check = &check_;
}

ScopedInterruptCheck::~ScopedInterruptCheck() { t_interrupt_check = previous_; }

}  // namespace seqmix::util
