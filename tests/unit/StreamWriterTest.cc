// StreamWriter end to end: every event kind round-trips field for field, blobs are deduplicated
// and chunked, back-pressure loses nothing, concurrent writers interleave whole events, the
// signal path and fork leave a readable stream.
#include <capnp/any.h>
#include <capnp/dynamic.h>
#include <capnp/message.h>
#include <capnp/serialize.h>
#include <dirent.h>
#include <gtest/gtest.h>
#include <sched.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <map>
#include <random>
#include <thread>

#include "format/Hash.h"
#include "format/StreamReader.h"
#include "format/TraceDir.h"
#include "format/TraceError.h"
#include "support/SampleTrace.h"
#include "support/StreamFixture.h"

namespace dlrr {
namespace {

using testing::eventMessage;
using testing::StreamFixture;

// Sets every field of `b` (recursively) to a value derived from `seed`, so that a field the
// writer or reader dropped or mangled shows up as a difference.
void fillStruct(capnp::DynamicStruct::Builder b, int depth, uint32_t& seed);

void fillField(capnp::DynamicStruct::Builder b, capnp::StructSchema::Field f, int depth, uint32_t& seed) {
  auto t = f.getType();
  ++seed;
  switch (t.which()) {
    case capnp::schema::Type::VOID:
      b.set(f, capnp::VOID);
      break;
    case capnp::schema::Type::BOOL:
      b.set(f, true);
      break;
    case capnp::schema::Type::INT8:
    case capnp::schema::Type::INT16:
    case capnp::schema::Type::INT32:
    case capnp::schema::Type::INT64:
      b.set(f, -static_cast<int64_t>(seed % 100) - 1);
      break;
    case capnp::schema::Type::UINT8:
    case capnp::schema::Type::UINT16:
    case capnp::schema::Type::UINT32:
    case capnp::schema::Type::UINT64:
      b.set(f, static_cast<uint64_t>(seed % 200) + 1);
      break;
    case capnp::schema::Type::FLOAT32:
    case capnp::schema::Type::FLOAT64:
      b.set(f, 0.25 + seed);
      break;
    case capnp::schema::Type::TEXT:
      b.set(f, capnp::Text::Reader(("text-" + std::to_string(seed)).c_str()));
      break;
    case capnp::schema::Type::DATA: {
      uint8_t bytes[5] = {1, 2, 3, static_cast<uint8_t>(seed), 0xff};
      b.set(f, capnp::Data::Reader(bytes, sizeof bytes));
      break;
    }
    case capnp::schema::Type::ENUM: {
      auto e = t.asEnum();
      b.set(f, capnp::DynamicEnum(e, static_cast<uint16_t>(seed % e.getEnumerants().size())));
      break;
    }
    case capnp::schema::Type::STRUCT:
      fillStruct(b.init(f).as<capnp::DynamicStruct>(), depth + 1, seed);
      break;
    case capnp::schema::Type::LIST: {
      auto elem = t.asList().getElementType();
      auto list = b.init(f, 2).as<capnp::DynamicList>();
      for (unsigned i = 0; i < 2; ++i) {
        ++seed;
        switch (elem.which()) {
          case capnp::schema::Type::TEXT:
            list.set(i, capnp::Text::Reader(("item-" + std::to_string(seed)).c_str()));
            break;
          case capnp::schema::Type::INT64:
            list.set(i, -static_cast<int64_t>(seed));
            break;
          case capnp::schema::Type::UINT64:
            list.set(i, static_cast<uint64_t>(seed) << 33);
            break;
          case capnp::schema::Type::STRUCT:
            fillStruct(list[i].as<capnp::DynamicStruct>(), depth + 1, seed);
            break;
          default:
            FAIL() << "list element type the test does not fill: " << f.getProto().getName().cStr();
        }
      }
      break;
    }
    default:
      FAIL() << "field type the test does not fill: " << f.getProto().getName().cStr();
  }
}

void fillStruct(capnp::DynamicStruct::Builder b, int depth, uint32_t& seed) {
  auto s = b.getSchema();
  for (auto f : s.getNonUnionFields()) fillField(b, f, depth, seed);
  auto u = s.getUnionFields();
  if (u.size() == 0) return;
  // Deep inside recursive structures (Value) pick the first member (a leaf) to stop.
  fillField(b, u[depth >= 3 ? 0 : seed % u.size()], depth, seed);
}

TEST(StreamWriter, EveryEventKindRoundTripsFieldForField) {
  StreamFixture fx("rt-kinds");
  auto eventSchema = capnp::Schema::from<schema::Event>();
  std::vector<std::unique_ptr<capnp::MallocMessageBuilder>> sent;
  uint32_t seed = 0;
  for (auto member : eventSchema.getUnionFields()) {
    for (int variant = 0; variant < 3; ++variant) {  // different union choices inside (Value)
      auto msg = std::make_unique<capnp::MallocMessageBuilder>();
      auto root = capnp::toDynamic(msg->initRoot<schema::Event>());
      for (auto f : eventSchema.getNonUnionFields()) fillField(root, f, 0, seed);
      fillField(root, member, 0, seed);
      fx.writer->append(*msg);
      sent.push_back(std::move(msg));
    }
  }
  fx.writer->close();
  ASSERT_FALSE(fx.writer->failed()) << fx.writer->error();

  auto r = fx.reopen();
  EXPECT_TRUE(r->status().cleanClose);
  size_t i = 0;
  std::map<std::string, int> kinds;
  r->forEachEvent([&](schema::Event::Reader e, const FrameInfo&) {
    ASSERT_LT(i, sent.size());
    auto want = sent[i]->getRoot<schema::Event>().asReader();
    EXPECT_EQ(e.which(), want.which()) << "event " << i;
    EXPECT_TRUE(capnp::AnyStruct::Reader(e) == capnp::AnyStruct::Reader(want)) << "event " << i << " differs";
    KJ_IF_MAYBE (f, capnp::toDynamic(e).which()) {
      kinds[f->getProto().getName().cStr()]++;
    }
    ++i;
  });
  EXPECT_EQ(i, sent.size());
  EXPECT_EQ(kinds.size(), eventSchema.getUnionFields().size());
  // A few fields by name, in case the structural comparison were ever loosened.
  std::vector<int64_t> steps;
  r->forEachEvent([&](schema::Event::Reader e, const FrameInfo&) {
    if (e.isEntropy()) {
      EXPECT_EQ(e.getEntropy().getData().size(), 5u);
    }
    if (e.isFailure()) {
      EXPECT_EQ(e.getFailure().getTraceback().size(), 2u);
    }
    steps.push_back(e.getStep());
  });
  EXPECT_EQ(steps.front(), sent.front()->getRoot<schema::Event>().getStep());
  EXPECT_TRUE(r->verify().empty());
}

TEST(StreamWriter, IdenticalBlobsAreStoredOnce) {
  StreamFixture fx("dedup");
  std::vector<float> a(4096, 1.25f), b(4096, 2.5f);
  BlobId ia = fx.writer->putBlob(a.data(), a.size() * 4, 4);
  BlobId ia2 = fx.writer->putBlob(a.data(), a.size() * 4, 4);
  BlobId ib = fx.writer->putBlob(b.data(), b.size() * 4, 4);
  EXPECT_EQ(ia.hash, ia2.hash);
  EXPECT_FALSE(ia.hash == ib.hash);
  EXPECT_EQ(ia.hash, hash128(a.data(), a.size() * 4));
  fx.writer->commit();
  WriterStats st = fx.writer->stats();
  EXPECT_EQ(st.blobs, 2u);
  EXPECT_EQ(st.blobsDeduplicated, 1u);
  fx.writer->close();
  auto r = fx.reopen();
  int blobFrames = 0;
  for (const auto& f : r->frames()) blobFrames += f.header.kind == FrameKind::Blob;
  EXPECT_EQ(blobFrames, 2);
  auto back = r->readBlob(ia.hash, ia.size);
  ASSERT_EQ(back.size(), a.size() * 4);
  EXPECT_EQ(std::memcmp(back.data(), a.data(), back.size()), 0);
}

TEST(StreamWriter, BlobsQueuedWithoutWakingAreDurableAtTheCommit) {
  // putBlob(wake = false) leaves the writer thread asleep (the recorder wakes it once per batch
  // or per set of RNG states): the commit must still return with every blob in the file.
  StreamFixture fx("nowake");
  std::vector<float> a(8192, 0.5f), b(100, 3.0f);
  BlobId ia = fx.writer->putBlob(a.data(), a.size() * 4, 4, false);
  BlobId ib = fx.writer->putBlob(b.data(), b.size() * 4, 4, false);
  EXPECT_TRUE(ia.fresh && ib.fresh);
  fx.writer->commit();
  auto r = fx.reopen();  // the file as a kill -9 right after the commit leaves it
  for (auto [id, src] : {std::pair{ia, &a}, std::pair{ib, &b}}) {
    auto back = r->readBlob(id.hash, id.size);
    ASSERT_EQ(back.size(), src->size() * 4);
    EXPECT_EQ(std::memcmp(back.data(), src->data(), back.size()), 0);
  }
  fx.writer->wake();  // nothing queued: no effect
  std::vector<float> c(4096, 7.0f);
  uint64_t before = fx.writer->stats().storedBytes;
  fx.writer->putBlob(c.data(), c.size() * 4, 4, false);
  fx.writer->wake();  // the writer thread writes it without a commit
  for (int i = 0; i < 200 && fx.writer->stats().storedBytes == before; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_GT(fx.writer->stats().storedBytes, before);
  fx.writer->close();
  EXPECT_EQ(fx.reopen()->readBlob(hash128(c.data(), c.size() * 4), c.size() * 4).size(), c.size() * 4);
}

TEST(StreamWriter, AsyncCommitIsDurableOnceWaitedFor) {
  // commitAsync + waitCommitted (a step end at a batch delivery): once the wait returns, every
  // event queued before the commit is in the file, whichever thread wrote it (the woken writer
  // thread, or the waiting caller when the writer had not started); events and blobs queued
  // after the commit (the next step's) may follow later. Many rounds: the two threads race.
  StreamFixture fx("async");
  std::vector<float> blob(2048);
  int next = 0;
  auto note = [&] {
    auto m = eventMessage(0);
    m->getRoot<schema::Event>().setNote("event " + std::to_string(next++));
    fx.writer->append(*m);
  };
  EXPECT_EQ(fx.writer->stats().commits, 0u);
  fx.writer->waitCommitted(0);  // no ticket: returns at once
  for (int round = 0; round < 60; ++round) {
    for (int k = 0; k < 5; ++k) note();
    const int committed = next;
    uint64_t ticket = fx.writer->commitAsync();
    ASSERT_GT(ticket, 0u);
    note();  // the next step's event and blob, queued while the commit is in flight
    blob[0] = static_cast<float>(round);
    fx.writer->putBlob(blob.data(), blob.size() * 4, 4, false);
    if (round % 3 == 0) std::this_thread::sleep_for(std::chrono::microseconds(200));  // writer first
    fx.writer->waitCommitted(ticket);
    fx.writer->waitCommitted(ticket);  // already durable: returns at once
    auto r = fx.reopen();              // the file as a kill -9 right after the wait leaves it
    int seen = 0;
    r->forEachEventUntil(
        [&](schema::Event::Reader e, const FrameInfo&) {
          EXPECT_EQ(std::string(e.getNote().cStr()), "event " + std::to_string(seen));
          ++seen;
          return true;
        },
        0);
    ASSERT_GE(seen, committed) << "round " << round;
  }
  fx.writer->close();
  int seen = 0;
  fx.reopen()->forEachEventUntil(
      [&](schema::Event::Reader, const FrameInfo&) {
        ++seen;
        return true;
      },
      0);
  EXPECT_EQ(seen, next);
  EXPECT_EQ(fx.writer->stats().commits, 60u);
}

// Threads of this process whose scheduling policy is SCHED_BATCH.
int batchThreads() {
  int n = 0;
  if (DIR* d = opendir("/proc/self/task")) {
    while (dirent* e = readdir(d)) {
      pid_t tid = 0;
      if (std::from_chars(e->d_name, e->d_name + std::strlen(e->d_name), tid).ec == std::errc{} &&
          sched_getscheduler(tid) == SCHED_BATCH)
        ++n;
    }
    closedir(d);
  }
  return n;
}

TEST(StreamWriter, WriterThreadRunsAsABatchThread) {
  // Woken at every batch, it must not preempt the job's thread that woke it (SCHED_BATCH).
  int before = batchThreads();
  const int callerPolicy = sched_getscheduler(0);
  StreamFixture fx("batch");
  int now = before;
  for (int i = 0; i < 200 && now == before; ++i) {  // the thread sets its policy as it starts
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    now = batchThreads();
  }
  EXPECT_EQ(now, before + 1);
  EXPECT_EQ(sched_getscheduler(0), callerPolicy);  // the caller's own policy is untouched
  fx.writer->close();
}

TEST(StreamWriter, BlobsLargerThanAChunkAreSplitAndReassembled) {
  StreamFixture fx("chunks");
  // 2 full chunks and a ragged tail; partly compressible, partly noise.
  const size_t n = 2 * size_t{kBlobChunkSize} + 12345;
  std::vector<uint8_t> big(n);
  std::mt19937 rng(7);
  for (size_t i = 0; i < n; ++i) big[i] = (i / 4096) % 2 ? static_cast<uint8_t>(rng()) : static_cast<uint8_t>(i / 4096);
  BlobId id = fx.writer->putBlob(big.data(), big.size(), 1);
  fx.writer->close();
  ASSERT_FALSE(fx.writer->failed()) << fx.writer->error();

  for (bool viaFooter : {true, false}) {
    std::unique_ptr<StreamReader> r;
    if (viaFooter) {
      r = fx.reopen();
      EXPECT_TRUE(r->status().cleanClose);
    } else {  // without the footer's blob index: found by scanning
      auto bytes = testing::readFile(fx.path());
      bytes.resize(bytes.size() - kTrailerSize);
      r = StreamReader::openBytes(std::move(bytes), "p1");
      EXPECT_FALSE(r->status().cleanClose);
    }
    std::vector<uint64_t> chunkOffsets;
    for (const auto& f : r->frames()) {
      if (f.header.kind != FrameKind::Blob) continue;
      EXPECT_LE(f.header.rawLen, kBlobChunkSize);
      chunkOffsets.push_back(f.offset);
    }
    EXPECT_EQ(chunkOffsets.size(), 3u);
    ASSERT_TRUE(r->hasBlob(id.hash));
    EXPECT_TRUE(r->readBlob(id.hash, id.size) == big);
  }
}

TEST(StreamWriter, BackPressureBlocksCallersAndLosesNothing) {
  // Blobs of 256 KiB of noise against a 512 KiB queue: the writer compresses and writes each
  // (zstd on incompressible bytes, a byte shuffle) far slower than the caller hashes the next,
  // so the caller must wait for queue space, however the two threads are scheduled (4 KiB
  // blobs let a descheduled caller find the queue drained every time: a flaky test).
  constexpr int kBlobs = 48;
  constexpr size_t kWords = 64 * 1024;
  WriterOptions o;
  o.maxQueuedBytes = 512 * 1024;
  StreamFixture fx("backpressure", o);
  std::vector<std::vector<uint32_t>> payloads(kBlobs);
  uint64_t x = 0x9E3779B97F4A7C15ull;
  for (int i = 0; i < kBlobs; ++i) {
    auto& data = payloads[static_cast<size_t>(i)];
    data.resize(kWords);
    for (auto& w : data) {  // xorshift: incompressible, distinct per blob
      x ^= x << 13;
      x ^= x >> 7;
      x ^= x << 17;
      w = static_cast<uint32_t>(x);
    }
    data[0] = static_cast<uint32_t>(i);
  }
  std::vector<BlobId> ids;
  for (int i = 0; i < kBlobs; ++i) {
    const auto& data = payloads[static_cast<size_t>(i)];
    ids.push_back(fx.writer->putBlob(data.data(), data.size() * 4, 4));
    auto m = eventMessage(i);
    m->getRoot<schema::Event>().setNote("event " + std::to_string(i));
    fx.writer->append(*m);
  }
  fx.writer->close();
  WriterStats st = fx.writer->stats();
  EXPECT_GT(st.blockedCount, 0u);
  EXPECT_LE(st.queueHighWater, o.maxQueuedBytes);
  EXPECT_EQ(st.blobs, static_cast<uint64_t>(kBlobs));
  EXPECT_EQ(st.events, static_cast<uint64_t>(kBlobs));
  auto r = fx.reopen();
  int n = 0;
  r->forEachEvent([&](schema::Event::Reader e, const FrameInfo&) {
    EXPECT_EQ(std::string(e.getNote().cStr()), "event " + std::to_string(n));
    ++n;
  });
  EXPECT_EQ(n, kBlobs);
  for (int i = 0; i < kBlobs; ++i) {
    auto b = r->readBlob(ids[static_cast<size_t>(i)].hash, kWords * 4);
    ASSERT_EQ(b.size(), kWords * 4);
    EXPECT_EQ(std::memcmp(b.data(), payloads[static_cast<size_t>(i)].data(), b.size()), 0) << "blob " << i;
  }
}

TEST(StreamWriter, ConcurrentAppendsFromEightThreadsKeepEveryEventWhole) {
  WriterOptions o;
  o.eventsFrameBytes = 4096;  // many frames, cut mid-stream
  StreamFixture fx("threads", o);
  constexpr int kThreads = 8, kPerThread = 500;
  std::vector<std::thread> threads;
  threads.reserve(kThreads);
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kPerThread; ++i) {
        auto m = eventMessage(i);
        auto e = m->getRoot<schema::Event>();
        e.setThread(static_cast<uint32_t>(t));
        e.setNote("t" + std::to_string(t) + "-" + std::to_string(i));
        fx.writer->append(*m);
        if (i % 50 == 0) {
          uint32_t v[16] = {static_cast<uint32_t>(t), static_cast<uint32_t>(i)};
          fx.writer->putBlob(v, sizeof v, 4);
          fx.writer->commit(i % 100 == 0);
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  fx.writer->close();
  ASSERT_FALSE(fx.writer->failed());
  auto r = fx.reopen();
  std::vector<int> next(kThreads, 0);
  int total = 0;
  r->forEachEvent([&](schema::Event::Reader e, const FrameInfo&) {
    uint32_t t = e.getThread();
    ASSERT_LT(t, static_cast<uint32_t>(kThreads));
    // Each thread's events arrive complete and in that thread's order.
    EXPECT_EQ(std::string(e.getNote().cStr()), "t" + std::to_string(t) + "-" + std::to_string(next[t]));
    EXPECT_EQ(e.getStep(), next[t]);
    ++next[t];
    ++total;
  });
  EXPECT_EQ(total, kThreads * kPerThread);
  EXPECT_TRUE(r->verify().empty());
}

// The signal path needs somewhere to find its writer; tests only.
std::atomic<StreamWriter*> gSignalWriter{nullptr};
std::atomic<bool> gSignalWrote{false};
const std::vector<uint8_t>* gSignalMsg = nullptr;

void onSignal(int) { gSignalWrote = gSignalWriter.load()->writeFromSignal(gSignalMsg->data(), gSignalMsg->size()); }

TEST(StreamWriter, WriteFromSignalLeavesAReadableAsyncFrame) {
  StreamFixture fx("signal");
  for (int i = 0; i < 5; ++i) {
    auto m = eventMessage(i);
    m->getRoot<schema::Event>().setNote("before " + std::to_string(i));
    fx.writer->append(*m);  // queued, not committed: the signal path must flush them first
  }
  auto fm = eventMessage(4);
  auto f = fm->getRoot<schema::Event>().initFailure();
  f.setKind(schema::Failure::Kind::SIGNAL);
  f.setSignal(SIGUSR1);
  f.setMessage("SIGUSR1 raised by the test");
  std::vector<uint8_t> flat = testing::flatBytes(*fm);

  gSignalWriter = fx.writer.get();
  gSignalMsg = &flat;
  struct sigaction sa {
  }, old{};
  sa.sa_handler = onSignal;
  sigemptyset(&sa.sa_mask);
  ASSERT_EQ(sigaction(SIGUSR1, &sa, &old), 0);
  raise(SIGUSR1);
  sigaction(SIGUSR1, &old, nullptr);
  EXPECT_TRUE(gSignalWrote.load());

  fx.writer->close();
  auto r = fx.reopen();
  EXPECT_FALSE(r->status().cleanClose);  // no footer after an async frame: offsets moved
  EXPECT_EQ(r->status().damage, "");
  std::vector<std::string> notes;
  int async = 0;
  r->forEachEvent([&](schema::Event::Reader e, const FrameInfo& fr) {
    bool isAsync = (fr.header.flags & kFrameFlagAsync) != 0;
    if (e.isNote()) {
      EXPECT_FALSE(isAsync);
      notes.push_back(e.getNote().cStr());
    } else {
      ASSERT_TRUE(e.isFailure());
      EXPECT_TRUE(isAsync);
      EXPECT_EQ(e.getFailure().getSignal(), SIGUSR1);
      EXPECT_EQ(std::string(e.getFailure().getMessage().cStr()), "SIGUSR1 raised by the test");
      EXPECT_EQ(notes.size(), 5u) << "queued events must precede the signal frame";
      ++async;
    }
  });
  EXPECT_EQ(async, 1);
  EXPECT_EQ(notes.size(), 5u);
  EXPECT_TRUE(r->verify().empty());
}

TEST(StreamWriter, ForkedChildNeverTouchesTheParentsStream) {
  StreamFixture fx("fork");
  auto note = [&](const std::string& s) {
    auto m = eventMessage(0);
    m->getRoot<schema::Event>().setNote(s);
    fx.writer->append(*m);
  };
  note("parent before fork");
  fx.writer->commit();
  fx.writer->beforeFork();
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    fx.writer->afterForkChild();
    // Everything is a no-op in the child; destroying the writer must not write a footer.
    auto m = eventMessage(0);
    m->getRoot<schema::Event>().setNote("child");
    fx.writer->append(*m);
    uint8_t blob[64] = {42};
    fx.writer->putBlob(blob, sizeof blob);
    fx.writer->commit();
    bool inert = fx.writer->inert();
    fx.writer.reset();
    _exit(inert ? 0 : 3);
  }
  fx.writer->afterForkParent();
  note("parent after fork");
  fx.writer->commit();
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
  note("parent after child exit");
  fx.writer->close();
  ASSERT_FALSE(fx.writer->failed()) << fx.writer->error();

  auto r = fx.reopen();
  EXPECT_TRUE(r->status().cleanClose);
  EXPECT_EQ(r->status().damage, "");
  std::vector<std::string> notes;
  r->forEachEvent([&](schema::Event::Reader e, const FrameInfo&) { notes.push_back(e.getNote().cStr()); });
  EXPECT_EQ(notes, (std::vector<std::string>{"parent before fork", "parent after fork", "parent after child exit"}));
  EXPECT_TRUE(r->verify().empty());
}

// A write past RLIMIT_FSIZE sends SIGXFSZ to the writing thread, and the job's threads write
// (the stream's header here, the queue at a commit, the signal path). With SIGXFSZ at its
// default, as in any non-Python job, it killed the job; it must be an error instead.
TEST(StreamWriter, FileSizeLimitIsAnErrorNotSigxfsz) {
  std::string root = testing::makeTempDir("fsize");
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    UniqueFd dirFd = createTraceDir(root + "/trace");
    std::string name;
    UniqueFd fd = createStreamFile(dirFd.get(), "p1", name);
    capnp::MallocMessageBuilder hm;
    hm.initRoot<schema::StreamHeader>().setStreamName("p1");
    signal(SIGXFSZ, SIG_DFL);
    rlimit lim{20, 20};  // the file header (16 bytes) fits, the header frame does not
    if (setrlimit(RLIMIT_FSIZE, &lim) != 0) _exit(4);
    try {
      StreamWriter w(std::move(fd), hm, {});
    } catch (const TraceError& e) {
      _exit(std::string(e.what()).find("File too large") != std::string::npos ? 0 : 3);
    }
    _exit(2);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  testing::removeTree(root);
  ASSERT_TRUE(WIFEXITED(status)) << "killed by signal " << (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

TEST(StreamWriter, EventsQueuedTogetherKeepTheirOrderAroundBlobsAndFrameSize) {
  // Events queued back to back share one queue item (serialised into it): the order of events
  // and blobs, and the events frame size, are what they were with one item per event.
  WriterOptions o;
  o.eventsFrameBytes = 512;
  StreamFixture fx("coalesce", o);
  std::vector<float> blob(1000, 1.5f);
  int next = 0;
  auto note = [&] {
    auto m = eventMessage(0);
    m->getRoot<schema::Event>().setNote("event " + std::to_string(next++));
    fx.writer->append(*m);
  };
  for (int k = 0; k < 30; ++k) note();
  BlobId id = fx.writer->putBlob(blob.data(), blob.size() * 4, 4, false);
  for (int k = 0; k < 30; ++k) note();
  fx.writer->commit();
  for (int k = 0; k < 5; ++k) note();
  fx.writer->close();
  auto r = fx.reopen();
  std::vector<std::string> seen;
  r->forEachEventUntil(
      [&](schema::Event::Reader e, const FrameInfo&) {
        seen.emplace_back(e.getNote().cStr());
        return true;
      },
      0);
  ASSERT_EQ(seen.size(), 65u);
  for (int k = 0; k < 65; ++k) EXPECT_EQ(seen[static_cast<size_t>(k)], "event " + std::to_string(k));
  EXPECT_EQ(r->readBlob(id.hash, id.size).size(), blob.size() * 4);
  // The blob's frame lies between the frames of the events queued before and after it.
  std::vector<FrameKind> kinds;
  size_t eventFrames = 0;
  for (const auto& f : r->frames()) {
    kinds.push_back(f.header.kind);
    if (f.header.kind == FrameKind::Events) {
      ++eventFrames;
      EXPECT_LE(f.header.rawLen, o.eventsFrameBytes + 512u);  // cut near the frame size, as before
    }
  }
  EXPECT_GE(eventFrames, 4u);
  auto blobAt = std::find(kinds.begin(), kinds.end(), FrameKind::Blob);
  ASSERT_NE(blobAt, kinds.end());
  EXPECT_NE(std::find(kinds.begin(), blobAt, FrameKind::Events), blobAt);
  EXPECT_NE(std::find(blobAt, kinds.end(), FrameKind::Events), kinds.end());
}

TEST(StreamWriter, StepIndexPointsAtTheStepBeginFrame) {
  WriterOptions o;
  o.eventsFrameBytes = 256;  // several frames per step
  StreamFixture fx("stepindex", o);
  for (int s = 0; s < 20; ++s) {
    auto b = eventMessage(s);
    b->getRoot<schema::Event>().initStepBegin().setStep(s);
    fx.writer->append(*b, s);
    for (int k = 0; k < 10; ++k) {
      auto m = eventMessage(s);
      m->getRoot<schema::Event>().setNote(std::string(40, 'a' + static_cast<char>(k)));
      fx.writer->append(*m);
    }
    auto e = eventMessage(s);
    e->getRoot<schema::Event>().initStepEnd().setStep(s);
    fx.writer->append(*e);
    fx.writer->commit();
  }
  fx.writer->close();
  auto r = fx.reopen();
  EXPECT_EQ(r->status().footerSteps, 20u);
  for (int s = 0; s < 20; s += 3) {
    auto off = r->stepFrameOffset(s);
    ASSERT_TRUE(off) << s;
    bool found = false;
    r->forEachEventUntil(
        [&](schema::Event::Reader e, const FrameInfo& f) {
          EXPECT_EQ(f.offset, *off);
          if (e.isStepBegin() && e.getStepBegin().getStep() == s) found = true;
          return !found && f.offset == *off;
        },
        *off);
    EXPECT_TRUE(found) << "step " << s;
  }
  EXPECT_FALSE(r->stepFrameOffset(20));
}

TEST(StreamWriter, ReusedItemsAndMultiSegmentEventsRoundTrip) {
  // Written events items are reused for later events (their buffers kept), and a one-segment
  // event is framed by hand: events of one segment and of several (a builder whose first
  // segment is too small for its note), over many committed steps, read back whole and in order.
  StreamFixture fx("reuse");
  std::vector<std::string> written;
  for (int step = 0; step < 40; ++step) {
    for (int k = 0; k < 12; ++k) {
      std::string note = "step " + std::to_string(step) + " event " + std::to_string(k);
      if (k % 5 == 4) note += std::string(static_cast<size_t>(300 + 97 * k), static_cast<char>('a' + step % 26));
      capnp::MallocMessageBuilder m(k % 5 == 4 ? 8u : 1024u, capnp::AllocationStrategy::FIXED_SIZE);
      m.initRoot<schema::Event>().setNote(note);
      if (k % 5 == 4) {
        ASSERT_GT(m.getSegmentsForOutput().size(), 1u);
      }
      fx.writer->append(m, k == 0 ? step : -1);
      written.push_back(note);
    }
    fx.writer->commit();
  }
  fx.writer->close();
  std::vector<std::string> seen;
  fx.reopen()->forEachEventUntil(
      [&](schema::Event::Reader e, const FrameInfo&) {
        seen.emplace_back(e.getNote().cStr());
        return true;
      },
      0);
  EXPECT_EQ(seen, written);
}

}  // namespace
}  // namespace dlrr
