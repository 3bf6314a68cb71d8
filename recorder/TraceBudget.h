#pragma once
// `dlrecord --budget` (docs/recording.md, "The budget"): the bytes the whole trace may take.
// What every step records (the stream) is never dropped; a process's periodic snapshots are
// bulk, each in a bulk file of its own (format/TraceDir.h), and the oldest are unlinked first
// when the trace would exceed the budget, the newest always kept (the latest snapshot before
// the window). What the trace uses is measured on the directory, so every process's files
// count, pinned ones included.
//
// Dedup across snapshots: a tensor whose bytes a kept bulk file holds already (a frozen layer,
// a buffer that never changes) is referenced there instead of written again (reference()).
// The file is then pinned: it is never unlinked while a kept snapshot, or the one being taken,
// refers to it, so a kept snapshot never refers to dropped bytes. Blobs are content-addressed,
// so readers find a blob in whichever of the stream's bulk files holds it.
#include <cstdint>
#include <deque>
#include <string>
#include <unordered_map>
#include <vector>

#include "format/Hash.h"

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

  // Smaller tensors are written again rather than referenced: a file pinned for one would keep
  // its whole snapshot (often thousands of times the tensor's size) for a few bytes saved.
  static constexpr uint64_t kMinShared = 64 << 10;
  // The snapshot being taken: true when a kept bulk file holds `h` (the snapshot refers to it
  // there and the file is pinned from now on); false when the snapshot must write it.
  bool reference(const Hash128& h);
  // The snapshot being taken wrote `h` into its own bulk file.
  void wrote(const Hash128& h) { pendingBlobs_.push_back(h); }
  // The snapshot being taken is kept, in `b`: its blobs may be referenced by later ones, and
  // the files it referenced stay pinned while it is kept.
  void addBulk(Bulk b);
  // The snapshot being taken was not written: its pins are released.
  void abandon();

  // Unlinks this process's oldest bulk files that no kept snapshot refers to, never the newest,
  // until the trace plus `extra` bytes fits; returns what it dropped, oldest first. `usedAfter`
  // receives the trace's bytes.
  std::vector<Bulk> makeRoom(uint64_t extra, uint64_t& usedAfter);
  // Kept snapshots whose bulk file is pinned (some later kept snapshot refers to it).
  size_t pinned() const;

 private:
  struct Kept {
    Bulk bulk;
    uint64_t id = 0;
    std::vector<uint64_t> refs;  // the files (ids) it refers to, itself excluded
    uint32_t pins = 0;           // kept snapshots (and the one being taken) referring to it
  };
  Kept* find(uint64_t id);
  void unpin(const std::vector<uint64_t>& ids);

  uint64_t limit_;
  int dirFd_;
  std::deque<Kept> kept_;  // oldest first
  uint64_t nextId_ = 1;
  std::unordered_map<Hash128, uint64_t, Hash128Hasher> blobs_;  // blob -> kept file holding it
  std::vector<uint64_t> pendingRefs_;
  std::vector<Hash128> pendingBlobs_;
};

}  // namespace dlrr
