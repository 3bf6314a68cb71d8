// Library entry: reads the configuration the launcher left in the environment, starts the
// process recorder, and hooks fork and exit. Everything else is lazy (the stream file is
// created on the first event), so processes that record nothing leave nothing behind.
#include <dlfcn.h>
#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>

#include <string>
#include <string_view>

#include "format/OwnThreads.h"
#include "interpose/ActiveSession.h"
#include "interpose/ErrorBoundary.h"
#include "interpose/FileServe.h"
#include "interpose/RealFn.h"
#include "interpose/SignalHandlers.h"

namespace dlrr {
namespace {

// Locks in RecordSession.h's order: the file log's, then the session's.
void atforkPrepare() {
  if (FileLog* f = files::fileLog()) f->lockForFork();
  if (RecordSession* s = processRecorder()) s->beforeFork();
}
void atforkParent() {
  if (RecordSession* s = processRecorder()) s->afterForkParent();
  if (FileLog* f = files::fileLog()) f->unlockAfterFork();
}
void atforkChild() {
  ownThreads().store(0);  // the child has one thread, the job's that forked
  resetSwallowedAfterFork();
  if (RecordSession* s = processRecorder()) s->afterForkChild();
  if (FileLog* f = files::fileLog()) f->unlockAfterFork();
}

void atExit() {
  // The code is unknown on this path (main returned: Python's interpreter exits so); -1, which
  // exit()/_exit() below never record, says so, and readers take the launcher's wait status.
  if (RecordSession* s = processRecorder()) s->onExit(true, -1);
}

void replayAtExit() {
  if (ReplaySession* r = processReplayer()) r->writeReport("exit");
}

// Replay's fork protocol: FileRedirect's lock, then the session's (ReplaySession.h).
void atforkReplayPrepare() {
  if (FileRedirect* fr = files::writeRedirect()) fr->lockForFork();
  if (ReplaySession* r = processReplayerAny()) r->beforeFork();
}
void atforkReplayParent() {
  if (ReplaySession* r = processReplayerAny()) r->afterForkParent();
  if (FileRedirect* fr = files::writeRedirect()) fr->unlockAfterFork();
}
void atforkReplayChild() {
  // DataLoader workers (if any start in replay) must not consume the served entropy; a forked
  // Hogwild trainer whose identity is the replayed stream's takes the stream over.
  if (ReplaySession* r = processReplayerAny()) r->afterForkChild();
  if (FileRedirect* fr = files::writeRedirect()) fr->unlockAfterFork();
}

__attribute__((constructor)) void dlrrInit() {
  Config cfg = Config::fromEnvironment();
  if (cfg.mode == Mode::Replay) {
    try {
      const char* until = std::getenv("DLRR_UNTIL");
      startProcessReplayer(cfg, until ? until : "");
    } catch (const std::exception& e) {
      // The replayed job still runs; dlreplay reports that nothing was served.
      if (cfg.statusFd >= 0) {
        std::string msg = std::string("replay unavailable: ") + e.what() + "\n";
        ssize_t w = ::write(cfg.statusFd, msg.data(), msg.size());
        (void)w;
      }
      return;
    } catch (...) {
      DLRR_SWALLOWED();
      return;
    }
    pthread_atfork(atforkReplayPrepare, atforkReplayParent, atforkReplayChild);
    ::atexit(replayAtExit);
    if (ReplaySession* r = processReplayer()) {
      const char* debug = std::getenv("DLRR_DEBUG");
      if (debug && std::string_view(debug) == "wait" && r->crashSignal() > 0) installReplayCrashPause(r->crashSignal());
    }
    return;
  }
  if (cfg.mode != Mode::Record) return;
  try {
    startProcessRecorder(cfg);
  } catch (...) {
    DLRR_SWALLOWED();
    return;  // never take the job down
  }
  pthread_atfork(atforkPrepare, atforkParent, atforkChild);
  ::atexit(atExit);
  installFatalSignalHandlers();
}

}  // namespace
}  // namespace dlrr

using namespace dlrr;

extern "C" {

__attribute__((visibility("default"))) pid_t fork() {
  static auto real = realFn<pid_t (*)()>("fork");
  pid_t pid = real();
  if (pid > 0)
    if (RecordSession* s = processRecorder()) s->forked(pid);
  return pid;
}

__attribute__((visibility("default"), noreturn)) void exit(int code) {
  static auto real = realFn<void (*)(int)>("exit");
  if (RecordSession* s = processRecorder()) s->onExit(true, code & 0xff);  // the status a parent sees
  real(code);
  __builtin_unreachable();
}

__attribute__((visibility("default"), noreturn)) void _exit(int code) {
  static auto real = realFn<void (*)(int)>("_exit");
  if (RecordSession* s = processRecorder()) s->onExit(true, code & 0xff);
  // os._exit() skips atexit: the replay's final report is written here instead (forked
  // children's replayers are inactive, so only the replayed process itself writes).
  if (ReplaySession* r = processReplayer()) r->writeReport("exit");
  real(code);
  __builtin_unreachable();
}

}  // extern "C"
