#pragma once
// Writes one stream file. Callable from any thread: append() and putBlob() only copy bytes
// into a bounded queue; a writer thread compresses and writes frames. commit() is the
// durability point (a step end): it returns once every earlier item is in the kernel, so a
// `kill -9` right after it loses nothing committed. The writer thread has usually compressed
// the step's blobs while the step was computing; what is left (the step's events, at least)
// the committing thread writes itself when the writer thread is idle, rather than waking it
// and waiting for it to be scheduled.
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_set>
#include <vector>

#include "format/Codec.h"
#include "format/Frame.h"
#include "format/Hash.h"
#include "format/UniqueFd.h"

namespace capnp {
class MessageBuilder;
}

namespace dlrr {

struct WriterOptions {
  size_t maxQueuedBytes = 256u << 20;  // callers block above this (counted in stats)
  size_t eventsFrameBytes = 1u << 20;  // an events frame is cut at this size even mid-step
  int zstdLevel = 1;
  // Events frames (a step's events, a few KB) are usually encoded by the committing job
  // thread: zstd's fastest level costs a third of level 1's CPU there, for about the same size.
  int eventsZstdLevel = -1;
  bool compressEvents = true;
  bool shuffleFloats = true;  // byte-shuffle blobs whose element size is 2, 4 or 8
  int signalDrainMs = 2000;   // how long the signal path waits for the queue to drain
};

struct WriterStats {
  uint64_t events = 0;
  uint64_t blobs = 0;              // distinct blobs queued
  uint64_t blobsDeduplicated = 0;  // putBlob calls answered from the content index
  uint64_t rawBytes = 0;           // payload bytes before encoding
  uint64_t storedBytes = 0;        // bytes written to the file
  uint64_t frames = 0;
  uint64_t commits = 0;
  uint64_t queueHighWater = 0;  // most bytes queued at once
  uint64_t blockedCount = 0;    // calls that waited for queue space (back-pressure)
  uint64_t blockedNs = 0;
  uint64_t commitWaitNs = 0;  // time callers spent inside commit()
};

struct BlobId {
  Hash128 hash;
  uint64_t size = 0;
  bool fresh = false;  // putBlob queued these bytes (false: already in the stream, or not written)
};

class StreamWriter {
 public:
  // Takes ownership of `fd` (a fresh, empty, O_APPEND file) and writes the file header and
  // the header frame (a serialised StreamHeader message) synchronously.
  StreamWriter(UniqueFd fd, capnp::MessageBuilder& header, WriterOptions opts = {});
  ~StreamWriter();  // close()
  StreamWriter(const StreamWriter&) = delete;
  StreamWriter& operator=(const StreamWriter&) = delete;

  // Queues one Event message. `stepBegin` >= 0 marks the event that begins that step (for the
  // footer's step index).
  void append(capnp::MessageBuilder& event, int64_t stepBegin = -1);
  // Queues bytes that events will reference by content hash; identical content is stored
  // once. `elemSize` (1, 2, 4, 8) picks the byte-shuffle. `wake`: wake the writer thread to
  // compress it now; false leaves that to a later wake() (a caller queuing several blobs at
  // once wakes it once, not per blob: each wake is a futex call, and on a busy machine the
  // woken writer can take the caller's core).
  BlobId putBlob(const void* data, size_t n, unsigned elemSize = 1, bool wake = true);
  // Wakes the writer thread when anything is queued (blobs put with wake = false).
  void wake();
  // Everything queued so far becomes one or more frames; with `wait`, returns once written.
  void commit(bool wait = true);
  // commit() in two halves, for a caller with other work to do before the commit must be
  // durable (a DataLoader step boundary: the next step's RNG states and batch). commitAsync
  // queues the commit and wakes the writer thread, which compresses and writes the frame on
  // another core meanwhile; waitCommitted(ticket) returns once it is in the kernel, writing
  // it on the calling thread when the writer thread has not started (as commit() does).
  uint64_t commitAsync();
  void waitCommitted(uint64_t ticket);
  // Drains the queue, writes footer and trailer, closes the file. Idempotent.
  void close();

  // Fork protocol (called from pthread_atfork handlers of the process-wide recorder): the
  // parent keeps writing; the child's copy becomes inert and never touches the file.
  void beforeFork() noexcept;
  void afterForkParent() noexcept;
  void afterForkChild() noexcept;

  // Async-signal-safe: asks the writer thread to flush, waits up to signalDrainMs for it,
  // then appends one uncompressed EVENTS frame holding `msg` (a flat Cap'n Proto message) with
  // a single writev(). Returns false when nothing could be written.
  bool writeFromSignal(const uint8_t* msg, size_t n) noexcept;

  bool failed() const noexcept { return failed_.load(std::memory_order_acquire); }
  std::string error() const;  // why writing stopped (e.g. "No space left on device")
  WriterStats stats() const;
  // stats().storedBytes without the writer's lock: read at every step commit (the budget).
  uint64_t storedBytes() const noexcept { return storedBytes_.load(std::memory_order_relaxed); }
  bool inert() const noexcept { return inert_; }

 private:
  struct Item;
  void run();
  // Writes queued items in order; stops once commit `until` is written (0: when the queue is empty).
  void drainLocked(std::unique_lock<std::mutex>& lk, uint64_t until = 0);
  uint64_t queueCommitLocked();
  void writeEvents();
  void writeBlob(Item& item);
  bool writeFrame(FrameKind kind, Codec codec, const uint8_t* prefix, size_t prefixLen, const uint8_t* payload,
                  size_t payloadLen, uint32_t rawLen, uint16_t flags = 0);
  void waitForSpace(std::unique_lock<std::mutex>& lk, size_t n);
  void fail(const std::string& why);
  void writeFooter();

  UniqueFd fd_;
  WriterOptions opts_;
  PayloadCodec codec_;

  mutable std::mutex mu_;
  std::condition_variable workCv_;  // writer thread waits for items
  std::condition_variable doneCv_;  // callers wait for space / commits
  std::deque<std::unique_ptr<Item>> queue_;
  std::vector<std::unique_ptr<Item>> spareEvents_;  // written events items, reused by append()
  size_t queuedBytes_ = 0;
  uint64_t commitTicket_ = 0;
  uint64_t writtenTicket_ = 0;
  bool stopping_ = false;
  bool draining_ = false;  // a thread (the writer, or a caller in commit) is writing the queue
  std::unordered_set<Hash128, Hash128Hasher> knownBlobs_;
  WriterStats stats_;
  std::string error_;

  // Writer-thread state.
  std::vector<uint8_t> pendingEvents_;
  std::vector<int64_t> pendingSteps_;
  std::vector<uint8_t> encodeBuf_;
  uint64_t offset_ = 0;
  struct StepPos {
    int64_t step;
    uint64_t offset;
  };
  std::vector<StepPos> stepIndex_;
  struct BlobPos {
    Hash128 hash;
    uint64_t offset;
  };
  std::vector<BlobPos> blobIndex_;
  int64_t lastStep_ = -1;

  std::atomic<uint64_t> nextSeq_{0};
  std::atomic<bool> failed_{false};
  std::atomic<bool> flushRequested_{false};
  std::atomic<bool> asyncWritten_{false};
  std::atomic<uint64_t> drainedGen_{0};
  bool inert_ = false;
  bool closed_ = false;
  std::unique_ptr<std::thread> thread_;
  std::atomic<uint64_t> storedBytes_{0};
};

}  // namespace dlrr
