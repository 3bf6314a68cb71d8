// The failure ring (recorder/FailureRing): which steps it keeps, its byte cap, the order in
// which a failure hands its tensors over (failing step first), and what happens after.
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <vector>

#include "recorder/FailureRing.h"
#include "session/TensorDigest.h"

namespace dlrr {
namespace {

FailureRing::Keep keepOne(FailureRing& r, int64_t step, const char* path, size_t n = 16) {
  std::vector<float> data(n / sizeof(float), static_cast<float>(step));
  int64_t shape[1] = {static_cast<int64_t>(data.size())};
  return r.keep(step, 0, path, 0, 0, "float32", shape, 1, data.data(), n);
}

std::vector<std::pair<int64_t, std::string>> order(const std::vector<KeptTensor>& v) {
  std::vector<std::pair<int64_t, std::string>> out;
  out.reserve(v.size());
  for (const auto& k : v) out.emplace_back(k.step, k.path);
  return out;
}

TEST(FailureRing, KeepsTheLastKStepsOnly) {
  FailureRing r(2);
  for (int64_t s = 0; s < 5; ++s) {
    r.stepBegan();
    EXPECT_EQ(keepOne(r, s, "a"), FailureRing::Keep::Kept);
  }
  EXPECT_EQ(r.countForStep(2), 0u);
  EXPECT_EQ(r.countForStep(3), 1u);
  EXPECT_EQ(r.countForStep(4), 1u);
  EXPECT_EQ(r.bytes(), 32u);
}

TEST(FailureRing, FailingStepFirstThenOlderStepsNewestFirst) {
  FailureRing r(3);
  for (int64_t s = 0; s < 3; ++s) {
    r.stepBegan();
    keepOne(r, s, "a");
    keepOne(r, s, "b");
  }
  auto kept = r.takeForFailure(2).tensors;
  std::vector<std::pair<int64_t, std::string>> want = {{2, "a"}, {2, "b"}, {1, "a"}, {1, "b"}, {0, "a"}, {0, "b"}};
  EXPECT_EQ(order(kept), want);
  EXPECT_EQ(kept[0].shape, std::vector<int64_t>{4});
  EXPECT_EQ(kept[0].bytes.size(), 16u);
  EXPECT_TRUE(r.takeForFailure(2).tensors.empty()) << "the ring is handed over once";
  EXPECT_EQ(r.bytes(), 0u);
}

TEST(FailureRing, AfterTheFailureTheFailingStepIsWrittenAtOnceAndOthersDropped) {
  FailureRing r(2);
  r.stepBegan();
  keepOne(r, 7, "layer3.0.conv1");
  r.takeForFailure(7);
  EXPECT_TRUE(r.failed());
  EXPECT_EQ(keepOne(r, 7, "layer3.1.conv1"), FailureRing::Keep::WriteNow);
  EXPECT_EQ(keepOne(r, 8, "layer3.1.conv1"), FailureRing::Keep::Dropped);
}

TEST(FailureRing, ByteCapDropsWhatDoesNotFit) {
  FailureRing r(2, 40);
  r.stepBegan();
  EXPECT_EQ(keepOne(r, 0, "a", 32), FailureRing::Keep::Kept);
  EXPECT_EQ(keepOne(r, 0, "b", 16), FailureRing::Keep::Dropped);
  EXPECT_EQ(keepOne(r, 0, "c", 8), FailureRing::Keep::Kept);
  r.takeForFailure(0);
  EXPECT_EQ(keepOne(r, 0, "d", 32), FailureRing::Keep::WriteNow);
  EXPECT_EQ(keepOne(r, 0, "e", 16), FailureRing::Keep::Dropped) << "the cap bounds what the failing step writes too";
}

TEST(FailureRing, OffKeepsNothing) {
  FailureRing r(0);
  r.stepBegan();
  EXPECT_EQ(keepOne(r, 0, "a"), FailureRing::Keep::Dropped);
  EXPECT_EQ(keepOne(r, 0, "a"), FailureRing::Keep::Dropped);
  EXPECT_TRUE(r.takeForFailure(0).tensors.empty());
}

TEST(FailureRing, EvictedBuffersAreReusedWithTheirContentReplaced) {
  FailureRing r(1);
  r.stepBegan();
  keepOne(r, 0, "a", 64);
  r.stepBegan();  // step 0 evicted: its buffer becomes a spare
  keepOne(r, 1, "a", 32);
  auto kept = r.takeForFailure(1).tensors;
  ASSERT_EQ(kept.size(), 1u);
  ASSERT_EQ(kept[0].bytes.size(), 32u);
  float v;
  std::memcpy(&v, kept[0].bytes.data(), sizeof v);
  EXPECT_EQ(v, 1.0f);
}

TEST(FailureRing, RecycledTensorsTakeEveryFieldOfTheNewOne) {
  // Evicted tensors are reused whole (path, dtype, shape, bytes keep their memory): nothing of
  // the old one may show through, whether the new one is smaller or larger in any field.
  FailureRing r(1);
  const std::vector<std::string> longPaths = {"encoder.layers.11.self_attn.out_proj", "b", "head.classifier.1"};
  for (int64_t step = 0; step < 6; ++step) {
    r.stepBegan();
    for (size_t i = 0; i < longPaths.size(); ++i) {
      const bool odd = step % 2 != 0;
      std::string path = odd ? "p" + std::to_string(i) : longPaths[i];
      std::vector<int64_t> shape = odd ? std::vector<int64_t>{2} : std::vector<int64_t>{1, 2, 2};
      std::vector<double> data(odd ? 2 : 4, static_cast<double>(step * 10 + static_cast<int64_t>(i)));
      ASSERT_EQ(r.keep(step, static_cast<int>(i), path, static_cast<uint32_t>(step), static_cast<uint32_t>(i),
                       odd ? "float64" : "complex64", shape.data(), static_cast<int>(shape.size()), data.data(),
                       data.size() * sizeof(double)),
                FailureRing::Keep::Kept);
    }
  }
  auto kept = r.takeForFailure(5).tensors;
  ASSERT_EQ(kept.size(), 3u);
  for (size_t i = 0; i < kept.size(); ++i) {
    const KeptTensor& k = kept[i];
    EXPECT_EQ(k.step, 5);
    EXPECT_EQ(k.kind, static_cast<int>(i));
    EXPECT_EQ(k.path, "p" + std::to_string(i));
    EXPECT_EQ(k.callIndex, 5u);
    EXPECT_EQ(k.output, i);
    EXPECT_EQ(k.dtype, "float64");
    EXPECT_EQ(k.shape, std::vector<int64_t>{2});
    ASSERT_EQ(k.bytes.size(), 2 * sizeof(double));
    double v[2];
    std::memcpy(v, k.bytes.data(), sizeof v);
    EXPECT_EQ(v[0], 50.0 + static_cast<double>(i));
    EXPECT_EQ(v[1], 50.0 + static_cast<double>(i));
  }
}

TEST(FailureRing, KeepFilledAsksForTheBytesOnlyWhenItKeepsThem) {
  // keepFilled (the digest writes the ring's copy) gives the verdicts keep() gives, and calls
  // the fill exactly when the answer is Kept, with room for exactly nbytes.
  FailureRing r(2, 100);
  int64_t shape[1] = {4};
  int fills = 0;
  auto fillStep = [&](int64_t step, size_t n) {
    return r.keepFilled(step, 0, "a", 0, 0, "float32", shape, 1, n, [&](uint8_t* dst) {
      ++fills;
      std::vector<uint8_t> v(n, static_cast<uint8_t>(step));
      if (n) std::memcpy(dst, v.data(), n);
    });
  };
  const size_t sizes[] = {24, 40, 22, 38};  // steps 2 and 3 reuse the buffers of 0 and 1, a little smaller
  for (int64_t s = 0; s < 4; ++s) {
    r.stepBegan();
    EXPECT_EQ(fillStep(s, sizes[s]), FailureRing::Keep::Kept);
  }
  EXPECT_EQ(fills, 4);
  EXPECT_EQ(fillStep(3, 80), FailureRing::Keep::Dropped);  // over the cap: no fill
  EXPECT_EQ(fills, 4);
  auto kept = r.takeForFailure(3).tensors;
  ASSERT_EQ(kept.size(), 2u);
  EXPECT_EQ(std::vector<uint8_t>(kept[0].bytes.begin(), kept[0].bytes.end()), std::vector<uint8_t>(38, 3));
  EXPECT_EQ(std::vector<uint8_t>(kept[1].bytes.begin(), kept[1].bytes.end()), std::vector<uint8_t>(22, 2));
  EXPECT_EQ(fillStep(3, 8), FailureRing::Keep::WriteNow);  // the failing step after the failure
  EXPECT_EQ(fillStep(2, 8), FailureRing::Keep::Dropped);
  EXPECT_EQ(fills, 4);
  FailureRing off(0);
  EXPECT_EQ(off.keepFilled(0, 0, "a", 0, 0, "float32", shape, 1, 16, [&](uint8_t*) { ++fills; }),
            FailureRing::Keep::Dropped);
  EXPECT_EQ(fills, 4);
}

// A borrowed entry holds the caller's bytes and their hook-time hash: at the failure they are
// read and digested again; bytes that changed since are never written, only counted.
TEST(FailureRing, BorrowedEntriesAreWrittenOnlyWhenTheyStillHashAsAtTheirHook) {
  FailureRing r(2);
  const int64_t shape[1] = {4};
  std::vector<float> a{1, 2, 3, 4}, b{5, 6, 7, 8}, c{9, 10, 11, 12};
  auto borrow = [&](int64_t step, const char* path, const std::vector<float>& v) {
    const uint64_t hash = computeDigest("float32", v.data(), 16).hash;
    return r.keepBorrowed(step, 0, path, 0, 0, "float32", shape, 1, v.data(), 16, hash);
  };
  r.stepBegan();
  EXPECT_EQ(borrow(0, "bn", a), FailureRing::Keep::Kept);
  EXPECT_EQ(borrow(0, "relu", b), FailureRing::Keep::Kept);
  r.stepBegan();
  EXPECT_EQ(borrow(1, "bn", c), FailureRing::Keep::Kept);
  EXPECT_EQ(r.bytes(), 48u) << "the byte cap counts what the ring would write";
  a[0] = 0;  // an in-place change after the hook (ReLU(inplace=True) on BatchNorm's output)
  RingForFailure taken = r.takeForFailure(1);
  EXPECT_EQ(taken.changedAfterHook, 1u);
  ASSERT_EQ(order(taken.tensors), (std::vector<std::pair<int64_t, std::string>>{{1, "bn"}, {0, "relu"}}));
  for (const auto& k : taken.tensors) EXPECT_EQ(k.borrowed, nullptr);
  auto floats = [](const KeptBytes& bytes) {
    std::vector<float> out(bytes.size() / sizeof(float));
    std::memcpy(out.data(), bytes.data(), bytes.size());
    return out;
  };
  EXPECT_EQ(floats(taken.tensors[0].bytes), c) << "its own copy, read at the failure";
  EXPECT_EQ(floats(taken.tensors[1].bytes), b);
  c[0] = -1;
  EXPECT_EQ(floats(taken.tensors[0].bytes)[0], 9.0f) << "the copy does not follow the caller's memory";
  EXPECT_EQ(r.borrowFloor(), INT64_MAX) << "nothing is borrowed after the failure";
  EXPECT_EQ(borrow(1, "late", b), FailureRing::Keep::WriteNow);
  EXPECT_EQ(borrow(0, "late", b), FailureRing::Keep::Dropped);
}

// A borrowed storage the job freed and unmapped since its hook (a module output `resize_`d
// larger) is left out and counted at the failure: reading it must not fault the job.
TEST(FailureRing, BorrowedMemoryUnmappedSinceItsHookIsLeftOutWithoutAFault) {
  FailureRing r(2);
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  void* gone = mmap(nullptr, 2 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(gone, MAP_FAILED);
  std::memset(gone, 0x3f, 2 * page);
  std::vector<float> kept{1, 2, 3, 4};
  const int64_t bigShape[1] = {static_cast<int64_t>(2 * page / sizeof(float))};
  const int64_t shape[1] = {4};
  r.stepBegan();
  ASSERT_EQ(r.keepBorrowed(0, 0, "resized", 0, 0, "float32", bigShape, 1, gone, 2 * page,
                           computeDigest("float32", gone, 2 * page).hash),
            FailureRing::Keep::Kept);
  ASSERT_EQ(r.keepBorrowed(0, 0, "kept", 0, 0, "float32", shape, 1, kept.data(), 16,
                           computeDigest("float32", kept.data(), 16).hash),
            FailureRing::Keep::Kept);
  ASSERT_EQ(munmap(static_cast<char*>(gone) + page, page), 0);  // half of it gone: a partial read too
  RingForFailure taken = r.takeForFailure(0);
  EXPECT_EQ(taken.changedAfterHook, 1u);
  ASSERT_EQ(order(taken.tensors), (std::vector<std::pair<int64_t, std::string>>{{0, "kept"}}));
  ASSERT_EQ(munmap(gone, page), 0);
}

// The floor the caller holds its references by: one past the last evicted step, never lower; a
// keep for a step already evicted is never borrowed (its owner may have let go of it).
TEST(FailureRing, TheBorrowFloorFollowsEviction) {
  FailureRing r(2);
  const int64_t shape[1] = {2};
  std::vector<float> v{1, 2};
  const uint64_t hash = computeDigest("float32", v.data(), 8).hash;
  auto borrow = [&](int64_t step) {
    return r.keepBorrowed(step, 0, "m", 0, 0, "float32", shape, 1, v.data(), 8, hash);
  };
  EXPECT_EQ(r.borrowFloor(), INT64_MIN);
  for (int64_t s = 0; s < 2; ++s) {
    r.stepBegan();
    EXPECT_EQ(borrow(s), FailureRing::Keep::Kept);
  }
  EXPECT_EQ(r.borrowFloor(), INT64_MIN) << "two steps kept, none evicted";
  r.stepBegan();
  EXPECT_EQ(r.borrowFloor(), 1) << "step 0 evicted";
  EXPECT_EQ(borrow(0), FailureRing::Keep::Dropped) << "a step already evicted";
  EXPECT_EQ(borrow(2), FailureRing::Keep::Kept);
  EXPECT_EQ(r.countForStep(0), 0u);
  r.stepBegan();
  EXPECT_EQ(r.borrowFloor(), 2);
  // A forked child drops the parent's borrowed entries unread and starts its own floor.
  r.lockForFork();
  r.resetAfterForkChild();
  EXPECT_EQ(r.bytes(), 0u);
  EXPECT_EQ(r.borrowFloor(), INT64_MIN);
  EXPECT_TRUE(r.takeForFailure(2).tensors.empty());
}

}  // namespace
}  // namespace dlrr
