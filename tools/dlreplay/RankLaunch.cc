#include "tools/dlreplay/RankLaunch.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <optional>
#include <string>

namespace dlrr {

int freeLocalPort() {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return 0;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  int port = 0;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0)
    port = ntohs(a.sin_port);
  ::close(fd);
  return port;
}

std::vector<tools::LaunchSpec> rankLaunchSpecs(const ReplaySelection& s, const Environment& env, int port) {
  std::vector<tools::LaunchSpec> specs;
  for (const auto& l : s.rankLaunches) {
    Environment e = env;
    for (const auto& [k, v] : l.distEnv) e[k] = v;
    e["MASTER_ADDR"] = "127.0.0.1";
    e["MASTER_PORT"] = std::to_string(port);
    tools::LaunchSpec spec;
    spec.argv = l.argv;
    spec.env = environmentStrings(e);
    spec.cwd = l.cwd;
    specs.push_back(std::move(spec));
  }
  return specs;
}

namespace {

std::optional<int> recordedExit(const ReplaySelection& s, size_t i) {
  for (const auto& rk : s.ranks.ranks)
    if (i < s.rankLaunches.size() && rk.rank == s.rankLaunches[i].rank) return rk.exitCode;
  return std::nullopt;
}

}  // namespace

bool endsAsRecorded(const ReplaySelection& s, size_t i, int waitStatus) {
  return tools::shellExitCode(waitStatus) == recordedExit(s, i).value_or(0);
}

ProcessEnd rankEnd(const ReplaySelection& s, const std::vector<tools::ChildResult>& children) {
  ProcessEnd end;
  end.who.clear();
  for (bool stopped : {false, true})
    for (size_t i = 0; i < children.size() && i < s.rankLaunches.size() && end.who.empty(); ++i) {
      if (children[i].stoppedForPeer != stopped) continue;
      if (!endsAsRecorded(s, i, children[i].waitStatus)) {
        end.who = "rank " + std::to_string(s.rankLaunches[i].rank);
        end.waitStatus = children[i].waitStatus;
        end.recordedExit = recordedExit(s, i);
      }
    }
  if (end.who.empty()) end.who = "the ranks";  // every rank ended as recorded
  return end;
}

}  // namespace dlrr
