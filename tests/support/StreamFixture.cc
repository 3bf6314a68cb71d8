#include "support/StreamFixture.h"

#include <capnp/serialize.h>

#include "format/TraceDir.h"
#include "support/SampleTrace.h"

namespace dlrr::testing {

StreamFixture::StreamFixture(const std::string& tag, WriterOptions opts) {
  root = makeTempDir(tag);
  dir = root + "/trace";
  dirFd = createTraceDir(dir);
  capnp::MallocMessageBuilder hm;
  auto h = hm.initRoot<schema::StreamHeader>();
  h.setStreamName("p1");
  h.setRole(schema::StreamHeader::Role::PROCESS);
  h.setPid(1);
  std::string name;
  UniqueFd fd = createStreamFile(dirFd.get(), "p1", name);
  file = name + kStreamExt;
  writer = std::make_unique<StreamWriter>(std::move(fd), hm, opts);
}

StreamFixture::~StreamFixture() {
  writer.reset();
  removeTree(root);
}

std::unique_ptr<StreamReader> StreamFixture::reopen() const { return StreamReader::open(dirFd.get(), file, "p1"); }

std::unique_ptr<capnp::MallocMessageBuilder> eventMessage(int64_t step) {
  auto m = std::make_unique<capnp::MallocMessageBuilder>();
  m->initRoot<schema::Event>().setStep(step);
  return m;
}

std::vector<uint8_t> flatBytes(capnp::MessageBuilder& msg) {
  auto words = capnp::messageToFlatArray(msg);
  auto bytes = words.asBytes();
  return std::vector<uint8_t>(bytes.begin(), bytes.end());
}

}  // namespace dlrr::testing
