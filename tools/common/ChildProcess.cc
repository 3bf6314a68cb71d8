#include "tools/common/ChildProcess.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <system_error>

extern char** environ;

namespace dlrr::tools {
namespace {

constexpr int kPassedOn[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT};

std::vector<std::string> mergedEnvironment(const std::vector<std::pair<std::string, std::string>>& setEnv) {
  std::vector<std::string> env;
  for (char** e = environ; *e; ++e) {
    std::string entry(*e);
    bool replaced = false;
    for (const auto& [k, v] : setEnv) replaced = replaced || entry.rfind(k + "=", 0) == 0;
    if (!replaced) env.push_back(std::move(entry));
  }
  for (const auto& [k, v] : setEnv) env.push_back(k + "=" + v);
  return env;
}

// Blocks kPassedOn + SIGCHLD for its lifetime (RAII): restored on every way out.
class BlockedSignals {
 public:
  BlockedSignals() {
    sigemptyset(&set_);
    for (int s : kPassedOn) sigaddset(&set_, s);
    sigaddset(&set_, SIGCHLD);
    ::pthread_sigmask(SIG_BLOCK, &set_, &old_);
  }
  ~BlockedSignals() { ::pthread_sigmask(SIG_SETMASK, &old_, nullptr); }
  BlockedSignals(const BlockedSignals&) = delete;
  BlockedSignals& operator=(const BlockedSignals&) = delete;
  const sigset_t& set() const { return set_; }
  const sigset_t& old() const { return old_; }

 private:
  sigset_t set_{}, old_{};
};

}  // namespace

ChildResult runChild(const std::vector<std::string>& argv,
                     const std::vector<std::pair<std::string, std::string>>& setEnv) {
  std::vector<std::string> env = mergedEnvironment(setEnv);
  std::vector<std::string> args = argv;
  std::vector<char*> envp, argp;
  for (auto& s : env) envp.push_back(s.data());
  envp.push_back(nullptr);
  for (auto& s : args) argp.push_back(s.data());
  argp.push_back(nullptr);

  int execPipe[2];
  if (::pipe2(execPipe, O_CLOEXEC) != 0) throw std::system_error(errno, std::generic_category(), "pipe");
  BlockedSignals blocked;
  pid_t pid = ::fork();
  if (pid < 0) {
    int err = errno;
    ::close(execPipe[0]);
    ::close(execPipe[1]);
    throw std::system_error(err, std::generic_category(), "fork");
  }
  if (pid == 0) {
    ::pthread_sigmask(SIG_SETMASK, &blocked.old(), nullptr);
    ::execvpe(argp[0], argp.data(), envp.data());
    int err = errno;
    ssize_t w = ::write(execPipe[1], &err, sizeof err);
    (void)w;
    ::_exit(127);
  }
  ::close(execPipe[1]);
  ChildResult r;
  int execErr = 0;
  ssize_t n;
  while ((n = ::read(execPipe[0], &execErr, sizeof execErr)) < 0 && errno == EINTR) {
  }
  ::close(execPipe[0]);
  if (n == static_cast<ssize_t>(sizeof execErr)) r.execError = execErr;
  for (;;) {
    pid_t done = ::waitpid(pid, &r.waitStatus, WNOHANG);
    if (done == pid) break;
    if (done < 0 && errno != EINTR) break;
    siginfo_t info{};
    if (::sigwaitinfo(&blocked.set(), &info) < 0) continue;
    // SI_USER: sent by kill() to us alone; a terminal's signal already reached the child.
    if (info.si_signo != SIGCHLD && info.si_code == SI_USER) ::kill(pid, info.si_signo);
  }
  return r;
}

int shellExitCode(int waitStatus) {
  if (WIFEXITED(waitStatus)) return WEXITSTATUS(waitStatus);
  if (WIFSIGNALED(waitStatus)) return 128 + WTERMSIG(waitStatus);
  return 1;
}

}  // namespace dlrr::tools
