#include "interpose/ErrorBoundary.h"

#include <kj/exception.h>

#include <atomic>
#include <cstdio>
#include <exception>

#include "interpose/ActiveSession.h"
#include "recorder/RecordSession.h"
#include "replayer/ReplaySession.h"

namespace dlrr {
namespace {

std::atomic<uint64_t> gCount{0};
// The first error's text: written once, by the thread that counted it first, then published.
char gFirst[256];
std::atomic<bool> gFirstReady{false};

// What the exception being handled says.
std::string currentWhat() {
  if (!std::current_exception()) return "no exception";
  try {
    throw;
  } catch (const std::exception& e) {
    return e.what();
  } catch (const kj::Exception& e) {
    return e.getDescription().cStr();
  } catch (...) {
    return "an exception of unknown type";
  }
}

}  // namespace

void noteSwallowed(const char* where) noexcept {
  if (gCount.fetch_add(1, std::memory_order_relaxed) != 0) return;
  try {
    std::string msg = std::string("internal error in ") + (where ? where : "?") + ": " + currentWhat() +
                      " (the job goes on; dlrr_status() counts such errors)";
    std::snprintf(gFirst, sizeof gFirst, "%s", msg.c_str());
    gFirstReady.store(true, std::memory_order_release);
    // The handler runs after the guarded scope's locks were released, so the session's own
    // lock is free here.
    if (RecordSession* s = processRecorder(); s && s->active())
      s->recorderStatus(false, gFirst);
    else if (ReplaySession* r = processReplayer())
      r->fact("warning", gFirst);
  } catch (...) {  // best effort: the boundary itself never throws: the count stands
  }
}

uint64_t swallowedCount() noexcept { return gCount.load(std::memory_order_relaxed); }

std::string firstSwallowed() { return gFirstReady.load(std::memory_order_acquire) ? std::string(gFirst) : ""; }

void resetSwallowedAfterFork() noexcept {
  gFirstReady.store(false, std::memory_order_relaxed);
  gCount.store(0, std::memory_order_relaxed);
}

}  // namespace dlrr
