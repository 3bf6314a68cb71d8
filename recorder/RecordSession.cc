#include "recorder/RecordSession.h"

#include <capnp/message.h>
#include <capnp/serialize.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

#include "format/Frame.h"
#include "format/Redact.h"
#include "format/StreamHeaderBuilder.h"
#include "format/TraceDir.h"
#include "format/TraceError.h"
#include "recorder/FullTensorEvent.h"
#include "recorder/HighFds.h"
#include "recorder/NonFiniteFailure.h"
#include "recorder/OwnFds.h"
#include "session/DistEnv.h"
#include "session/HostInfo.h"

namespace dlrr {
namespace {

// True in a Python interpreter that has started (the job's Python processes export the C API).
bool pythonRunning() noexcept {
  using IsInitialized = int (*)();
  static const auto fn = reinterpret_cast<IsInitialized>(::dlsym(RTLD_DEFAULT, "Py_IsInitialized"));
  return fn && fn() != 0;
}

int64_t monoNs() noexcept {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000LL + ts.tv_nsec;
}

uint32_t threadNumber() noexcept {
  static std::atomic<uint32_t> next{0};
  thread_local uint32_t mine = next.fetch_add(1);
  return mine;
}

std::vector<std::string> readCmdline() {
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  std::string all((std::istreambuf_iterator<char>(in)), {});
  std::vector<std::string> out;
  size_t start = 0;
  while (start < all.size()) {
    size_t end = all.find('\0', start);
    if (end == std::string::npos) end = all.size();
    out.push_back(all.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

std::string readLink(const char* path) {
  char buf[PATH_MAX];
  ssize_t n = ::readlink(path, buf, sizeof buf - 1);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string();
}

void setRef(schema::BlobRef::Builder b, const BlobId& id) {
  b.setHashLo(id.hash.lo);
  b.setHashHi(id.hash.hi);
  b.setSize(id.size);
}

// Writes to the status pipe without ever raising SIGPIPE in the job: dlrecord may be gone
// (killed), and a job that restored SIGPIPE's default (or any non-Python job) would die of it.
void writeNoSigpipe(int fd, const char* p, size_t n) noexcept {
  sigset_t pipeSet, old, pending;
  sigemptyset(&pipeSet);
  sigaddset(&pipeSet, SIGPIPE);
  if (::pthread_sigmask(SIG_BLOCK, &pipeSet, &old) != 0) return;
  bool hadPending = ::sigpending(&pending) == 0 && sigismember(&pending, SIGPIPE);
  ssize_t w = ::write(fd, p, n);
  if (w < 0 && errno == EPIPE && !sigismember(&old, SIGPIPE) && !hadPending) {
    timespec zero{0, 0};
    ::sigtimedwait(&pipeSet, nullptr, &zero);  // consume the SIGPIPE this write raised
  }
  ::pthread_sigmask(SIG_SETMASK, &old, nullptr);
}

}  // namespace

RecordSession::RecordSession(Config cfg) : cfg_(std::move(cfg)), ownerPid_(::getpid()), ring_(cfg_.ringSteps) {
  startNs_ = monoNs();
  if (cfg_.window > 0 && cfg_.mode == Mode::Record) window_ = std::make_unique<BatchWindow>(cfg_.window);
  if (const char* id = std::getenv(kProcessIdEnv)) identity_ = id;
  if (cfg_.statusFd >= 0) {
    // The number travels in the environment to exec'd children, where it may be closed or be
    // one of the job's own files (a shell's `exec 5>log`): use it only while it is still
    // dlrecord's pipe, so we never write into, or change the flags of, a file of the job.
    struct stat st {};
    int fl = ::fcntl(cfg_.statusFd, F_GETFL);
    if (fl < 0 || ::fstat(cfg_.statusFd, &st) != 0 || !S_ISFIFO(st.st_mode) ||
        (cfg_.statusIno != 0 && st.st_ino != cfg_.statusIno))
      cfg_.statusFd = -1;
    else
      ::fcntl(cfg_.statusFd, F_SETFL, fl | O_NONBLOCK);
    protectFd(cfg_.statusFd);
  }
}

RecordSession::~RecordSession() { onExit(true, 0); }

int RecordSession::traceDirFd() {
  if (!dirFd_.valid()) {
    dirFd_ = createTraceDir(cfg_.traceDir);
    dirFd_.reset(moveAboveFdLimit(dirFd_.release()));  // recorder/HighFds.h: not one of the job's
    protectFd(dirFd_.get());
  }
  return dirFd_.get();
}

const std::string& RecordSession::pystackPath() {
  std::lock_guard<std::mutex> lk(mu_);
  if (!pystackReady_) {
    pystackReady_ = true;
    // O_EXCL as for stream files: a file or link planted under the name (O_NOFOLLOW alone
    // would still open a planted hard link, or a file another user left in a directory that
    // was open to them before dlrecord tightened it) is never opened; the next name is taken.
    try {
      int dir = traceDirFd();
      std::string base = "pystack-" + std::to_string(::getpid());
      for (int n = 0; n < 100 && pystackFd_ < 0; ++n) {
        std::string name = (n == 0 ? base : base + "." + std::to_string(n)) + ".txt";
        int fd = ::openat(dir, name.c_str(), O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
        if (fd >= 0) {
          ::fchmod(fd, 0600);  // umask may have narrowed it; never wider
          fd = moveAboveFdLimit(fd);
          protectFd(fd);
          pystackFd_ = fd;
          pystackName_ = name;
          pystackPath_ = cfg_.traceDir + "/" + name;
        } else if (errno != EEXIST) {
          break;
        }
      }
    } catch (...) {  // best effort: no Python stack file: py-spy's dump is skipped, the run is not
    }
    if (pystackFd_ < 0) pystackPath_.clear();  // no file we control: faulthandler stays off
  }
  return pystackPath_;
}

int RecordSession::pystackFd() {
  pystackPath();
  std::lock_guard<std::mutex> lk(mu_);
  return pystackFd_;
}

std::string RecordSession::status() const {
  std::lock_guard<std::mutex> lk(mu_);
  if (!status_.empty()) return status_;
  if (writer_ && writer_->failed()) return "recording stopped: " + writer_->error();
  return "";
}

void RecordSession::reportStatus(const std::string& line) noexcept {
  if (cfg_.statusFd < 0) return;
  try {
    std::string msg = "pid " + std::to_string(::getpid()) + ": " + line + "\n";
    writeNoSigpipe(cfg_.statusFd, msg.data(), msg.size());
  } catch (...) {  // best effort: the status pipe is dlrecord's: a failed write loses a line, never the job
  }
}

void RecordSession::reportWriterFailure(StreamWriter& w) noexcept {
  if (!w.failed() || writerFailureReported_.exchange(true)) return;
  try {
    reportStatus("recording stopped: " + w.error() + "; the trace keeps what was committed before (trace incomplete)");
  } catch (...) {  // best effort: the trace's own status event already holds the failure
  }
}

StreamWriter* RecordSession::writer() {
  // Caller holds mu_.
  if (writer_ || openTried_ || disabled_.load()) return writer_.get();
  openTried_ = true;
  try {
    int dir = traceDirFd();
    std::string name;
    // A rank of a distributed job is named for its rank (rank3.dls), other processes for their pid.
    DistEnv dist = DistEnv::fromEnvironment();
    std::string base = rankStreamBase(dist);
    if (base.empty()) base = "p" + std::to_string(::getpid());
    UniqueFd fd = createStreamFile(dir, base, name);
    fd.reset(moveAboveFdLimit(fd.release()));
    capnp::MallocMessageBuilder hm;
    auto h = initStreamHeader(hm, name, schema::StreamHeader::Role::PROCESS);
    std::string parent = "p" + std::to_string(::getppid());
    if (::faccessat(dir, (parent + kStreamExt).c_str(), F_OK, AT_SYMLINK_NOFOLLOW) == 0) h.setParentStream(parent);
    h.setProcessIdentity(identity_);
    auto argv = readCmdline();
    auto a = h.initArgv(static_cast<unsigned>(argv.size()));
    for (size_t i = 0; i < argv.size(); ++i) {
      bool changed = false;  // credentials in arguments never reach the trace (format/Redact.h)
      a.set(static_cast<unsigned>(i), redactValue(argv[i], changed));
    }
    h.setCwd(readLink("/proc/self/cwd"));
    h.setExe(readLink("/proc/self/exe"));
    h.setHost(hostName());
    h.setRank(dist.rank);
    h.setLocalRank(dist.localRank);
    h.setWorldSize(dist.worldSize);
    h.setRestartCount(dist.restartCount);
    h.setRunId(dist.runId);
    auto dv = h.initDistEnv(static_cast<unsigned>(dist.vars.size()));
    for (size_t i = 0; i < dist.vars.size(); ++i) {
      dv[static_cast<unsigned>(i)].setKey(dist.vars[i].first);
      dv[static_cast<unsigned>(i)].setValue(dist.vars[i].second);
    }
    int raw = fd.get();
    protectFd(raw);  // before the writer holds it: the job's close() must never free the number
    try {
      writer_ = std::make_unique<StreamWriter>(std::move(fd), hm);
      streamName_ = name;
      if (cfg_.budget > 0) budget_ = std::make_unique<TraceBudget>(cfg_.budget, dir);
      openWriter_.store(writer_.get(), std::memory_order_release);
    } catch (...) {
      unprotectFd(raw);
      throw;
    }
    streamFd_ = raw;
  } catch (const std::exception& e) {
    status_ = std::string("not recording this process: ") + e.what();
    disabled_.store(true);
    reportStatus(status_);
  }
  return writer_.get();
}

template <typename Fill>
void RecordSession::emit(Fill&& fill, int64_t stepBegin) {
  if (disabled_.load(std::memory_order_relaxed)) return;
  try {
    // The first segment on the stack (capnp wants it zeroed): most events fit, and a larger
    // one takes heap segments as it grows. No allocation per event in the common case.
    capnp::word scratch[128] = {};
    capnp::MallocMessageBuilder msg(kj::arrayPtr(scratch, std::size(scratch)));
    auto e = msg.initRoot<schema::Event>();
    e.setTNs(monoNs() - startNs_);
    e.setStep(step_.load(std::memory_order_relaxed));
    e.setThread(threadNumber());
    // The writer once open, without the lock (taken per event, twice a module call with the
    // failure ring's); the lock opens it, once.
    StreamWriter* w = openWriter();
    if (!w) {
      std::lock_guard<std::mutex> lk(mu_);
      w = writer();
    }
    if (!w) return;
    fill(e, *w);
    w->append(msg, stepBegin);
  } catch (const std::exception& ex) {
    std::lock_guard<std::mutex> lk(mu_);
    if (status_.empty()) {
      status_ = std::string("recording error: ") + ex.what();
      reportStatus(status_);
    }
  } catch (...) {  // kj::Exception and anything else: never into the job
    std::lock_guard<std::mutex> lk(mu_);
    if (status_.empty()) {
      status_ = "recording error";
      reportStatus(status_);
    }
  }
}

void RecordSession::appendEvent(int64_t step, const std::function<void(schema::Event::Builder, StreamWriter&)>& fill) {
  emit([&](schema::Event::Builder e, StreamWriter& w) {
    fill(e, w);
    e.setStep(step);
  });
}

void RecordSession::entropy(schema::Entropy::Source src, unsigned flags, const void* data, size_t n, size_t requested) {
  emit([&](schema::Event::Builder e, StreamWriter&) {
    auto en = e.initEntropy();
    en.setSource(src);
    en.setFlags(flags);
    en.setData(capnp::Data::Reader(static_cast<const kj::byte*>(data), n));
    en.setRequested(requested);
  });
}

void RecordSession::runtimeInfo(const char* key, const char* value) {
  emit([&](schema::Event::Builder e, StreamWriter&) {
    auto items = e.initRuntimeInfo().initItems(1);
    items[0].setKey(key ? key : "");
    items[0].setValue(value ? value : "");
  });
}

void RecordSession::note(const char* text) {
  emit([&](schema::Event::Builder e, StreamWriter&) { e.setNote(text ? text : ""); });
}

void RecordSession::recorderStatus(bool ok, const char* message) {
  emit([&](schema::Event::Builder e, StreamWriter&) {
    auto s = e.initRecorderStatus();
    s.setOk(ok);
    s.setMessage(message ? message : "");
  });
  if (!ok) reportStatus(message ? message : "");
}

void RecordSession::stepBegin(int64_t step, uint32_t loader, uint64_t batchIndex, int64_t epoch, StepRule rule) {
  step_.store(step, std::memory_order_relaxed);
  stepUntrained_.store(false);
  if (StepObserver* o = observer_.load(std::memory_order_acquire)) o->stepBegan(step);
  stepNonFinite_.store(0);
  stepDigests_.store(0);
  ring_.stepBegan();
  emit(
      [&](schema::Event::Builder e, StreamWriter&) {
        auto sb = e.initStepBegin();
        sb.setStep(step);
        sb.setLoader(loader);
        sb.setBatchIndex(batchIndex);
        sb.setEpoch(epoch);
        sb.setByOptimizer(rule == StepRule::Optimizer);
        sb.setByBackward(rule == StepRule::Backward);
        sb.setByGradientCall(rule == StepRule::GradientCall);
      },
      step);
}

void RecordSession::stepUntrained(int64_t step) {
  if (step == step_.load(std::memory_order_relaxed)) stepUntrained_.store(true);
}

void RecordSession::stepEnd(int64_t step, double loss, bool durableNow) {
  if (StepObserver* o = observer_.load(std::memory_order_acquire)) o->stepEnding(step);
  emit([&](schema::Event::Builder e, StreamWriter&) {
    auto se = e.initStepEnd();
    se.setStep(step);
    se.setLoss(loss);
    se.setNonFinite(stepNonFinite_.load());
    se.setDigests(stepDigests_.load());
    se.setUntrained(stepUntrained_.load());
  });
  StreamWriter* w = openWriter();
  if (w) {
    writeTriage(*w, "step", false);  // failed lookups and peaks, when they changed
    if (!durableNow) {
      // The commit point moves to waitStepDurable(): still before the job's code runs again.
      uint64_t ticket = w->commitAsync();
      uint64_t older = pendingCommit_.exchange(ticket);
      if (older > ticket) pendingCommit_.store(older);  // another thread's later one: keep the later
      maybeCheckBudget();
      return;
    }
    w->commit(true);          // the commit point: durable before the job goes on
    reportWriterFailure(*w);  // a full disk says so while the job runs, not only at its exit
  }
  maybeCheckBudget();
}

void RecordSession::waitStepDurable() noexcept {
  uint64_t ticket = pendingCommit_.exchange(0);
  if (ticket == 0) return;
  try {  // called from batchEnd's scope guard: nothing may escape
    StreamWriter* w = openWriter();
    if (!w) return;
    w->waitCommitted(ticket);
    reportWriterFailure(*w);
  } catch (...) {  // best effort: never out of batchEnd's guard; a writer failure is reported by the writer
  }
}

void RecordSession::rngState(int kind, int device, const void* data, uint64_t n, bool atFork, bool wake) {
  emit([&](schema::Event::Builder e, StreamWriter& w) {
    auto r = e.initRngState();
    r.setKind(static_cast<schema::RngState::Kind>(kind));
    r.setDevice(device);
    r.setAtFork(atFork);
    setRef(r.initState(), w.putBlob(data, n, 1, wake));
  });
}

void RecordSession::wakeWriter() {
  StreamWriter* w = openWriter();
  if (w) w->wake();
}

BatchBuilder& RecordSession::batchBuilder() {
  thread_local BatchBuilder b;
  return b;
}

void RecordSession::batchBegin(uint32_t loader, uint32_t iteration, uint64_t index, bool isTraining,
                               const int64_t* indices, uint64_t n) {
  batchBuilder().begin(loader, iteration, index, isTraining, indices, n);
}

void RecordSession::snapshotBegin(int64_t step, bool failure, bool window) {
  // A held snapshot once the window was written is an ordinary periodic one.
  bool held = window && windowActive();
  batchBuilder().beginSnapshot(step, failure, held);
  if (!failure && !held) openBulk();  // a budgeted trace's periodic snapshot: bulk, droppable
}

void RecordSession::openBulk() noexcept {
  try {
    StreamWriter* w = openWriter();
    if (!w) {
      std::lock_guard<std::mutex> lk(mu_);
      w = writer();
    }
    if (!w || !budget_ || disabled_.load()) return;
    std::lock_guard<std::mutex> lk(bulkMu_);
    if (bulkWriter_) return;
    // The stream says format 2 before its first event that refers to a bulk file: a dlrr from
    // before bulk files refuses it instead of misreading it (format/Frame.h). Fails: no bulk.
    if (!bulkMarked_) {
      setStreamFormatMajor(dirFd_.get(), streamName_ + kStreamExt, kFormatMajor);
      bulkMarked_ = true;
    }
    std::string name;
    UniqueFd fd = createBulkFile(dirFd_.get(), streamName_, bulkNext_, name);
    fd.reset(moveAboveFdLimit(fd.release()));
    ++bulkNext_;
    capnp::MallocMessageBuilder hm;
    initStreamHeader(hm, name.substr(0, name.size() - std::strlen(kBulkExt)), schema::StreamHeader::Role::PROCESS);
    auto bulk = std::make_unique<StreamWriter>(std::move(fd), hm);
    setStreamFormatMajor(dirFd_.get(), name, kFormatMajor);  // its header is written: a bulk file is 2.x
    bulkWriter_ = std::move(bulk);
    bulkName_ = name;
  } catch (...) {  // the snapshot goes into the stream, as without a budget
    std::lock_guard<std::mutex> lk(bulkMu_);
    bulkWriter_.reset();
  }
}

bool RecordSession::closeBulk(int64_t step, bool keep) noexcept {
  std::unique_ptr<StreamWriter> b;
  std::string name;
  {
    std::lock_guard<std::mutex> lk(bulkMu_);
    b = std::move(bulkWriter_);
    name = std::move(bulkName_);
  }
  if (!b) return true;
  bool kept = false;
  struct Abandon {  // unless kept: the files the snapshot referred to are no longer pinned for it
    RecordSession& s;
    bool& kept;
    ~Abandon() {
      if (kept || !s.budget_) return;
      std::lock_guard<std::mutex> lk(s.budgetMu_);
      s.budget_->abandon();
    }
  } abandon{*this, kept};
  try {
    b->close();  // its blobs are in the kernel before the stream's event that refers to them
    std::string why = b->failed() ? b->error() : "";
    uint64_t bytes = b->stats().storedBytes;
    b.reset();
    if (keep && why.empty()) {
      std::lock_guard<std::mutex> lk(budgetMu_);
      budget_->addBulk({name, step, bytes});
      kept = true;
      return true;
    }
    ::unlinkat(dirFd_.get(), name.c_str(), 0);
    if (!why.empty()) note(("snapshot of step " + std::to_string(step) + " not written: " + why).c_str());
  } catch (...) {  // best effort: the snapshot is optional: the previous one and the per-step record stand
  }
  return false;
}

static std::string budgetSize(uint64_t n) {
  const char* units[] = {"bytes", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  double v = static_cast<double>(n);
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  char buf[64];
  if (u == 0)
    std::snprintf(buf, sizeof buf, "%llu bytes", static_cast<unsigned long long>(n));
  else
    std::snprintf(buf, sizeof buf, "%.1f %s", v, units[u]);
  return buf;
}

uint64_t RecordSession::enforceBudget(uint64_t extra, const char* where) noexcept {
  if (!budget_ || budgetStopped_.load()) return 0;
  try {
    uint64_t used = 0;
    std::vector<TraceBudget::Bulk> dropped;
    {
      std::lock_guard<std::mutex> lk(budgetMu_);
      dropped = budget_->makeRoom(extra, used);
      if (StreamWriter* w = openWriter()) budgetCheckedAt_ = w->stats().storedBytes;
    }
    // The stream says what was dropped, and why: dltrace info and dlreplay read the rest off
    // the blobs that are missing.
    for (const auto& d : dropped)
      note(("budget: dropped the snapshot of step " + std::to_string(d.step) + " (" + d.file + ", " +
            std::to_string(d.bytes) + " bytes) to stay within " + budgetSize(budget_->limit()))
               .c_str());
    if (used <= budget_->limit() || budgetStopped_.exchange(true)) return used;
    // What is kept (every step's record, the latest snapshot) is over the budget: stop here,
    // with what was committed, rather than grow past what the user allowed.
    std::string msg = "trace budget (--budget " + budgetSize(budget_->limit()) + ") reached at " + where + " step " +
                      std::to_string(step_.load()) + ": the trace holds " + budgetSize(used) +
                      " of what every step records (and the latest snapshot, with the older bulk files it refers "
                      "to), which is never dropped; recording "
                      "stopped there (the job goes on); raise --budget, or record batches by reference "
                      "(--window K)";
    recorderStatus(false, msg.c_str());
    if (StreamWriter* w = openWriter()) w->commit(true);
    disabled_.store(true);
    return used;
  } catch (...) {
    return 0;
  }
}

void RecordSession::maybeCheckBudget() noexcept {
  if (!budget_ || budgetStopped_.load()) return;
  StreamWriter* w = openWriter();
  if (!w) return;
  uint64_t stride = std::max<uint64_t>(budget_->limit() / 64, 64u << 10);
  uint64_t stored = w->storedBytes();
  {
    std::lock_guard<std::mutex> lk(budgetMu_);
    if (stored < budgetCheckedAt_ + stride) return;
  }
  enforceBudget(0, "the end of");
}

void RecordSession::batchByReference() { batchBuilder().setByReference(); }

void RecordSession::batchTensor(const char* dtype, uint32_t elemSize, int ndim, const int64_t* shape, const void* data,
                                uint64_t nbytes, const char* device, bool requiresGrad) {
  StreamWriter* w;
  {
    std::lock_guard<std::mutex> lk(mu_);
    w = disabled_.load() ? nullptr : writer();
  }
  // The writer thread is woken once, at the batch's end, not for each of its tensors.
  BatchBuilder& b = batchBuilder();
  bool toWindow = windowActive() && (b.byReference() || b.heldSnapshot());
  StreamWriter* bulk = nullptr;  // a budgeted trace's periodic snapshot: its own bulk file
  if (b.isSnapshot() && !b.heldSnapshot()) {
    std::lock_guard<std::mutex> lk(bulkMu_);
    bulk = bulkWriter_.get();
  }
  if (bulk) w = bulk;
  BatchBuilder::PutBlob put = [this, w, toWindow, bulk](const void* p, size_t n, unsigned es) {
    // A periodic snapshot: what a kept bulk file holds is referenced there, but not a small
    // tensor: rewriting it costs less than pinning a whole file for it (TraceBudget.h).
    if (bulk && budget_ && n >= TraceBudget::kMinShared) {
      Hash128 h = hash128(p, n);
      {
        std::lock_guard<std::mutex> lk(budgetMu_);
        if (budget_->reference(h)) return BlobId{h, n};
      }
      BlobId id = bulk->putBlob(p, n, es, false);
      if (id.fresh) {
        std::lock_guard<std::mutex> lk(budgetMu_);
        budget_->wrote(id.hash);
      }
      return id;
    }
    if (toWindow) {
      Hash128 h = hash128(p, n);
      std::lock_guard<std::mutex> lk(windowMu_);
      window_->keep(h, p, n, es);
      BlobId id{h, n};
      id.fresh = true;  // not in the stream yet: a held snapshot's newBytes counts it
      return id;
    }
    return w ? w->putBlob(p, n, es, false) : BlobId{hash128(p, n), n};
  };
  b.tensor(dtype, elemSize, ndim, shape, data, nbytes, device, requiresGrad, put);
}

void RecordSession::batchEnd() {
  struct Wake {        // the batch's blobs were queued without waking the writer: on every exit;
    RecordSession& s;  // and the delivery's step end is durable before the batch reaches the job
    ~Wake() {
      s.wakeWriter();
      s.waitStepDurable();
    }
  } wake{*this};
  std::string err;
  BatchBuilder& b = batchBuilder();
  bool byReference = b.byReference();
  bool held = b.heldSnapshot();
  bool periodic = b.isSnapshot() && !held;
  auto msg = b.finish(err);
  if (!msg) {
    if (periodic) closeBulk(-1, false);
    if (window_) {
      std::lock_guard<std::mutex> lk(windowMu_);
      window_->discardPending();
    }
    note(("batch or snapshot not recorded: " + err).c_str());
    return;
  }
  if (disabled_.load()) return;
  auto e = msg->getRoot<schema::Event>();
  e.setTNs(monoNs() - startNs_);
  e.setStep(step_.load());
  e.setThread(threadNumber());
  if (window_ && (byReference || held)) {
    std::unique_lock<std::mutex> lk(windowMu_);
    if (!windowFlushed_.load()) {
      if (held) {  // written with the window's batches, or never
        int64_t step = e.getSnapshot().getStep();
        window_->endSnapshot(step, std::move(msg));
        return;
      }
      window_->endBatch(step_.load());
    }
  }
  StreamWriter* w;
  {
    std::lock_guard<std::mutex> lk(mu_);
    w = writer();
  }
  if (periodic && !closeBulk(e.getSnapshot().getStep(), w != nullptr)) return;
  if (w) w->append(*msg);
  if (periodic) enforceBudget(0, "the snapshot of");
}

void RecordSession::loaderEnd(uint32_t loader, uint32_t iteration, uint64_t batches) {
  emit([&](schema::Event::Builder e, StreamWriter&) {
    auto le = e.initLoaderEnd();
    le.setLoader(loader);
    le.setIteration(iteration);
    le.setBatches(batches);
  });
}

int RecordSession::digest(int kind, const char* path, uint32_t callIndex, uint32_t output, const char* dtype, int ndim,
                          const int64_t* shape, const void* data, uint64_t nbytes, bool keep, DigestResult& out) {
  std::string_view dt = dtype ? dtype : "";
  stepDigests_.fetch_add(1, std::memory_order_relaxed);
  int64_t step = step_.load();
  if (keep && data && cfg_.capture == CaptureLevel::Full) {
    out = computeDigest(dt, data, nbytes);
    // Full capture: every kept tensor of every step goes to the trace now (content-addressed,
    // so repeats cost nothing); the failure ring is then redundant.
    emit([&](schema::Event::Builder e, StreamWriter& w) {
      fillFullTensor(e, w, kind, path ? path : "", callIndex, output, dt, shape, ndim, data, nbytes);
    });
  } else if (keep && data) {
    // The ring's copy made by the digest's pass over the tensor (read once, not twice).
    bool digested = false;
    FailureRing::Keep verdict =
        ring_.keepFilled(step, kind, path ? path : "", callIndex, output, dt, shape, ndim, nbytes, [&](uint8_t* dst) {
          out = computeDigestAndCopy(dt, data, nbytes, dst);
          digested = true;
        });
    if (!digested) out = computeDigest(dt, data, nbytes);
    if (verdict == FailureRing::Keep::WriteNow)
      writeFailingStepTensor(step, kind, path, callIndex, output, dt, shape, ndim, data, nbytes);
  } else {
    out = computeDigest(dt, data, data ? nbytes : 0);
  }
  recordDigest(step, kind, path, callIndex, output, dtype, ndim, shape, out);
  return 0;
}

int RecordSession::digestBorrowed(int kind, const char* path, uint32_t callIndex, uint32_t output, const char* dtype,
                                  int ndim, const int64_t* shape, const void* data, uint64_t nbytes, DigestResult& out,
                                  int64_t& borrowedStep, int64_t& floor) {
  borrowedStep = -1;
  if (!data || cfg_.capture == CaptureLevel::Full) {
    floor = ring_.borrowFloor();
    return digest(kind, path, callIndex, output, dtype, ndim, shape, data, nbytes, true, out);
  }
  std::string_view dt = dtype ? dtype : "";
  stepDigests_.fetch_add(1, std::memory_order_relaxed);
  int64_t step = step_.load();
  // The digest's pass without the ring's copy: the ring holds the caller's bytes and this hash.
  out = computeDigest(dt, data, nbytes);
  FailureRing::Keep verdict =
      ring_.keepBorrowed(step, kind, path ? path : "", callIndex, output, dt, shape, ndim, data, nbytes, out.hash);
  if (verdict == FailureRing::Keep::Kept) borrowedStep = step;
  if (verdict == FailureRing::Keep::WriteNow)
    writeFailingStepTensor(step, kind, path, callIndex, output, dt, shape, ndim, data, nbytes);
  recordDigest(step, kind, path, callIndex, output, dtype, ndim, shape, out);
  floor = ring_.borrowFloor();  // after a failure this digest raised: INT64_MAX
  return 0;
}

void RecordSession::recordDigest(int64_t step, int kind, const char* path, uint32_t callIndex, uint32_t output,
                                 const char* dtype, int ndim, const int64_t* shape, const DigestResult& out) {
  emit([&](schema::Event::Builder e, StreamWriter&) {
    auto d = e.initDigest();
    d.setKind(static_cast<schema::TensorDigest::Kind>(kind));
    d.setPath(path ? path : "");
    d.setCallIndex(callIndex);
    d.setOutput(output);
    d.setDtype(dtype ? dtype : "");  // NUL-terminated, no copy
    auto s = d.initShape(static_cast<unsigned>(ndim > 0 ? ndim : 0));
    for (int i = 0; i < ndim; ++i) s.set(static_cast<unsigned>(i), shape[i]);
    d.setHash(out.hash);
    d.setNanCount(out.nanCount);
    d.setInfCount(out.infCount);
    d.setMin(out.min);
    d.setMax(out.max);
  });
  recordNonFinite(step, kind, path, callIndex, out, false);
}

void RecordSession::keepInRing(int64_t step, int kind, const char* path, uint32_t callIndex, uint32_t output,
                               std::string_view dtype, const int64_t* shape, int ndim, const void* data,
                               uint64_t nbytes) {
  if (ring_.keep(step, kind, path ? path : "", callIndex, output, dtype, shape, ndim, data, nbytes) ==
      FailureRing::Keep::WriteNow)
    writeFailingStepTensor(step, kind, path, callIndex, output, dtype, shape, ndim, data, nbytes);
}

void RecordSession::writeFailingStepTensor(int64_t step, int kind, const char* path, uint32_t callIndex,
                                           uint32_t output, std::string_view dtype, const int64_t* shape, int ndim,
                                           const void* data, uint64_t nbytes) {
  // The failing step goes on after its failure: what it computes next is written at once and
  // made durable (the step may never end: a job that hangs there is killed by its `timeout`).
  appendEvent(step, [&](schema::Event::Builder e, StreamWriter& w) {
    fillFullTensor(e, w, kind, path ? path : "", callIndex, output, dtype, shape, ndim, data, nbytes);
  });
  commitNow();
}

void RecordSession::recordNonFinite(int64_t step, int kind, const char* path, uint32_t callIndex, const DigestResult& d,
                                    bool flushObserver) {
  uint64_t bad = d.nanCount + d.infCount;
  if (!bad) return;
  stepNonFinite_.fetch_add(bad, std::memory_order_relaxed);
  bool expected = false;
  if (!haveFailure_.compare_exchange_strong(expected, true)) return;
  failureStep_.store(step);
  NonFiniteFailure nf = describeNonFinite(kind, path ? path : "", callIndex, d.nanCount, d.infCount);
  // The failure first, then the failing step's ring tensors, each made durable before the
  // next: a job killed meanwhile (a `timeout`, a scheduler's SIGTERM) keeps what matters most.
  RingForFailure ring = ring_.takeForFailure(step);
  std::vector<KeptTensor>& kept = ring.tensors;
  size_t ofStep = 0;
  while (ofStep < kept.size() && kept[ofStep].step == step) ++ofStep;
  appendEvent(step, [&](schema::Event::Builder e, StreamWriter&) {
    auto f = e.initFailure();
    f.setKind(schema::Failure::Kind::NONFINITE);
    f.setStep(step);
    f.setWhere(nf.where);
    f.setMessage(nf.message);
    f.setCallIndex(callIndex);
    f.setDigestKind(static_cast<schema::TensorDigest::Kind>(kind));
    f.setRingTensors(static_cast<uint32_t>(ofStep));
    f.setRingChanged(ring.changedAfterHook);
  });
  if (flushObserver)
    if (StepObserver* o = observer_.load(std::memory_order_acquire)) o->flush();
  commitNow();
  for (size_t i = 0; i < kept.size(); ++i) {
    const KeptTensor& k = kept[i];
    appendEvent(k.step, [&](schema::Event::Builder e, StreamWriter& w) {
      fillFullTensor(e, w, k.kind, k.path, k.callIndex, k.output, k.dtype, k.shape.data(),
                     static_cast<int>(k.shape.size()), k.bytes.data(), k.bytes.size());
    });
    if (i + 1 == ofStep) commitNow();
    KeptBytes().swap(kept[i].bytes);  // written: its memory goes back now
  }
  commitNow();
  flushWindow("the failure");
}

void RecordSession::commitNow() {
  StreamWriter* w = openWriter();
  if (w) w->commit(true);
}

void RecordSession::flushWindow(const char* why) noexcept {
  if (!window_) return;
  try {
    std::deque<BatchWindow::Segment> segments;
    uint64_t peak = 0, collectivePeak = 0;
    {
      std::lock_guard<std::mutex> lk(windowMu_);
      if (windowFlushed_.exchange(true)) return;
      peak = window_->peakBytes();
      collectivePeak = window_->peakCollectiveBytes();
      segments = window_->take();
    }
    StreamWriter* w = openWriter();
    if (!w || disabled_.load()) return;
    std::string leftOut;
    if (budget_) {
      // Old snapshots go first; when the window alone is over the budget, its oldest segments
      // (the newest starts at its own snapshot, so what is written still replays).
      uint64_t need = 0;
      for (const auto& s : segments) need += s.bytes;
      uint64_t used = enforceBudget(need, "the window of");
      if (disabled_.load()) return;
      size_t cut = 0;
      while (!segments.empty() && used + need > budget_->limit()) {
        need -= segments.front().bytes;
        segments.pop_front();
        ++cut;
      }
      if (cut)
        leftOut = "; " + std::to_string(cut) + " older window segment(s) left out to stay within the budget (" +
                  budgetSize(budget_->limit()) + ")";
    }
    uint64_t bytes = 0, collectiveBytes = 0;
    size_t batches = 0, collectiveResults = 0, collectiveSteps = 0;
    std::string starts;
    // Blobs first, then the held snapshots that refer to them, then one commit: a reader finds
    // a snapshot's tensors wherever it finds the snapshot.
    for (auto& s : segments) {
      for (auto& blob : s.snapshotBlobs) {
        w->putBlob(blob.bytes.data(), blob.bytes.size(), blob.elemSize, false);
        bytes += blob.bytes.size();
        std::vector<uint8_t>().swap(blob.bytes);
      }
      for (auto& batch : s.batches) {
        for (auto& blob : batch) {
          w->putBlob(blob.bytes.data(), blob.bytes.size(), blob.elemSize, false);
          bytes += blob.bytes.size();
          std::vector<uint8_t>().swap(blob.bytes);
        }
        ++batches;
      }
      for (auto& ofStep : s.collectives) {
        for (auto& blob : ofStep.blobs) {
          w->putBlob(blob.bytes.data(), blob.bytes.size(), blob.elemSize, false);
          collectiveBytes += blob.bytes.size();
          ++collectiveResults;
          std::vector<uint8_t>().swap(blob.bytes);
        }
        collectiveSteps += s.startable ? 1 : 0;
      }
      if (s.snapshot) {
        auto e = s.snapshot->getRoot<schema::Event>();
        e.setTNs(monoNs() - startNs_);
        e.setStep(s.startStep);
        e.setThread(threadNumber());
        w->append(*s.snapshot);
      }
      if (s.startable) starts += (starts.empty() ? "" : ", ") + std::to_string(s.startStep);
    }
    w->wake();
    w->commit(true);
    reportStatus("batch window (--window " + std::to_string(window_->steps()) + ") written at " + why + ": " +
                 std::to_string(batches) + " batches, " + std::to_string(bytes) + " bytes (peak held in memory " +
                 std::to_string(peak) + " bytes); data-less replay can start at step " +
                 (starts.empty() ? std::string("(none)") : starts) +
                 (collectiveResults
                      ? "; with it " + std::to_string(collectiveResults) + " collective results of " +
                            std::to_string(collectiveSteps) + " steps, " + std::to_string(collectiveBytes) +
                            " bytes (peak held " + std::to_string(collectivePeak) + " bytes)"
                      : std::string()) +
                 leftOut);
  } catch (...) {  // best effort: the window's summary line is informational; its bytes are written
  }
}

bool RecordSession::firstFailureStep(int64_t& step) const {
  if (!haveFailure_.load()) return false;
  step = failureStep_.load();
  return true;
}

void RecordSession::failureException(const char* type, const char* message, const char* where, int n,
                                     const char* const* files, const int32_t* lines, const char* const* functions,
                                     const char* const* code) {
  int64_t step = step_.load();
  emit([&](schema::Event::Builder e, StreamWriter&) {
    auto f = e.initFailure();
    f.setKind(schema::Failure::Kind::EXCEPTION);
    f.setStep(step);
    f.setExceptionType(type ? type : "");
    f.setMessage(message ? message : "");
    f.setWhere(where ? where : "");
    auto tb = f.initTraceback(static_cast<unsigned>(n > 0 ? n : 0));
    for (int i = 0; i < n; ++i) {
      auto fr = tb[static_cast<unsigned>(i)];
      fr.setFile(files && files[i] ? files[i] : "");
      fr.setLine(lines ? lines[i] : 0);
      fr.setFunction(functions && functions[i] ? functions[i] : "");
      fr.setCode(code && code[i] ? code[i] : "");
    }
  });
  haveFailure_.store(true);
  if (StepObserver* o = observer_.load(std::memory_order_acquire)) o->flush();
  StreamWriter* w = openWriter();
  if (w) writeTriage(*w, "failure", true);
  if (w) w->commit(true);
  flushWindow("the failure");
}

void RecordSession::beforeFork() noexcept {
  // Every lock of the session, in the order of RecordSession.h: no other thread holds one across
  // fork(), so the child (a trainer that records, or a worker whose hook still calls in) never
  // inherits one held by a thread it does not have.
  mu_.lock();
  ring_.lockForFork();
  triage_.lockForFork();
  collMu_.lock();
  gpuMu_.lock();
  windowMu_.lock();
  if (writer_) writer_->beforeFork();
}

void RecordSession::afterForkParent() noexcept {
  if (writer_) writer_->afterForkParent();
  windowMu_.unlock();
  gpuMu_.unlock();
  collMu_.unlock();
  triage_.unlockAfterFork();
  ring_.unlockAfterForkParent();
  mu_.unlock();
}

void RecordSession::forked(int childPid) noexcept {
  // Python-level forks (os.fork, multiprocessing) run the hook's fork naming (processes.py):
  // the child's identity is in our environment until fork() has returned here.
  const char* id = std::getenv(kProcessIdEnv);
  const bool named = id && *id && identity_ != id;
  const auto kind = named && isTrainerIdentity(id) ? schema::Fork::Kind::RECORDED
                    : named                        ? schema::Fork::Kind::LOADER_WORKER
                    : pythonRunning()              ? schema::Fork::Kind::NATIVE
                                                   : schema::Fork::Kind::UNKNOWN;
  emit([&](schema::Event::Builder e, StreamWriter&) {
    auto f = e.initFork();
    f.setChildPid(childPid);
    f.setKind(kind);
    if (named) f.setChildIdentity(id);
    if (kind == schema::Fork::Kind::RECORDED) f.setChildStream("p" + std::to_string(childPid));
  });
  // Durable now, not at the next step's commit: a parent that trains nothing itself (a
  // Hogwild parent waiting in join()) may be killed long before that.
  try {
    commitNow();
  } catch (...) {  // best effort: never into the job
  }
}

void RecordSession::afterForkChild() noexcept {
  // A forked child without exec (e.g. a DataLoader worker) is not recorded: its work reaches
  // the parent (batches), and replay serves the parent. After exec it records afresh. A
  // multiprocessing.Process the job started (its new identity is in the environment the
  // hook set for this fork: a Hogwild trainer) records its own stream, opened on its first
  // event like any process's.
  unprotectAllFds();  // the child's copies are not ours: the job may close them
  if (writer_) writer_->afterForkChild();
  pendingCommit_.store(0);  // a ticket of the parent's writer
  (void)writer_.release();  // owned by the parent's copy of memory; never destroy it here
  openWriter_.store(nullptr, std::memory_order_release);
  ring_.resetAfterForkChild();
  if (window_) window_->take();  // the parent's batches: a trainer child holds its own
  windowMu_.unlock();
  // The parent's bulk files are the parent's to drop: a trainer child keeps its own list.
  if (bulkWriter_) bulkWriter_->afterForkChild();
  (void)bulkWriter_.release();
  budget_.reset();
  bulkMarked_ = false;  // the child's own stream
  gpuMu_.unlock();
  collMu_.unlock();
  collectives_.clear();  // the parent's, in flight on the parent's process group
  triage_.unlockAfterFork();
  // GPU capture is the parent's (CUDA cannot be used in a forked child): its drain thread and
  // its lock stay there.
  observer_.store(nullptr, std::memory_order_release);
  const char* id = std::getenv(kProcessIdEnv);  // getenv allocates nothing: safe in a fork child
  bool trainer = isTrainerIdentity(id) && identity_ != id && !disabled_.load() && !exited_.load();
  if (trainer) {
    identity_ = id;
    ownerPid_ = ::getpid();
    openTried_ = false;
    status_.clear();
    writerFailureReported_.store(false);
    streamFd_ = -1;
    pystackReady_ = false;  // the parent's crash file is the parent's
    pystackFd_ = -1;
    pystackPath_.clear();
    startNs_ = monoNs();
    if (dirFd_.valid()) protectFd(dirFd_.get());  // our inherited copy of the trace directory
    if (cfg_.statusFd >= 0) protectFd(cfg_.statusFd);
  }
  mu_.unlock();
  if (trainer) return;
  disabled_.store(true);
  exited_.store(true);
}

void RecordSession::onFatalSignal(int sig, const siginfo_t* info, const uint64_t* ips, int nips,
                                  int faultFrame) noexcept {
  if (disabled_.load() || exited_.load() || ::getpid() != ownerPid_) return;
  StreamWriter* w = openWriter();  // lock-free: mu_ may be held by the interrupted thread
  if (!w) return;
  crash_.write(*w, monoNs() - startNs_, step_.load(), threadNumber(), sig, info, ips, nips, faultFrame, pystackFd_);
}

void RecordSession::onExit(bool exited, int code) noexcept {
  // A vfork child (subprocess's exec failed: it calls _exit) shares our memory and runs no
  // atfork handler: its exit is not ours, and closing the writer would end our recording.
  if (::getpid() != ownerPid_) return;
  if (exited_.load()) return;
  if (StepObserver* o = observer_.load(std::memory_order_acquire)) o->finish();  // before the stream closes
  flushWindow("exit");  // before exited_: its writes go through the open writer
  if (exited_.exchange(true)) return;
  auto removeEmptyPystack = [this] {
    struct stat st {};
    if (pystackFd_ >= 0 && ::fstat(pystackFd_, &st) == 0 && st.st_size == 0)
      ::unlinkat(dirFd_.get(), pystackName_.c_str(), 0);  // nothing crashed: leave no empty file behind
  };
  try {
    // The writer is closed but never destroyed here: other threads may be inside emit() with
    // a pointer to it (entropy drawn while the main thread exits); once closed it ignores them.
    StreamWriter* w;
    {
      std::lock_guard<std::mutex> lk(mu_);
      if (!writer_) {  // recorded nothing (a forked child that exits at once), yet has a crash file
        removeEmptyPystack();
        return;
      }
      writeTriage(*writer_, "exit", true);
      capnp::MallocMessageBuilder msg;
      auto e = msg.initRoot<schema::Event>();
      e.setTNs(monoNs() - startNs_);
      e.setStep(step_.load());
      e.setThread(threadNumber());
      auto pe = e.initProcessExit();
      pe.setPid(::getpid());
      pe.setExited(exited);
      pe.setCode(code);
      pe.setExitCode(exited ? code : 128 + code);
      writer_->append(msg);
      w = writer_.get();
    }
    unprotectFd(streamFd_);  // the writer closes it now
    w->close();
    reportWriterFailure(*w);
    removeEmptyPystack();
  } catch (...) {  // best effort: at exit: the writer's status already says what was not written
  }
}

}  // namespace dlrr
