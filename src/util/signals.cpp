#include "seqmix/util/signals.h"

#include <csignal>
#include <cstring>

namespace seqmix::util {

namespace {
volatile std::sig_atomic_t g_signal = 0;

extern "C" void on_stop_signal(int sig) {
  g_signal = sig;
  // Whichever of the two comes next ends the process (sigaction is async-signal-safe).
  struct sigaction dfl;
  std::memset(&dfl, 0, sizeof dfl);
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  sigaction(SIGINT, &dfl, nullptr);
  sigaction(SIGTERM, &dfl, nullptr);
}

void install(int sig) {
  struct sigaction sa;
  std::memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  // The handler runs once and restores the default actions: the next SIGINT or SIGTERM ends
  // the process at once, as a user pressing Ctrl-C twice expects. SA_RESTART keeps reads and
  // writes in progress going, so the step being computed finishes normally.
  sa.sa_flags = SA_RESTART;
  sigaction(sig, &sa, nullptr);
}
}  // namespace

void install_stop_signals() {
  install(SIGINT);
  install(SIGTERM);
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
    default:
      return "a signal";
  }
}

}  // namespace seqmix::util
