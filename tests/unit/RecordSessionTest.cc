#include <dlfcn.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "format/Frame.h"
#include "format/StreamReader.h"
#include "format/Trace.h"
#include "recorder/RecordSession.h"
#include "support/SampleTrace.h"

namespace dlrr {
namespace {

Config recordConfig(const std::string& dir, int ring = 2) {
  Config c;
  c.mode = Mode::Record;
  c.traceDir = dir;
  c.ringSteps = ring;
  return c;
}

// A session that completes step 0 and then takes fatal signal SIGSEGV with `info` at `ips`.
void recordCrashAfterOneStep(const std::string& dir, const siginfo_t& info, const uint64_t* ips, int n,
                             int faultFrame) {
  RecordSession s(recordConfig(dir));
  s.stepBegin(0, 0, 0, 0);
  s.stepEnd(0, 1.0);
  s.onFatalSignal(SIGSEGV, &info, ips, n, faultFrame);
  s.onExit(false, SIGSEGV);
}

siginfo_t segvInfo(int code) {
  siginfo_t info;
  std::memset(&info, 0, sizeof info);
  info.si_signo = SIGSEGV;
  info.si_code = code;
  return info;
}

TEST(RecordSession, StepsDigestsFailureAndRing) {
  std::string dir = testing::makeTempDir("rs") + "/t";
  {
    RecordSession s(recordConfig(dir));
    uint8_t seed[16] = {1, 2, 3};
    s.entropy(schema::Entropy::Source::GETRANDOM, 0, seed, sizeof seed, sizeof seed);
    int64_t shape[1] = {3};
    for (int step = 0; step < 4; ++step) {
      s.stepBegin(step, 0, static_cast<uint64_t>(step), 0);
      std::vector<float> out = {1.f, 2.f, static_cast<float>(step)};
      if (step == 2) out[1] = std::nanf("");
      DigestResult r;
      s.digest(0, "fc1", 0, 0, "float32", 1, shape, out.data(), out.size() * 4, true, r);
      if (step == 2) {
        EXPECT_EQ(r.nanCount, 1u);
        // After the failure the failing step goes on: its next tensors are written at once.
        std::vector<float> next = {4.f, 5.f, 6.f};
        s.digest(0, "fc2", 0, 0, "float32", 1, shape, next.data(), next.size() * 4, true, r);
      }
      s.stepEnd(step, step == 2 ? std::nan("") : 1.0 / (step + 1));
    }
    int64_t failStep = -1;
    ASSERT_TRUE(s.firstFailureStep(failStep));
    EXPECT_EQ(failStep, 2);
    s.onExit(true, 0);
  }
  auto t = Trace::open(dir);
  TraceSummary sum = t->summarize();
  EXPECT_EQ(sum.steps, 4u);
  ASSERT_TRUE(sum.failure);
  EXPECT_EQ(sum.failure->kind, "nonfinite");
  EXPECT_EQ(sum.failure->step, 2);
  EXPECT_EQ(sum.failure->where, "fc1");
  // The ring held steps 1 and 2 when the failure happened: both are written after the failure
  // event, the failing step first (a job killed meanwhile keeps it); then the rest of step 2
  // as it is computed; nothing of step 3.
  std::vector<std::pair<int64_t, std::string>> ringSteps;
  uint64_t nonFiniteAtStep2 = 0;
  bool failureSeen = false;
  t->mainStream()->forEachEvent([&](schema::Event::Reader e, const FrameInfo&) {
    if (e.isFailure()) {
      failureSeen = true;
      EXPECT_EQ(e.getFailure().getRingTensors(), 1u);
    }
    if (e.isTensor()) {
      EXPECT_TRUE(failureSeen);
      ringSteps.emplace_back(e.getStep(), e.getTensor().getPath().cStr());
    }
    if (e.isStepEnd() && e.getStepEnd().getStep() == 2) nonFiniteAtStep2 = e.getStepEnd().getNonFinite();
  });
  EXPECT_EQ(ringSteps, (std::vector<std::pair<int64_t, std::string>>{{2, "fc1"}, {1, "fc1"}, {2, "fc2"}}));
  EXPECT_EQ(sum.failure->ringTensors, 1u);
  EXPECT_EQ(sum.failure->ringWritten, 1u);
  EXPECT_EQ(nonFiniteAtStep2, 1u);
  for (auto& st : t->streams()) EXPECT_TRUE(st->verify().empty());
  testing::removeTree(dir);
}

// The failure ring without copies (digestBorrowed): the ring holds the caller's tensors and
// reads them at the failure. A tensor changed in place after its digest is left out and
// counted (the failure's ringChanged); the others are written with the bytes digested.
TEST(RecordSession, BorrowedRingTensorsAreWrittenAsDigestedOrLeftOut) {
  std::string dir = testing::makeTempDir("rs") + "/t";
  std::vector<std::vector<float>> bn(3), relu(3);  // the caller's tensors, alive past their steps
  {
    RecordSession s(recordConfig(dir));
    int64_t shape[1] = {3};
    for (int step = 0; step < 3; ++step) {
      s.stepBegin(step, 0, static_cast<uint64_t>(step), 0);
      bn[step] = {-1.f, 2.f, static_cast<float>(step)};
      relu[step] = {0.f, 2.f, static_cast<float>(step)};
      if (step == 2) relu[step][1] = std::nanf("");
      DigestResult r;
      int64_t borrowed = -1, floor = 0;
      s.digestBorrowed(0, "bn", 0, 0, "float32", 1, shape, bn[step].data(), 12, r, borrowed, floor);
      EXPECT_EQ(borrowed, step);
      EXPECT_EQ(floor, step < 2 ? INT64_MIN : 1) << "one past the last evicted step";
      bn[step][0] = 0.f;  // ReLU(inplace=True) on BatchNorm's output, after its hook
      s.digestBorrowed(0, "relu", 0, 0, "float32", 1, shape, relu[step].data(), 12, r, borrowed, floor);
      EXPECT_EQ(borrowed, step);
      if (step == 2) {
        EXPECT_EQ(floor, INT64_MAX) << "the failure took the ring: nothing is borrowed any more";
      }
      s.stepEnd(step, 1.0);
    }
    s.onExit(true, 0);
  }
  auto t = Trace::open(dir);
  TraceSummary sum = t->summarize();
  ASSERT_TRUE(sum.failure);
  EXPECT_EQ(sum.failure->where, "relu");
  EXPECT_EQ(sum.failure->ringChanged, 2u) << "bn of steps 1 and 2";
  std::vector<std::pair<int64_t, std::string>> ring;
  t->mainStream()->forEachEvent([&](schema::Event::Reader e, const FrameInfo&) {
    if (!e.isTensor()) return;
    ring.emplace_back(e.getStep(), e.getTensor().getPath().cStr());
    auto ref = e.getTensor().getTensor().getData();
    std::vector<uint8_t> bytes = t->mainStream()->readBlob(Hash128{ref.getHashLo(), ref.getHashHi()}, ref.getSize());
    const auto& want = relu[static_cast<size_t>(e.getStep())];
    std::vector<uint8_t> wantBytes(12);  // bit for bit: compared as bytes
    std::memcpy(wantBytes.data(), want.data(), wantBytes.size());
    EXPECT_EQ(bytes, wantBytes);
  });
  EXPECT_EQ(ring, (std::vector<std::pair<int64_t, std::string>>{{2, "relu"}, {1, "relu"}}));
  testing::removeTree(dir);
}

// A process killed right after its failure event (the ring's tensors not yet written): the
// summary says how many tensors the failure announced and how many reached the stream, so
// `dltrace info` can say that the failing step's tensors are missing and why.
TEST(RecordSession, RingTensorsMissingAfterTheFailureAreCounted) {
  std::string dir = testing::makeTempDir("rs") + "/t";
  {
    RecordSession s(recordConfig(dir));
    int64_t shape[1] = {3};
    for (int step = 0; step < 3; ++step) {
      s.stepBegin(step, 0, static_cast<uint64_t>(step), 0);
      std::vector<float> out = {1.f, step == 2 ? std::nanf("") : 2.f, 3.f};
      DigestResult r;
      s.digest(0, "fc1", 0, 0, "float32", 1, shape, out.data(), out.size() * 4, true, r);
      s.digest(0, "fc2", 0, 0, "float32", 1, shape, out.data(), out.size() * 4, false, r);
      if (step < 2) s.stepEnd(step, 1.0);
    }
  }
  std::string file;
  uint64_t cut = 0;
  {
    auto t = Trace::open(dir);
    StreamReader* m = t->mainStream();
    ASSERT_NE(m, nullptr);
    file = dir + "/" + m->name() + ".dls";
    m->forEachEvent([&](schema::Event::Reader e, const FrameInfo& f) {
      if (e.isFailure()) cut = f.offset + kFrameHeaderSize + f.header.storedLen;
    });
  }
  ASSERT_GT(cut, 0u);
  ASSERT_EQ(::truncate(file.c_str(), static_cast<off_t>(cut)), 0);  // killed before the ring was written
  auto t = Trace::open(dir, OpenMode::Tolerant);
  TraceSummary sum = t->summarize();
  ASSERT_TRUE(sum.failure);
  EXPECT_EQ(sum.failure->step, 2);
  EXPECT_EQ(sum.failure->ringTensors, 1u);
  EXPECT_EQ(sum.failure->ringWritten, 0u);
  testing::removeTree(dir);
}

// A fatal signal's failure event, with symbols for the native frames ("libc.so.6+0x...").
// Each symbol goes in as capnp::Text::Reader(buf, n), which requires buf[n] == '\0': a build
// with KJ_DEBUG (the Debug/ASan build) threw there, the handler swallowed it and the crash
// left no failure event (found by scripts/asan_integration.sh).
TEST(RecordSession, FatalSignalWritesTheFailureWithNativeSymbols) {
  std::string dir = testing::makeTempDir("rs") + "/t";
  // Real code addresses (a library's, this test's) and one that is in no mapping.
  uint64_t ips[3] = {reinterpret_cast<uint64_t>(&::getpid), reinterpret_cast<uint64_t>(&recordConfig), 0x10};
  recordCrashAfterOneStep(dir, segvInfo(SEGV_MAPERR), ips, 3, 1);  // the fault is in frame 1
  // "file+0xOFFSET" with the offset from the file's load base (what dladdr says).
  std::vector<std::string> want;
  for (int i = 0; i < 2; ++i) {
    Dl_info dl{};
    ASSERT_NE(::dladdr(reinterpret_cast<void*>(ips[i]), &dl), 0);
    std::string file = dl.dli_fname;
    char off[32];
    std::snprintf(off, sizeof off, "+0x%llx",
                  static_cast<unsigned long long>(ips[i] - reinterpret_cast<uint64_t>(dl.dli_fbase)));
    want.push_back(file.substr(file.rfind('/') + 1) + off);
  }
  want.push_back("0x10");
  auto t = Trace::open(dir);
  TraceSummary sum = t->summarize();
  ASSERT_TRUE(sum.failure);
  EXPECT_EQ(sum.failure->kind, "signal");
  EXPECT_EQ(sum.failure->signal, SIGSEGV);
  EXPECT_EQ(sum.failure->where, want[1]);
  std::vector<std::string> syms;
  t->mainStream()->forEachEvent([&](schema::Event::Reader e, const FrameInfo&) {
    if (!e.isFailure()) return;
    for (auto sym : e.getFailure().getNativeSymbols()) syms.emplace_back(sym.cStr());
  });
  EXPECT_EQ(syms, want);
  for (auto& st : t->streams()) EXPECT_TRUE(st->verify().empty());
  testing::removeTree(dir);
}

// si_addr is the fault address only for a fault the kernel raised; a re-raised signal (Python's
// faulthandler re-raises every fault it reports, with tgkill) holds the sender's pid there.
TEST(RecordSession, FaultAddressOnlyForAKernelRaisedFault) {
  for (int code : {static_cast<int>(SEGV_MAPERR), static_cast<int>(SI_TKILL)}) {
    std::string dir = testing::makeTempDir("rs") + "/t";
    siginfo_t info = segvInfo(code);
    if (code == SI_TKILL)
      info.si_pid = 4242;
    else
      info.si_addr = reinterpret_cast<void*>(0x1234);
    uint64_t ip = 0x10;
    recordCrashAfterOneStep(dir, info, &ip, 1, 0);
    auto t = Trace::open(dir);
    int failures = 0;
    t->mainStream()->forEachEvent([&](schema::Event::Reader e, const FrameInfo&) {
      if (!e.isFailure()) return;
      ++failures;
      EXPECT_EQ(e.getFailure().getSignalCode(), code);
      EXPECT_EQ(e.getFailure().getFaultAddress(), code == SI_TKILL ? 0u : 0x1234u);
    });
    EXPECT_EQ(failures, 1) << code;
    testing::removeTree(dir);
  }
}

// A step that ends at a batch delivery is written while the delivery goes on (stepEnd with
// durableNow false); batchEnd returns once it is durable, before the batch reaches the job.
// Checked as a kill -9 would leave the file: read while the session still runs.
TEST(RecordSession, StepEndedAtADeliveryIsDurableWhenTheBatchEnds) {
  std::string dir = testing::makeTempDir("rs") + "/t";
  RecordSession s(recordConfig(dir));
  int64_t shape[1] = {4};
  std::vector<float> batch = {1.f, 2.f, 3.f, 4.f};
  auto stepEndsInFile = [&] {
    auto t = Trace::open(dir, OpenMode::Tolerant);
    std::vector<int64_t> ends;
    t->mainStream()->forEachEvent([&](schema::Event::Reader e, const FrameInfo&) {
      if (e.isStepEnd()) ends.push_back(e.getStepEnd().getStep());
    });
    return ends;
  };
  for (int step = 0; step < 12; ++step) {
    if (step > 0) s.stepEnd(step - 1, 0.5, false);  // the delivery of step's batch ends step - 1
    s.stepBegin(step, 0, static_cast<uint64_t>(step), 0);
    uint8_t state[64] = {static_cast<uint8_t>(step)};
    s.rngState(0, -1, state, sizeof state, false, false);
    s.batchBegin(0, 0, static_cast<uint64_t>(step), true, nullptr, 0);
    batch[0] = static_cast<float>(step);
    s.batchTensor("float32", 4, 1, shape, batch.data(), batch.size() * 4, "cpu", false);
    s.batchEnd();
    std::vector<int64_t> ends = stepEndsInFile();
    ASSERT_EQ(ends.size(), static_cast<size_t>(step)) << "step " << step;
    for (int k = 0; k < step; ++k) EXPECT_EQ(ends[static_cast<size_t>(k)], k);
  }
  // A delivery that fails before its batch ends waits through waitStepDurable.
  s.stepEnd(11, 0.5, false);
  s.waitStepDurable();
  EXPECT_EQ(stepEndsInFile().size(), 12u);
  s.waitStepDurable();  // nothing pending: returns at once
  testing::removeTree(dir);
}

TEST(RecordSession, UnwritableTraceDisablesQuietly) {
  RecordSession s(recordConfig("/proc/dlrr-not-writable/t"));
  s.stepBegin(0, 0, 0, 0);  // must not throw
  s.stepEnd(0, 1.0);
  EXPECT_FALSE(s.active());
  EXPECT_NE(s.status().find("not recording"), std::string::npos);
}

}  // namespace
}  // namespace dlrr
