// Bounded traces: the batch digest (session/BatchDigest), the window (recorder/BatchWindow)
// and the replay map (format/BatchMap).
#include <gtest/gtest.h>

#include <vector>

#include "format/BatchMap.h"
#include "recorder/BatchWindow.h"
#include "session/BatchDigest.h"

namespace dlrr {
namespace {

uint64_t digestOf(const std::vector<float>& images, int64_t label, std::vector<uint64_t>* samples = nullptr) {
  BatchDigest d;
  d.begin(2);
  d.container('l', 2);
  const int64_t shape[] = {2, static_cast<int64_t>(images.size() / 2)};
  d.tensor("float32", 2, shape, images.data(), images.size() * sizeof(float));
  d.integer(label);
  if (samples) *samples = d.samples();
  return d.digest();
}

TEST(BatchDigestTest, SameValueSameDigestAndTheDifferingSampleIsNamed) {
  std::vector<uint64_t> a, b;
  EXPECT_EQ(digestOf({1, 2, 3, 4}, 7, &a), digestOf({1, 2, 3, 4}, 7, &b));
  EXPECT_EQ(BatchDigest::firstDifferentSample(a, b), -1);
  EXPECT_NE(digestOf({1, 2, 3, 4}, 7), digestOf({1, 2, 3, 5}, 7, &b));
  EXPECT_EQ(BatchDigest::firstDifferentSample(a, b), 1);
  EXPECT_NE(digestOf({1, 2, 3, 4}, 7), digestOf({1, 2, 3, 4}, 8));  // not only tensors
  // -0.0 and 0.0 are different bits: the digest is bit-exact.
  EXPECT_NE(digestOf({0.0f, 1, 1, 1}, 0), digestOf({-0.0f, 1, 1, 1}, 0));
}

TEST(BatchWindowTest, KeepsTwoSegmentsFromTheirSnapshotsAndBoundsBatches) {
  BatchWindow w(2);
  const uint8_t bytes[100] = {};
  for (int64_t step = 0; step < 9; ++step) {
    if (step > 0 && step % 2 == 0) {
      w.keep(Hash128{1, static_cast<uint64_t>(step)}, bytes, 10, 1);
      w.endSnapshot(step, nullptr);
    }
    w.keep(Hash128{2, static_cast<uint64_t>(step)}, bytes, 100, 1);
    w.endBatch(step);
  }
  EXPECT_EQ(w.bytesHeld(), 2u * (10 + 100) + 100);  // segments of steps 6 (6, 7) and 8 (8)
  auto segments = w.take();
  ASSERT_EQ(segments.size(), 2u);
  EXPECT_EQ(segments[0].startStep, 6);
  EXPECT_TRUE(segments[0].startable);
  EXPECT_EQ(segments[0].batches.size(), 2u);
  EXPECT_EQ(segments[1].startStep, 8);
  EXPECT_EQ(w.bytesHeld(), 0u);
}

TEST(BatchWindowTest, WithoutSnapshotsTheStartIsLost) {
  BatchWindow w(1);
  const uint8_t bytes[8] = {};
  for (int64_t step = 0; step < 5; ++step) {
    w.keep(Hash128{3, static_cast<uint64_t>(step)}, bytes, 8, 1);
    w.endBatch(step);
  }
  auto segments = w.take();
  ASSERT_EQ(segments.size(), 1u);
  EXPECT_EQ(segments[0].batches.size(), 2u);  // 2K
  EXPECT_FALSE(segments[0].startable);
}

TEST(BatchWindowTest, CollectiveResultsGoWithTheSegmentOfTheirStep) {
  BatchWindow w(2);
  const uint8_t bytes[40] = {};
  for (int64_t step = 0; step < 9; ++step) {
    if (step > 0 && step % 2 == 0) w.endSnapshot(step, nullptr);
    w.keep(Hash128{2, static_cast<uint64_t>(step)}, bytes, 10, 1);
    w.endBatch(step);
    EXPECT_TRUE(w.keepCollective(step, Hash128{4, static_cast<uint64_t>(step)}, bytes, 40, 4));
    EXPECT_TRUE(w.keepCollective(step, Hash128{5, static_cast<uint64_t>(step)}, bytes, 4, 4));
  }
  EXPECT_EQ(w.collectiveBytesHeld(), 3u * 44);  // steps 6, 7 and 8: the two segments kept
  EXPECT_EQ(w.peakCollectiveBytes(), 4u * 44);  // before a third segment pushed the oldest out
  EXPECT_EQ(w.bytesHeld(), 3u * 10 + 3u * 44);
  auto segments = w.take();
  ASSERT_EQ(segments.size(), 2u);
  ASSERT_EQ(segments[0].collectives.size(), 2u);
  EXPECT_EQ(segments[0].collectives[0].step, 6);
  EXPECT_EQ(segments[0].collectives[0].blobs.size(), 2u);
  EXPECT_EQ(segments[0].collectives[0].blobs[0].elemSize, 4u);
  EXPECT_EQ(segments[0].collectives[1].step, 7);
  ASSERT_EQ(segments[1].collectives.size(), 1u);
  EXPECT_EQ(segments[1].collectives[0].step, 8);
  EXPECT_EQ(w.collectiveBytesHeld(), 0u);
}

TEST(BatchWindowTest, CollectiveResultsOfASegmentThatCannotStartAreDropped) {
  // Batches without snapshots: past 2K batches the job's start is lost, and with it the
  // results (no replay can start there to be served them).
  BatchWindow w(1);
  const uint8_t bytes[8] = {};
  for (int64_t step = 0; step < 2; ++step) {
    w.keep(Hash128{3, static_cast<uint64_t>(step)}, bytes, 8, 1);
    w.endBatch(step);
    EXPECT_TRUE(w.keepCollective(step, Hash128{6, static_cast<uint64_t>(step)}, bytes, 8, 4));
  }
  w.keep(Hash128{3, 2}, bytes, 8, 1);
  w.endBatch(2);
  EXPECT_EQ(w.collectiveBytesHeld(), 0u);
  EXPECT_FALSE(w.keepCollective(2, Hash128{6, 2}, bytes, 8, 4));
  EXPECT_EQ(w.bytesHeld(), 2u * 8);

  // No batches at all (a loop without a DataLoader) and no snapshot: 2K steps from the start.
  BatchWindow v(2);
  for (int64_t step = 0; step < 4; ++step) EXPECT_TRUE(v.keepCollective(step, Hash128{7, 0}, bytes, 8, 4));
  EXPECT_FALSE(v.keepCollective(4, Hash128{7, 4}, bytes, 8, 4));
  EXPECT_EQ(v.collectiveBytesHeld(), 0u);
}

TEST(BatchMapTest, WithoutDataOnlyFromAStartWhoseBatchesAreHeld) {
  BatchMapBuilder b;
  for (int64_t s = 0; s < 10; ++s) b.batch(s, true, s >= 6);
  b.snapshot(4);  // on disk, but batches 4 and 5 have no bytes
  b.snapshot(6);
  BatchMap m = b.build();
  EXPECT_EQ(m.lastStep, 9);
  ASSERT_EQ(m.withoutData.size(), 1u);
  EXPECT_EQ(m.withoutData[0].first, 6);
  EXPECT_EQ(m.withoutData[0].last, 9);
  EXPECT_EQ(m.rangeOf(3), nullptr);
  EXPECT_NE(m.rangeOf(7), nullptr);
  EXPECT_EQ(m.describe(),
            "steps 0-9 replay with the dataset present; without it only steps 6-9 (from the snapshot of step 6)");
  BatchMapBuilder byValue;
  for (int64_t s = 0; s < 3; ++s) byValue.batch(s, false, true);
  EXPECT_EQ(byValue.build().withoutData.size(), 1u);
}

}  // namespace
}  // namespace dlrr
