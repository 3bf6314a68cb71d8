#pragma once
// `dlrecord --budget` (docs/recording.md, "The budget"): the bytes the whole trace may take.
// What every step records (the stream) is never dropped; a process's periodic snapshots are
// bulk, each in a bulk file of its own (format/TraceDir.h), and the oldest are unlinked first
// when the trace would exceed the budget, the newest always kept (the latest snapshot before
// the window). What the trace uses is measured on the directory, so every process's files
// count.
#include <cstdint>
#include <deque>
#include <string>
#include <vector>

namespace dlrr {

class TraceBudget {
 public:
  struct Bulk {
    std::string file;   // the bulk file's name in the trace directory
    int64_t step = -1;  // the step of the snapshot it holds
    uint64_t bytes = 0;
  };

  // `limit` 0: no budget. `dirFd` is the trace directory (not owned).
  TraceBudget(uint64_t limit, int dirFd) : limit_(limit), dirFd_(dirFd) {}
  uint64_t limit() const { return limit_; }
  // Bytes of every file in the trace directory now.
  uint64_t used() const;
  void addBulk(Bulk b) { bulk_.push_back(std::move(b)); }
  // Unlinks this process's oldest bulk files, never the newest, until the trace plus `extra`
  // bytes fits; returns what it dropped, oldest first. `usedAfter` receives the trace's bytes.
  std::vector<Bulk> makeRoom(uint64_t extra, uint64_t& usedAfter);

 private:
  uint64_t limit_;
  int dirFd_;
  std::deque<Bulk> bulk_;  // oldest first
};

}  // namespace dlrr
