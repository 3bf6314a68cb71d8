// Versioning: a newer major version is refused with both versions named; a newer minor
// version and event kinds this reader does not know are read.
#include <capnp/any.h>
#include <capnp/message.h>
#include <capnp/schema.h>
#include <gtest/gtest.h>

#include "format/Frame.h"
#include "format/StreamReader.h"
#include "format/Trace.h"
#include "format/TraceError.h"
#include "support/SampleTrace.h"
#include "support/StreamFixture.h"

namespace dlrr {
namespace {

using testing::makeTempDir;
using testing::readFile;
using testing::removeTree;
using testing::writeFile;
using testing::writeSampleTrace;

void setVersion(std::vector<uint8_t>& bytes, uint16_t major, uint16_t minor) {
  bytes[8] = static_cast<uint8_t>(major);
  bytes[9] = static_cast<uint8_t>(major >> 8);
  bytes[10] = static_cast<uint8_t>(minor);
  bytes[11] = static_cast<uint8_t>(minor >> 8);
}

TEST(Version, AFutureMajorVersionIsRefusedNamingBothVersions) {
  std::string root = makeTempDir("version");
  auto res = writeSampleTrace(root + "/t");
  std::string file = root + "/t/" + res.processStream;
  auto bytes = readFile(file);
  setVersion(bytes, kFormatMajor + 1, 3);
  writeFile(file, bytes);
  for (OpenMode mode : {OpenMode::Strict, OpenMode::Tolerant}) {
    try {
      Trace::open(root + "/t", mode);
      ADD_FAILURE() << "opened a trace from the future";
    } catch (const TraceError& e) {
      EXPECT_EQ(e.kind(), ErrorKind::FutureVersion);
      std::string msg = e.what();
      EXPECT_NE(msg.find("format " + std::to_string(kFormatMajor + 1) + ".3"), std::string::npos) << msg;
      EXPECT_NE(msg.find("reads format " + std::to_string(kFormatMajor) + "."), std::string::npos) << msg;
    }
  }
  removeTree(root);
}

TEST(Version, VersionZeroIsNotATrace) {
  auto s = makeTempDir("v0");
  auto res = writeSampleTrace(s + "/t");
  auto bytes = readFile(s + "/t/" + res.processStream);
  setVersion(bytes, 0, 0);
  try {
    StreamReader::openBytes(bytes, "p101");
    ADD_FAILURE() << "opened version 0";
  } catch (const TraceError& e) {
    EXPECT_EQ(e.kind(), ErrorKind::NotATrace);
  }
  removeTree(s);
}

TEST(Version, ANewerMinorVersionIsReadAndReported) {
  std::string root = makeTempDir("minor");
  auto res = writeSampleTrace(root + "/t");
  for (const char* f : {"launcher.dls", "p101.dls"}) {
    auto bytes = readFile(root + "/t/" + f);
    setVersion(bytes, kFormatMajor, kFormatMinor + 7);
    writeFile(root + "/t/" + f, bytes);
  }
  auto t = Trace::open(root + "/t");
  EXPECT_EQ(t->find("p101")->status().formatMinor, kFormatMinor + 7);
  auto sum = t->summarize();
  EXPECT_EQ(sum.formatVersion, std::to_string(kFormatMajor) + "." + std::to_string(kFormatMinor + 7));
  EXPECT_EQ(sum.steps, 5u);
  removeTree(root);
}

TEST(Version, EventKindsAndFieldsFromANewerSchemaAreSkippedNotFatal) {
  testing::StreamFixture fx("newer-schema");
  // A note event whose union discriminant names a member this reader does not know, as a
  // newer minor version would add.
  auto eventSchema = capnp::Schema::from<schema::Event>();
  uint32_t discOffset = eventSchema.getProto().getStruct().getDiscriminantOffset();
  {
    auto m = testing::eventMessage(3);
    m->getRoot<schema::Event>().setNote("from the future");
    capnp::AnyStruct::Builder any = m->getRoot<capnp::AnyStruct>();
    auto data = any.getDataSection();
    ASSERT_GE(data.size(), discOffset * 2 + 2);
    data[discOffset * 2] = 200;  // union member 200
    data[discOffset * 2 + 1] = 0;
    fx.writer->append(*m);
  }
  {
    auto m = testing::eventMessage(4);
    m->getRoot<schema::Event>().initStepEnd().setStep(4);
    fx.writer->append(*m);
  }
  fx.writer->close();
  auto r = fx.reopen();
  std::vector<int> whiches;
  r->forEachEvent([&](schema::Event::Reader e, const FrameInfo&) { whiches.push_back(static_cast<int>(e.which())); });
  ASSERT_EQ(whiches.size(), 2u);
  EXPECT_EQ(whiches[0], 200);
  EXPECT_EQ(whiches[1], static_cast<int>(schema::Event::STEP_END));
  EXPECT_TRUE(r->verify().empty());
}

}  // namespace
}  // namespace dlrr
