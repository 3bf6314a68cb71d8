#pragma once
// Small helpers for tests that drive one StreamWriter directly.
#include <capnp/message.h>

#include <memory>
#include <string>
#include <vector>

#include "format/StreamReader.h"
#include "format/StreamWriter.h"
#include "format/UniqueFd.h"
#include "schema/dlrr.capnp.h"

namespace dlrr::testing {

// A fresh trace directory with one process stream being written.
struct StreamFixture {
  explicit StreamFixture(const std::string& tag, WriterOptions opts = {});
  ~StreamFixture();
  StreamFixture(const StreamFixture&) = delete;
  StreamFixture& operator=(const StreamFixture&) = delete;

  std::unique_ptr<StreamReader> reopen() const;  // a reader over the file as it is now
  std::string path() const { return dir + "/" + file; }

  std::string root;  // removed by the destructor
  std::string dir;   // the trace directory
  UniqueFd dirFd;
  std::string file;  // stream file name
  std::unique_ptr<StreamWriter> writer;
};

// An Event message with step set; fill the union with e.g. `msg.getRoot<schema::Event>().setNote(..)`.
std::unique_ptr<capnp::MallocMessageBuilder> eventMessage(int64_t step);
// The flat bytes of a message (what writeFromSignal takes).
std::vector<uint8_t> flatBytes(capnp::MessageBuilder& msg);

}  // namespace dlrr::testing
