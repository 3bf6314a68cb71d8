#pragma once
// Runs another program as a child and waits for it, like system() but without a shell and
// without a signal handler: the parent blocks the terminating signals and waits for them
// with sigwaitinfo, so a Ctrl-C (which the terminal sends to the whole process group) is
// not sent twice, and a signal sent to the parent alone (kill PID) is passed on to the child.
#include <string>
#include <utility>
#include <vector>

namespace dlrr::tools {

struct ChildResult {
  int execError = 0;   // errno of a failed exec (ENOENT: not found), 0 when the child ran
  int waitStatus = 0;  // waitpid's status when it ran
};

// argv[0] is looked up on PATH. `setEnv` is added to (or replaces in) this environment.
// Throws std::system_error when fork or pipe fails.
ChildResult runChild(const std::vector<std::string>& argv,
                     const std::vector<std::pair<std::string, std::string>>& setEnv);

// A wait status as a shell exit code: the code, or 128+N for a death by signal N.
int shellExitCode(int waitStatus);

}  // namespace dlrr::tools
