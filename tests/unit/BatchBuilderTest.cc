#include <gtest/gtest.h>

#include <vector>

#include "recorder/BatchBuilder.h"
#include "replayer/BatchEncoding.h"

namespace dlrr {
namespace {

BlobId fakeBlob(const void* p, size_t n, unsigned) { return BlobId{hash128(p, n), n}; }

TEST(BatchBuilder, NestedStructureRoundTrips) {
  BatchBuilder b;
  int64_t idx[2] = {7, 9};
  b.begin(1, 2, 3, true, idx, 2);
  b.dict(3);
  b.key("x");
  float data[4] = {1, 2, 3, 4};
  int64_t shape[2] = {2, 2};
  b.tensor("float32", 4, 2, shape, data, sizeof data, "cpu", false, fakeBlob);
  b.key("meta");
  b.tuple(2);
  b.integer(5);
  b.list(0);
  b.key("name");
  b.text("abc", 3);
  std::string err;
  auto msg = b.finish(err);
  ASSERT_TRUE(msg) << err;
  auto batch = msg->getRoot<schema::Event>().getBatch().asReader();
  EXPECT_EQ(batch.getLoader(), 1u);
  EXPECT_EQ(batch.getIteration(), 2u);
  EXPECT_EQ(batch.getIndex(), 3u);
  ASSERT_EQ(batch.getSampleIndices().size(), 2u);
  auto d = batch.getValue().getDict();
  ASSERT_EQ(d.size(), 3u);
  EXPECT_EQ(std::string(d[0].getKey().cStr()), "x");
  EXPECT_EQ(d[0].getValue().getTensor().getData().getSize(), sizeof data);
  EXPECT_EQ(d[1].getValue().getTuple()[0].getInt(), 5);
  EXPECT_EQ(d[1].getValue().getTuple()[1].getList().size(), 0u);
  EXPECT_EQ(std::string(d[2].getValue().getText().cStr()), "abc");

  // The replay encoding of the same value, served back from the "blob store".
  std::vector<uint8_t> enc;
  encodeValue(
      batch.getValue(),
      [&](const Hash128&, uint64_t n) {
        EXPECT_EQ(n, sizeof data);
        return std::vector<uint8_t>(reinterpret_cast<uint8_t*>(data), reinterpret_cast<uint8_t*>(data) + n);
      },
      enc);
  ASSERT_FALSE(enc.empty());
  EXPECT_EQ(enc[0], 'D');
}

// Jump replay's snapshots: the same value tree in a Snapshot event, counting the tensor bytes
// the stream did not hold yet (BlobId::fresh) apart from all of them.
TEST(BatchBuilder, SnapshotCountsNewBytesApart) {
  BatchBuilder b;
  b.beginSnapshot(40000, true);
  b.list(2);
  float w[4] = {1, 2, 3, 4};
  int64_t shape[1] = {4};
  int calls = 0;
  auto put = [&](const void* p, size_t n, unsigned) {
    BlobId id{hash128(p, n), n};
    id.fresh = calls++ == 0;  // the second tensor is already in the stream
    return id;
  };
  b.tensor("float32", 4, 1, shape, w, sizeof w, "cpu", false, put);
  b.tensor("float32", 4, 1, shape, w, sizeof w, "cpu", false, put);
  std::string err;
  auto msg = b.finish(err);
  ASSERT_TRUE(msg) << err;
  auto ev = msg->getRoot<schema::Event>().asReader();
  ASSERT_TRUE(ev.isSnapshot());
  auto sn = ev.getSnapshot();
  EXPECT_EQ(sn.getStep(), 40000);
  EXPECT_EQ(sn.getReason(), schema::Snapshot::Reason::FAILURE);
  EXPECT_EQ(sn.getTensorBytes(), 2 * sizeof w);
  EXPECT_EQ(sn.getNewBytes(), sizeof w);
  EXPECT_EQ(sn.getValue().getList().size(), 2u);
  // A batch after it is a batch again.
  b.begin(0, 0, 0, true, nullptr, 0);
  b.none();
  msg = b.finish(err);
  ASSERT_TRUE(msg) << err;
  EXPECT_TRUE(msg->getRoot<schema::Event>().asReader().isBatch());
}

TEST(BatchBuilder, IncompleteOrMalformedIsRejected) {
  BatchBuilder b;
  b.begin(0, 0, 0, false, nullptr, 0);
  b.list(2);
  b.integer(1);
  std::string err;
  EXPECT_FALSE(b.finish(err));
  EXPECT_NE(err.find("incomplete"), std::string::npos);

  b.begin(0, 0, 0, false, nullptr, 0);
  b.integer(1);
  b.integer(2);  // a second root
  EXPECT_FALSE(b.finish(err));

  b.begin(0, 0, 0, false, nullptr, 0);
  b.key("k");  // key outside a dict
  EXPECT_FALSE(b.finish(err));

  EXPECT_FALSE(BatchBuilder().finish(err));  // end without begin
}

}  // namespace
}  // namespace dlrr
