#include "format/StreamWriter.h"

#include <capnp/message.h>
#include <capnp/serialize.h>
#include <kj/io.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <sys/uio.h>
#include <time.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <new>

#include "format/Check.h"
#include "format/Crc32c.h"
#include "format/FlatMessage.h"
#include "format/OwnThreads.h"
#include "format/TraceError.h"
#include "schema/dlrr.capnp.h"

namespace dlrr {
namespace {

uint64_t nowNs() noexcept {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

// Writes all of buf with writev, retrying on EINTR and short writes. Returns 0 or errno.
int writeAllUnmasked(int fd, iovec* iov, int n) noexcept {
  while (n > 0) {
    ssize_t w = ::writev(fd, iov, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    auto left = static_cast<size_t>(w);
    while (n > 0 && left >= iov->iov_len) {
      left -= iov->iov_len;
      ++iov;
      --n;
    }
    if (n > 0) {
      iov->iov_base = static_cast<char*>(iov->iov_base) + left;
      iov->iov_len -= left;
    }
  }
  return 0;
}

// writeAllUnmasked with SIGXFSZ blocked. A write past RLIMIT_FSIZE (ulimit -f) fails with
// EFBIG and also sends SIGXFSZ to the writing thread, which at a commit is the job's own: at
// its default action (any non-Python job) it killed the job. The signal our write raised is
// consumed; one the thread already blocked is left alone (then it is not ours to take).
// The writer thread blocks SIGXFSZ for its whole life (see the constructor): there the mask
// calls below would be two system calls per write that change nothing (a signal that was
// already blocked is left pending, not consumed), a blob and a frame at every step (issue 33).
thread_local bool tXfszBlockedForLife = false;

int writeAll(int fd, iovec* iov, int n) noexcept {
  if (tXfszBlockedForLife) return writeAllUnmasked(fd, iov, n);
  sigset_t xfsz, old;
  sigemptyset(&xfsz);
  sigaddset(&xfsz, SIGXFSZ);
  if (::pthread_sigmask(SIG_BLOCK, &xfsz, &old) != 0) return writeAllUnmasked(fd, iov, n);
  int err = writeAllUnmasked(fd, iov, n);
  if (err == EFBIG && !sigismember(&old, SIGXFSZ)) {
    timespec zero{0, 0};
    ::sigtimedwait(&xfsz, nullptr, &zero);
  }
  ::pthread_sigmask(SIG_SETMASK, &old, nullptr);
  return err;
}

// Written events items kept for reuse, their buffers with them: a fresh item's buffer was
// allocated and grown on the job's thread (an allocation per ~30 events, some of them large
// enough for malloc to take new pages) and freed on the writer's.
constexpr size_t kSpareEventItems = 8;

}  // namespace

struct StreamWriter::Item {
  enum class Kind { Events, Blob, Commit } kind;
  std::vector<uint8_t> bytes;
  int64_t stepBegin = -1;
  Hash128 hash;
  unsigned elemSize = 1;
  uint64_t ticket = 0;
};

StreamWriter::StreamWriter(UniqueFd fd, capnp::MessageBuilder& header, WriterOptions opts)
    : fd_(std::move(fd)), opts_(opts), codec_(opts.zstdLevel) {
  uint8_t fh[kFileHeaderSize];
  encodeFileHeader(fh);
  iovec iov{fh, sizeof fh};
  if (int err = writeAll(fd_.get(), &iov, 1))
    throw TraceError(ErrorKind::Io, std::string("cannot write trace: ") + std::strerror(err));
  offset_ = kFileHeaderSize;
  auto words = capnp::messageToFlatArray(header);
  auto bytes = words.asBytes();
  if (!writeFrame(FrameKind::Header, Codec{}, nullptr, 0, bytes.begin(), bytes.size(),
                  static_cast<uint32_t>(bytes.size())))
    throw TraceError(ErrorKind::Io, "cannot write trace: " + error_);
  // The writer thread takes none of the job's signals: a process-directed signal the job
  // blocks in its own threads (to sigwait() for it, say) would otherwise be delivered to our
  // thread and run the default action (SIGUSR1 killed the job), and SIGXFSZ/SIGPIPE from our
  // writes must become errors, not the job's death. Faults stay deliverable (they cannot be
  // blocked usefully). The thread inherits the mask; ours is restored right after.
  sigset_t block, old;
  sigfillset(&block);
  for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT, SIGTRAP, SIGSYS}) sigdelset(&block, sig);
  pthread_sigmask(SIG_BLOCK, &block, &old);
  ownThreads().fetch_add(1);  // counted before it exists: the job never sees it in /proc
  try {
    thread_ = std::make_unique<std::thread>([this] { run(); });
  } catch (...) {
    ownThreads().fetch_sub(1);
    pthread_sigmask(SIG_SETMASK, &old, nullptr);
    throw;
  }
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
}

StreamWriter::~StreamWriter() {
  try {
    close();
  } catch (...) {  // best effort: destructors must not throw; close() already recorded the error
  }
}

std::string StreamWriter::error() const {
  std::lock_guard<std::mutex> lk(mu_);
  return error_;
}

WriterStats StreamWriter::stats() const {
  std::lock_guard<std::mutex> lk(mu_);
  return stats_;
}

void StreamWriter::fail(const std::string& why) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (error_.empty()) error_ = why;
  }
  failed_.store(true, std::memory_order_release);
}

void StreamWriter::waitForSpace(std::unique_lock<std::mutex>& lk, size_t n) {
  if (queuedBytes_ == 0 || queuedBytes_ + n <= opts_.maxQueuedBytes) return;
  uint64_t t0 = nowNs();
  ++stats_.blockedCount;
  doneCv_.wait(lk, [&] { return queuedBytes_ == 0 || queuedBytes_ + n <= opts_.maxQueuedBytes || stopping_; });
  stats_.blockedNs += nowNs() - t0;
}

void StreamWriter::append(capnp::MessageBuilder& event, int64_t stepBegin) {
  if (inert_) return;
  auto segments = event.getSegmentsForOutput();
  const size_t n = capnp::computeSerializedSizeInWords(segments) * sizeof(capnp::word);
  // Bulk goes to blobs (chunked); an event this large is a bug in its producer, and would fail
  // the whole stream later on the writer thread ("frame too large").
  DLRR_ASSERT(n <= kMaxStoredLen / 2, n);
  std::unique_lock<std::mutex> lk(mu_);
  if (closed_) return;
  waitForSpace(lk, n);
  // Events queued one after another share one item, serialised straight into it: per event
  // that saves the flat array, the item and its buffer (three allocations, freed on the writer
  // thread) and a copy. An event that begins a step starts an item of its own, which is how
  // the writer knows the frame that holds it (the step index).
  // Items stay under the events frame size (and 64 KB), which frames are still cut at.
  const size_t itemBytes = std::min<size_t>(64 << 10, opts_.eventsFrameBytes);
  Item* item = queue_.empty() ? nullptr : queue_.back().get();
  if (stepBegin >= 0 || !item || item->kind != Item::Kind::Events || item->bytes.size() + n > itemBytes) {
    if (spareEvents_.empty()) {
      queue_.push_back(std::make_unique<Item>());
    } else {
      queue_.push_back(std::move(spareEvents_.back()));
      spareEvents_.pop_back();
    }
    item = queue_.back().get();
    item->kind = Item::Kind::Events;
    item->stepBegin = stepBegin;
    item->bytes.reserve(std::max(n, std::min<size_t>(itemBytes, 4096)));
  }
  if (segments.size() == 1) {
    // One segment (events are small): the flat framing appended with no stream and no
    // zero-filling resize.
    uint8_t table[kOneSegmentTableBytes];
    writeOneSegmentTable(table, static_cast<uint32_t>(segments[0].size()));
    const auto* words = reinterpret_cast<const uint8_t*>(segments[0].begin());
    item->bytes.insert(item->bytes.end(), table, table + sizeof table);
    item->bytes.insert(item->bytes.end(), words, words + segments[0].size() * sizeof(capnp::word));
  } else {
    const size_t at = item->bytes.size();
    item->bytes.resize(at + n);
    kj::ArrayOutputStream out(kj::arrayPtr(item->bytes.data() + at, n));
    capnp::writeMessage(out, segments);
  }
  queuedBytes_ += n;
  stats_.queueHighWater = std::max<uint64_t>(stats_.queueHighWater, queuedBytes_);
  ++stats_.events;
  // Events need no prompt writing: they are only gathered into the step's frame, which the
  // commit writes. Waking the writer thread for each one cost a futex call and a context
  // switch per event (a step has dozens); wake it only when a frame's worth has queued.
  bool wake = queuedBytes_ >= opts_.eventsFrameBytes;
  lk.unlock();
  if (wake) workCv_.notify_one();
}

BlobId StreamWriter::putBlob(const void* data, size_t n, unsigned elemSize, bool wake) {
  BlobId id{hash128(data, n), n};
  if (inert_) return id;
  std::unique_lock<std::mutex> lk(mu_);
  if (closed_) return id;
  if (!knownBlobs_.insert(id.hash).second) {
    ++stats_.blobsDeduplicated;
    return id;
  }
  lk.unlock();
  auto item = std::make_unique<Item>();
  item->kind = Item::Kind::Blob;
  const auto* p = static_cast<const uint8_t*>(data);
  item->bytes.assign(p, p + n);  // the caller's buffer may change after we return
  item->hash = id.hash;
  item->elemSize = elemSize;
  lk.lock();
  waitForSpace(lk, n);
  queuedBytes_ += n;
  stats_.queueHighWater = std::max<uint64_t>(stats_.queueHighWater, queuedBytes_);
  ++stats_.blobs;
  queue_.push_back(std::move(item));
  lk.unlock();
  if (wake) workCv_.notify_one();
  id.fresh = true;
  return id;
}

void StreamWriter::wake() {
  if (inert_) return;
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (queue_.empty() || closed_) return;
  }
  workCv_.notify_one();
}

uint64_t StreamWriter::queueCommitLocked() {
  auto item = std::make_unique<Item>();
  item->kind = Item::Kind::Commit;
  item->ticket = ++commitTicket_;
  queue_.push_back(std::move(item));
  ++stats_.commits;
  return commitTicket_;
}

void StreamWriter::commit(bool wait) {
  if (inert_) return;
  uint64_t t0 = nowNs();
  std::unique_lock<std::mutex> lk(mu_);
  if (closed_ || !thread_) return;
  uint64_t ticket = queueCommitLocked();
  if (!wait) {
    lk.unlock();
    workCv_.notify_one();
    return;
  }
  // The caller would only wait here: when the writer thread is idle, drain the queue on this
  // thread instead of waking it. That saves two context switches per step and, on a loaded
  // machine, the writer thread's scheduling delay (milliseconds).
  lk.unlock();
  waitCommitted(ticket);
  std::lock_guard<std::mutex> g(mu_);
  stats_.commitWaitNs += nowNs() - t0;
}

uint64_t StreamWriter::commitAsync() {
  if (inert_) return 0;
  std::unique_lock<std::mutex> lk(mu_);
  if (closed_ || !thread_) return 0;
  uint64_t ticket = queueCommitLocked();
  lk.unlock();
  workCv_.notify_one();
  return ticket;
}

void StreamWriter::waitCommitted(uint64_t ticket) {
  if (inert_ || ticket == 0) return;
  std::unique_lock<std::mutex> lk(mu_);
  // Frames stay in queue order: only one thread drains at a time (draining_). Draining here
  // stops at the ticket: later items (the next step's blobs) are the writer thread's.
  while (writtenTicket_ < ticket && !stopping_) {
    if (!draining_) {
      draining_ = true;
      drainLocked(lk, ticket);
      draining_ = false;
      if (!queue_.empty() || stopping_) workCv_.notify_one();
    } else {
      doneCv_.wait(lk, [&] { return writtenTicket_ >= ticket || stopping_ || !draining_; });
    }
  }
}

void StreamWriter::run() {
  sigset_t mask;  // every signal but faults, set before this thread started: checked, once
  tXfszBlockedForLife = pthread_sigmask(SIG_BLOCK, nullptr, &mask) == 0 && sigismember(&mask, SIGXFSZ) == 1;
  // SCHED_BATCH (no privilege needed): the job's thread wakes this one at every batch and set
  // of RNG states; as a batch thread it does not preempt the waker, it runs at the next
  // scheduling point. Best effort: the default policy stays where the call fails.
  sched_param batch{};
  pthread_setschedparam(pthread_self(), SCHED_BATCH, &batch);
  std::unique_lock<std::mutex> lk(mu_);
  for (;;) {
    // Poll so that the signal path (which cannot notify a condition variable) is served.
    workCv_.wait_for(lk, std::chrono::milliseconds(20), [&] {
      return !draining_ && (!queue_.empty() || stopping_ || flushRequested_.load(std::memory_order_acquire));
    });
    if (draining_) continue;  // a committing caller is writing; it wakes us when done
    draining_ = true;
    drainLocked(lk);
    draining_ = false;
    doneCv_.notify_all();
    if (stopping_ && queue_.empty()) break;
  }
  lk.unlock();
  if (!failed()) writeEvents();
}

void StreamWriter::drainLocked(std::unique_lock<std::mutex>& lk, uint64_t until) {
  // Called with mu_ held and draining_ set by the caller: this thread alone touches the
  // writer-thread state (pending events, codec, offsets, indexes) until it clears draining_.
  while (!queue_.empty() && (until == 0 || writtenTicket_ < until)) {
    std::unique_ptr<Item> item = std::move(queue_.front());
    queue_.pop_front();
    lk.unlock();
    bool ok = !failed();
    switch (item->kind) {
      case Item::Kind::Events:
        if (ok) {
          if (item->stepBegin >= 0) pendingSteps_.push_back(item->stepBegin);
          pendingEvents_.insert(pendingEvents_.end(), item->bytes.begin(), item->bytes.end());
          if (pendingEvents_.size() >= opts_.eventsFrameBytes) writeEvents();
        }
        break;
      case Item::Kind::Blob:
        if (ok) writeBlob(*item);
        break;
      case Item::Kind::Commit:
        if (ok) writeEvents();
        break;
    }
    lk.lock();
    queuedBytes_ -= item->bytes.size();
    if (item->kind == Item::Kind::Commit) writtenTicket_ = item->ticket;
    if (item->kind == Item::Kind::Events && spareEvents_.size() < kSpareEventItems) {
      item->bytes.clear();  // keeps its capacity
      spareEvents_.push_back(std::move(item));
    }
    doneCv_.notify_all();
  }
  if (flushRequested_.load(std::memory_order_acquire)) {
    lk.unlock();
    if (!failed()) writeEvents();
    lk.lock();
    flushRequested_.store(false, std::memory_order_release);
    drainedGen_.fetch_add(1, std::memory_order_acq_rel);
  }
}

void StreamWriter::writeEvents() {
  if (pendingEvents_.empty()) return;
  encodeBuf_.clear();
  Codec want{opts_.compressEvents ? Compression::Zstd : Compression::None, 0};
  Codec used = codec_.encode(pendingEvents_.data(), pendingEvents_.size(), want, encodeBuf_, opts_.eventsZstdLevel);
  uint64_t frameOffset = offset_;
  if (writeFrame(FrameKind::Events, used, nullptr, 0, encodeBuf_.data(), encodeBuf_.size(),
                 static_cast<uint32_t>(pendingEvents_.size()))) {
    for (int64_t s : pendingSteps_) {
      stepIndex_.push_back({s, frameOffset});
      lastStep_ = std::max(lastStep_, s);
    }
    std::lock_guard<std::mutex> lk(mu_);
    stats_.rawBytes += pendingEvents_.size();
  }
  pendingEvents_.clear();
  pendingSteps_.clear();
}

void StreamWriter::writeBlob(Item& item) {
  const uint64_t total = item.bytes.size();
  uint64_t off = 0;
  bool first = true;
  do {
    size_t chunk = static_cast<size_t>(std::min<uint64_t>(kBlobChunkSize, total - off));
    encodeBuf_.clear();
    Codec want{Compression::Zstd, 0};
    if (opts_.shuffleFloats && (item.elemSize == 2 || item.elemSize == 4 || item.elemSize == 8))
      want.shuffle = static_cast<uint8_t>(item.elemSize);
    Codec used = codec_.encode(item.bytes.data() + off, chunk, want, encodeBuf_);
    uint8_t prefix[kBlobPrefixSize];
    encodeBlobPrefix({item.hash.lo, item.hash.hi, total, off}, prefix);
    uint64_t frameOffset = offset_;
    if (!writeFrame(FrameKind::Blob, used, prefix, sizeof prefix, encodeBuf_.data(), encodeBuf_.size(),
                    static_cast<uint32_t>(chunk)))
      return;
    if (first) blobIndex_.push_back({item.hash, frameOffset});
    first = false;
    off += chunk;
  } while (off < total);
  std::lock_guard<std::mutex> lk(mu_);
  stats_.rawBytes += total;
}

bool StreamWriter::writeFrame(FrameKind kind, Codec codec, const uint8_t* prefix, size_t prefixLen,
                              const uint8_t* payload, size_t payloadLen, uint32_t rawLen, uint16_t flags) {
  if (prefixLen + payloadLen > kMaxStoredLen) {
    fail("frame too large");
    return false;
  }
  FrameHeader h;
  h.kind = kind;
  h.codec = codec.encode();
  h.flags = flags;
  h.storedLen = static_cast<uint32_t>(prefixLen + payloadLen);
  h.rawLen = rawLen;
  uint32_t crc = crc32c(prefix, prefixLen);
  h.payloadCrc = crc32c(payload, payloadLen, crc);
  h.seq = nextSeq_.fetch_add(1, std::memory_order_relaxed);
  uint8_t hdr[kFrameHeaderSize];
  encodeFrameHeader(h, hdr);
  iovec iov[3] = {
      {hdr, sizeof hdr}, {const_cast<uint8_t*>(prefix), prefixLen}, {const_cast<uint8_t*>(payload), payloadLen}};
  // One writev per frame on an O_APPEND file: frames from the signal path never interleave.
  if (int err = writeAll(fd_.get(), iov, 3)) {
    fail(std::strerror(err));
    return false;
  }
  offset_ += sizeof hdr + h.storedLen;
  std::lock_guard<std::mutex> lk(mu_);
  stats_.storedBytes += sizeof hdr + h.storedLen;
  storedBytes_.fetch_add(sizeof hdr + h.storedLen, std::memory_order_relaxed);
  ++stats_.frames;
  return true;
}

void StreamWriter::writeFooter() {
  capnp::MallocMessageBuilder msg;
  auto f = msg.initRoot<schema::Footer>();
  auto steps = f.initSteps(static_cast<unsigned>(stepIndex_.size()));
  for (size_t i = 0; i < stepIndex_.size(); ++i) {
    steps[i].setStep(stepIndex_[i].step);
    steps[i].setFrameOffset(stepIndex_[i].offset);
  }
  auto blobs = f.initBlobs(static_cast<unsigned>(blobIndex_.size()));
  for (size_t i = 0; i < blobIndex_.size(); ++i) {
    blobs[i].setHashLo(blobIndex_[i].hash.lo);
    blobs[i].setHashHi(blobIndex_[i].hash.hi);
    blobs[i].setFrameOffset(blobIndex_[i].offset);
  }
  WriterStats st = stats();
  f.setEvents(st.events);
  f.setFrames(st.frames + 1);
  f.setRawBytes(st.rawBytes);
  f.setStoredBytes(st.storedBytes);
  f.setBlobsDeduplicated(st.blobsDeduplicated);
  f.setLastStep(lastStep_);
  auto words = capnp::messageToFlatArray(msg);
  auto bytes = words.asBytes();
  encodeBuf_.clear();
  Codec used = codec_.encode(bytes.begin(), bytes.size(), Codec{Compression::Zstd, 0}, encodeBuf_);
  uint64_t footerOffset = offset_;
  if (!writeFrame(FrameKind::Footer, used, nullptr, 0, encodeBuf_.data(), encodeBuf_.size(),
                  static_cast<uint32_t>(bytes.size())))
    return;
  uint8_t trailer[kTrailerSize];
  encodeTrailer(footerOffset, trailer);
  iovec iov{trailer, sizeof trailer};
  if (int err = writeAll(fd_.get(), &iov, 1)) fail(std::strerror(err));
}

void StreamWriter::close() {
  if (inert_) return;
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (closed_) return;
    closed_ = true;
    stopping_ = true;
  }
  workCv_.notify_all();
  doneCv_.notify_all();
  if (thread_ && thread_->joinable()) {
    thread_->join();
    thread_.reset();
    ownThreads().fetch_sub(1);
  }
  // A frame from the signal path moved the end of file under our offsets: no footer then,
  // readers scan instead.
  if (!failed() && !asyncWritten_.load()) writeFooter();
  fd_.reset();
}

void StreamWriter::beforeFork() noexcept {
  if (!inert_) mu_.lock();
}

void StreamWriter::afterForkParent() noexcept {
  if (!inert_) mu_.unlock();
}

void StreamWriter::afterForkChild() noexcept {
  if (inert_) return;
  mu_.unlock();
  inert_ = true;
  // The writer thread does not exist in the child: forget it without join or detach.
  (void)thread_.release();  // and not counted there (interpose/Interposer.cc resets ownThreads)
  // The parent's threads may be registered waiters on these condition variables; nothing in
  // the child will ever wake them, and glibc's pthread_cond_destroy waits for waiters, so the
  // child's ~StreamWriter would hang. Start the child with fresh ones (the old objects hold no
  // resources, so not running their destructors is harmless).
  new (&workCv_) std::condition_variable;
  new (&doneCv_) std::condition_variable;
  fd_.reset();
}

bool StreamWriter::writeFromSignal(const uint8_t* msg, size_t n) noexcept {
  if (inert_ || !fd_.valid() || failed() || n > kMaxStoredLen) return false;
  uint64_t gen = drainedGen_.load(std::memory_order_acquire);
  flushRequested_.store(true, std::memory_order_release);
  // The writer thread polls every 20 ms; it may also be the thread that crashed, hence the cap.
  for (int waited = 0; waited < opts_.signalDrainMs; waited += 5) {
    if (drainedGen_.load(std::memory_order_acquire) != gen) break;
    timespec ts{0, 5 * 1000 * 1000};
    nanosleep(&ts, nullptr);
  }
  asyncWritten_.store(true);
  FrameHeader h;
  h.kind = FrameKind::Events;
  h.codec = Codec{}.encode();
  h.flags = kFrameFlagAsync;
  h.storedLen = static_cast<uint32_t>(n);
  h.rawLen = static_cast<uint32_t>(n);
  h.payloadCrc = crc32c(msg, n);
  h.seq = nextSeq_.fetch_add(1, std::memory_order_relaxed);
  uint8_t hdr[kFrameHeaderSize];
  encodeFrameHeader(h, hdr);
  iovec iov[2] = {{hdr, sizeof hdr}, {const_cast<uint8_t*>(msg), n}};
  return writeAll(fd_.get(), iov, 2) == 0;
}

}  // namespace dlrr
