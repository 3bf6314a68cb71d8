#pragma once
// Runs another program as a child and waits for it, like system() but without a shell and
// without a signal handler: the parent blocks the signals it passes on and waits for them with
// sigwaitinfo, so a Ctrl-C (which the terminal sends to the whole process group) is not sent
// twice, and a signal sent to the parent alone (kill PID, timeout) is passed on to the child.
// The one launcher of dlrecord, dlreplay and dlpreflight.
#include <sys/resource.h>
#include <sys/types.h>

#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace dlrr::tools {

class Sandbox;

struct LaunchSpec {
  std::vector<std::string> argv;  // argv[0] is looked up on PATH
  std::vector<std::string> env;   // the child's whole environment, "NAME=VALUE"
  std::string cwd;                // where the child starts; empty: here
  std::vector<int> inheritFds;    // descriptors the child keeps across exec (others are O_CLOEXEC)
  // true: SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2 sent to the parent are passed on
  // (a terminal's SIGINT/SIGQUIT already reached the child's process group and is not).
  // false (an interactive debugger in the child owns Ctrl-C): the parent ignores SIGINT while
  // it waits. Either way the child starts with this process's dispositions and signal mask.
  bool passSignalsOn = true;
  // When set, the child runs inside it (Sandbox.h); the wait status is still the job's.
  const Sandbox* sandbox = nullptr;
};

struct ChildResult {
  pid_t pid = -1;
  int execError = 0;            // errno of a failed exec (ENOENT: not found, else not executable), 0 when it ran
  int waitStatus = 0;           // waitpid's status when it ran
  rusage usage{};               // the child's resources (wait4)
  bool stoppedForPeer = false;  // launchAll sent it SIGTERM because another child failed
};

// Throws std::system_error when fork or pipe fails.
ChildResult launch(const LaunchSpec& spec);

// Several children at once (the ranks of a distributed job, started as a launcher would), all
// waited for; signals are passed on to every child still running (specs.front().passSignalsOn
// decides for all). `stopOthers(i, waitStatus)`, when given, is asked as child i ends: true
// sends the others SIGTERM (torchrun stops a job's ranks when one fails; dlreplay, when one
// ends otherwise than recorded). When fork fails after the first child, those started are
// stopped and reaped, and the others' execError is fork's errno; when it fails first,
// std::system_error.
std::vector<ChildResult> launchAll(const std::vector<LaunchSpec>& specs,
                                   const std::function<bool(size_t, int)>& stopOthers = {});

// This process's environment with `setEnv` added (or replacing what is there).
std::vector<std::string> environmentWith(const std::vector<std::pair<std::string, std::string>>& setEnv);

// launch() with this environment plus `setEnv`.
ChildResult runChild(const std::vector<std::string>& argv,
                     const std::vector<std::pair<std::string, std::string>>& setEnv);

// A wait status as a shell exit code: the code, or 128+N for a death by signal N.
int shellExitCode(int waitStatus);

}  // namespace dlrr::tools
