#include "format/StreamHeaderBuilder.h"

#include <time.h>
#include <unistd.h>

#include "format/Version.h"

namespace dlrr {

schema::StreamHeader::Builder initStreamHeader(capnp::MessageBuilder& msg, const std::string& streamName,
                                               schema::StreamHeader::Role role) {
  auto h = msg.initRoot<schema::StreamHeader>();
  h.setStreamName(streamName);
  h.setRole(role);
  h.setPid(::getpid());
  h.setPpid(::getppid());
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  h.setStartNs(static_cast<int64_t>(ts.tv_sec) * 1000000000LL + ts.tv_nsec);
  h.setDlrrVersion(kDlrrVersion);
  return h;
}

}  // namespace dlrr
