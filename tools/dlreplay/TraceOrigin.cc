#include "tools/dlreplay/TraceOrigin.h"

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>

#include "tools/common/Text.h"

namespace dlrr {

TraceOrigin traceOrigin(const std::string& traceDir, schema::TraceInfo::Reader recorded, const std::string& thisHost) {
  TraceOrigin o;
  const uid_t me = ::geteuid();
  // The files first: their owner is the kernel's word, not the trace's.
  struct stat st {};
  uid_t owner = me;
  if (::stat(traceDir.c_str(), &st) == 0 && st.st_uid != me) owner = st.st_uid;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(traceDir, ec)) {
    if (owner != me) break;
    if (::lstat(e.path().c_str(), &st) == 0 && st.st_uid != me) owner = st.st_uid;
  }
  std::string host = recorded.getHost().cStr();
  if (host != thisHost || recorded.getUid() != me)
    o.why = "it was recorded by " + tools::printable(recorded.getUser().cStr()) + " on " + tools::printable(host) +
            ", not by you on this host";
  if (owner != me)
    o.why += (o.why.empty() ? "its" : "; its") + std::string(" files here belong to uid ") + std::to_string(owner) +
             ", not to you";
  o.foreign = !o.why.empty();
  return o;
}

}  // namespace dlrr
