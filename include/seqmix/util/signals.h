#pragma once
#include <functional>
/// @file signals.h
/// Cooperative interruption: SIGINT and SIGTERM ask a long job (training) to stop at a safe
/// point; a second signal ends the process at once (the signal's default action).
namespace seqmix::util {

/// Installs the handlers for SIGINT, SIGTERM and SIGHUP (unless SIGHUP is ignored, as under
/// nohup): the first one records the signal and restores the default actions, so a second
/// one terminates the process. Programs (the CLI)
/// call this; the library only polls stop_signal(). Idempotent.
void install_stop_signals();

/// As install_stop_signals(), except that a second signal within `repeat_grace_s` seconds of
/// the first is ignored (only a later one ends the process): for data-parallel workers, which
/// can get one Ctrl-C twice (from the terminal and from their launcher).
void install_stop_signals(double repeat_grace_s);

/// The signal that asked to stop (SIGINT or SIGTERM), or 0.
int stop_signal();

/// Forgets a recorded signal and re-installs the handlers (tests; a program that handled an
/// interruption and goes on).
void reset_stop_signal();

/// Long library loops that are not training (generation per token, evaluation per batch) call
/// check_interrupt() between units of work. It calls the current thread's check, set by a
/// ScopedInterruptCheck, which may throw to stop the work; without one it does nothing. The
/// Python bindings set a check that raises KeyboardInterrupt on Ctrl-C (a call that releases
/// the GIL would otherwise run to its end: Python handles signals only between bytecodes).
void check_interrupt();

/// Sets this thread's interrupt check for the guard's lifetime: check_interrupt() calls it,
/// then the check that was current before (which is current again after).
class ScopedInterruptCheck {
 public:
  explicit ScopedInterruptCheck(std::function<void()> check);
  ~ScopedInterruptCheck();
  ScopedInterruptCheck(const ScopedInterruptCheck&) = delete;
  ScopedInterruptCheck& operator=(const ScopedInterruptCheck&) = delete;

 private:
  std::function<void()> check_;
  const std::function<void()>* previous_;
};

/// Holds SIGINT, SIGTERM and SIGHUP back while a file or folder is written whole (a temporary
/// sibling, then a rename): for each of them whose action is the default (the process ends)
/// the guard records the signal instead, and on leaving restores the default and raises the
/// recorded signal again, so the process ends with the file whole or removed, never with a
/// partial temporary left behind. A handler already installed (install_stop_signals(),
/// Python's) is left as it is: it only records. Nestable and thread-safe (the actions are
/// the process's, so the outermost guard alone installs and restores).
class HoldStopSignals {
 public:
  HoldStopSignals();
  ~HoldStopSignals();
  HoldStopSignals(const HoldStopSignals&) = delete;
  HoldStopSignals& operator=(const HoldStopSignals&) = delete;
};

/// "SIGINT", "SIGTERM", or "signal N".
const char* signal_name(int sig);

}  // namespace seqmix::util
