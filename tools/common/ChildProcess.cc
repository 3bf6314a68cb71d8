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

constexpr int kPassedOn[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2};

// Blocks `signals` + SIGCHLD for its lifetime (RAII): restored on every way out.
class BlockedSignals {
 public:
  explicit BlockedSignals(bool passOn) {
    sigemptyset(&set_);
    if (passOn)
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

// SIGINT ignored for its lifetime (RAII), when asked.
class IgnoredInterrupt {
 public:
  explicit IgnoredInterrupt(bool on) : on_(on) {
    if (on_) ::sigaction(SIGINT, nullptr, &old_), ::signal(SIGINT, SIG_IGN);
  }
  ~IgnoredInterrupt() { restore(); }
  void restore() const {  // async-signal-safe: also in the forked child
    if (on_) ::sigaction(SIGINT, &old_, nullptr);
  }
  IgnoredInterrupt(const IgnoredInterrupt&) = delete;
  IgnoredInterrupt& operator=(const IgnoredInterrupt&) = delete;

 private:
  bool on_;
  struct sigaction old_ {};
};

}  // namespace

std::vector<std::string> environmentWith(const std::vector<std::pair<std::string, std::string>>& setEnv) {
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

ChildResult launch(const LaunchSpec& spec) {
  // Everything the child needs is built before fork: after it, only async-signal-safe calls.
  std::vector<std::string> env = spec.env, args = spec.argv;
  std::vector<char*> envp, argp;
  for (auto& s : env) envp.push_back(s.data());
  envp.push_back(nullptr);
  for (auto& s : args) argp.push_back(s.data());
  argp.push_back(nullptr);

  int execPipe[2];
  if (::pipe2(execPipe, O_CLOEXEC) != 0) throw std::system_error(errno, std::generic_category(), "pipe");
  IgnoredInterrupt ignored(!spec.passSignalsOn);
  BlockedSignals blocked(spec.passSignalsOn);
  pid_t pid = ::fork();
  if (pid < 0) {
    int err = errno;
    ::close(execPipe[0]);
    ::close(execPipe[1]);
    throw std::system_error(err, std::generic_category(), "fork");
  }
  if (pid == 0) {
    ignored.restore();  // the job gets the dispositions and mask it would get without us
    ::pthread_sigmask(SIG_SETMASK, &blocked.old(), nullptr);
    for (int fd : spec.inheritFds) ::fcntl(fd, F_SETFD, 0);
    int err = 0;
    if (!spec.cwd.empty() && ::chdir(spec.cwd.c_str()) != 0) err = errno;
    if (err == 0) {
      ::execvpe(argp[0], argp.data(), envp.data());
      err = errno;
    }
    ssize_t w = ::write(execPipe[1], &err, sizeof err);
    (void)w;
    ::_exit(err == ENOENT ? 127 : 126);
  }
  ::close(execPipe[1]);
  ChildResult r;
  r.pid = pid;
  int execErr = 0;
  ssize_t n;
  while ((n = ::read(execPipe[0], &execErr, sizeof execErr)) < 0 && errno == EINTR) {
  }
  ::close(execPipe[0]);
  if (n == static_cast<ssize_t>(sizeof execErr)) r.execError = execErr;
  for (;;) {
    pid_t done = ::wait4(pid, &r.waitStatus, WNOHANG, &r.usage);
    if (done == pid) break;
    if (done < 0 && errno != EINTR) break;
    siginfo_t info{};
    if (::sigwaitinfo(&blocked.set(), &info) < 0) continue;
    if (info.si_signo == SIGCHLD) continue;
    // A terminal's Ctrl-C / Ctrl-\ reached the child's process group already.
    if (info.si_code == SI_KERNEL && (info.si_signo == SIGINT || info.si_signo == SIGQUIT)) continue;
    ::kill(pid, info.si_signo);
  }
  return r;
}

ChildResult runChild(const std::vector<std::string>& argv,
                     const std::vector<std::pair<std::string, std::string>>& setEnv) {
  LaunchSpec spec;
  spec.argv = argv;
  spec.env = environmentWith(setEnv);
  return launch(spec);
}

int shellExitCode(int waitStatus) {
  if (WIFEXITED(waitStatus)) return WEXITSTATUS(waitStatus);
  if (WIFSIGNALED(waitStatus)) return 128 + WTERMSIG(waitStatus);
  return 1;
}

}  // namespace dlrr::tools
