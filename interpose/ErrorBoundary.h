#pragma once
// The library's one error boundary. An exception that reaches a C API call (dlrr.h) or a libc
// hook stops there: the job never sees it (it would take the job down, or change what it
// computes). But it is not lost: every one is counted, and the first is written where the run's
// status goes (a RecorderStatus event in the trace and dlrecord's summary when recording, a
// report warning when replaying), so a trace that is missing something says why.
//
//   guarded("dlrr_note", [&] { ... });           // the C API's wrappers (CApi.cc)
//   } catch (...) { DLRR_SWALLOWED(); ... }        // a hook that must also pick a return value
#include <cstdint>
#include <string>

namespace dlrr {

// In a catch handler: counts the exception being handled; the first also goes to the status.
void noteSwallowed(const char* where) noexcept;

// Runs fn; an exception is noted (noteSwallowed) and false returned.
template <typename Fn>
bool guarded(const char* where, Fn&& fn) noexcept {
  try {
    fn();
    return true;
  } catch (...) {
    noteSwallowed(where);
    return false;
  }
}

// How many errors this process swallowed at the edges, and the first ("" when none).
uint64_t swallowedCount() noexcept;
std::string firstSwallowed();

// A forked child's count starts again (its stream is its own).
void resetSwallowedAfterFork() noexcept;

}  // namespace dlrr

#define DLRR_SWALLOWED() ::dlrr::noteSwallowed(__func__)
