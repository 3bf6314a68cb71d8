#include "tools/dlreplay/GdbLaunch.h"

#include <signal.h>
#include <sys/wait.h>

#include <cstdint>
#include <fstream>
#include <initializer_list>

namespace dlrr {

std::vector<std::string> gdbCommand(const std::vector<std::string>& command, const std::string& statusPath,
                                    bool interactive) {
  std::vector<std::string> full = {"gdb", "-q"};
  if (!interactive) full.push_back("-batch");
  // $_siginfo exists only while the job lives; gdb evaluates one branch of ?: only.
  const std::string signal = std::string("set $dlrr_signal = !$_isvoid($_exitsignal) ? $_exitsignal : ") +
                             "$_isvoid($_exitcode) ? $_siginfo.si_signo : 0";
  for (const std::string& c : std::initializer_list<std::string>{
           "set breakpoint pending on", "set confirm off", "break dlrr_replay_stopped", "handle SIGSEGV stop print",
           "run", signal, "set $dlrr_exit = $_isvoid($_exitcode) ? -1 : $_exitcode",
           "dump binary value " + statusPath + " $dlrr_signal", "append binary value " + statusPath + " $dlrr_exit"})
    full.insert(full.end(), {"-ex", c});
  if (!interactive) full.insert(full.end(), {"-ex", "bt 30", "-ex", "kill"});
  full.push_back("--args");
  full.insert(full.end(), command.begin(), command.end());
  return full;
}

int jobStatusUnderGdb(const std::string& statusPath, int gdbStatus) {
  int32_t job[2] = {0, -1};  // signal, exit code
  std::ifstream in(statusPath, std::ios::binary);
  if (!in.read(reinterpret_cast<char*>(job), sizeof job)) return gdbStatus;
  if (job[0] > 0 && job[0] < 128 && job[0] != SIGTRAP) return W_EXITCODE(0, job[0]);  // ended in gdb there
  if (job[1] >= 0 && job[1] < 256) return W_EXITCODE(job[1], 0);
  return gdbStatus;
}

}  // namespace dlrr
