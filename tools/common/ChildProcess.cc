#include "tools/common/ChildProcess.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <system_error>

#include "tools/common/ExitCodes.h"
#include "tools/common/Sandbox.h"

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

namespace {

// The child side of a fork: only async-signal-safe calls. Reports a failed chdir/exec's errno
// through `execPipe` and exits 127 (not found) or 126.
[[noreturn]] void execChild(const LaunchSpec& spec, char** argp, char** envp, const IgnoredInterrupt& ignored,
                            const sigset_t& oldMask, int execPipe) {
  ignored.restore();  // the job gets the dispositions and mask it would get without us
  for (int fd : spec.inheritFds) ::fcntl(fd, F_SETFD, 0);
  if (spec.sandbox) spec.sandbox->run(argp, envp, spec.cwd.c_str(), oldMask, execPipe, -1);
  ::pthread_sigmask(SIG_SETMASK, &oldMask, nullptr);
  int err = 0;
  if (!spec.cwd.empty() && ::chdir(spec.cwd.c_str()) != 0) err = errno;
  if (err == 0) {
    ::execvpe(argp[0], argp, envp);
    err = errno;
  }
  ssize_t w = ::write(execPipe, &err, sizeof err);
  (void)w;
  ::_exit(err == ENOENT ? kExitCannotRun : kExitNotExecutable);
}

}  // namespace

std::vector<ChildResult> launchAll(const std::vector<LaunchSpec>& specs,
                                   const std::function<bool(size_t, int)>& stopOthers) {
  if (specs.empty()) return {};
  // Everything the children need is built before fork: after it, only async-signal-safe calls.
  struct Prepared {
    std::vector<std::string> env, args;
    std::vector<char*> envp, argp;
  };
  std::vector<Prepared> prepared(specs.size());
  for (size_t i = 0; i < specs.size(); ++i) {
    Prepared& p = prepared[i];
    p.env = specs[i].env;
    p.args = specs[i].argv;
    for (auto& s : p.env) p.envp.push_back(s.data());
    p.envp.push_back(nullptr);
    for (auto& s : p.args) p.argp.push_back(s.data());
    p.argp.push_back(nullptr);
  }
  const bool passOn = specs.front().passSignalsOn;
  IgnoredInterrupt ignored(!passOn);
  BlockedSignals blocked(passOn);
  std::vector<ChildResult> results(specs.size());
  std::vector<bool> running(specs.size(), false);
  size_t live = 0;
  auto stopAll = [&](int sig) {
    for (size_t i = 0; i < results.size(); ++i)
      if (running[i]) ::kill(results[i].pid, sig);
  };
  for (size_t i = 0; i < specs.size(); ++i) {
    int execPipe[2];
    if (::pipe2(execPipe, O_CLOEXEC) != 0) {
      int err = errno;
      stopAll(SIGTERM);  // never leave started children unwaited: they are reaped below
      if (live == 0) throw std::system_error(err, std::generic_category(), "pipe");
      for (size_t j = i; j < specs.size(); ++j) results[j].execError = err;  // never started
      break;
    }
    pid_t pid = ::fork();
    if (pid < 0) {
      int err = errno;
      ::close(execPipe[0]);
      ::close(execPipe[1]);
      stopAll(SIGTERM);
      if (live == 0) throw std::system_error(err, std::generic_category(), "fork");
      for (size_t j = i; j < specs.size(); ++j) results[j].execError = err;  // never started
      break;
    }
    if (pid == 0)
      execChild(specs[i], prepared[i].argp.data(), prepared[i].envp.data(), ignored, blocked.old(), execPipe[1]);
    ::close(execPipe[1]);
    results[i].pid = pid;
    running[i] = true;
    ++live;
    int execErr = 0;
    ssize_t n;
    while ((n = ::read(execPipe[0], &execErr, sizeof execErr)) < 0 && errno == EINTR) {
    }
    ::close(execPipe[0]);
    if (n == static_cast<ssize_t>(sizeof execErr)) results[i].execError = execErr;
  }
  while (live > 0) {
    bool reaped = false;
    for (size_t i = 0; i < results.size(); ++i) {
      if (!running[i]) continue;
      pid_t done = ::wait4(results[i].pid, &results[i].waitStatus, WNOHANG, &results[i].usage);
      if (done == results[i].pid || (done < 0 && errno == ECHILD)) {
        running[i] = false;
        --live;
        reaped = true;
        // As torchrun does: a process failing stops its peers (they would wait for it forever).
        if (stopOthers && done == results[i].pid && !results[i].stoppedForPeer && stopOthers(i, results[i].waitStatus))
          for (size_t j = 0; j < results.size(); ++j)
            if (running[j] && !results[j].stoppedForPeer) {
              results[j].stoppedForPeer = true;
              ::kill(results[j].pid, SIGTERM);
            }
      }
    }
    if (reaped || live == 0) continue;
    siginfo_t info{};
    if (::sigwaitinfo(&blocked.set(), &info) < 0) continue;
    if (info.si_signo == SIGCHLD) continue;
    // A terminal's Ctrl-C / Ctrl-\ reached the children's process group already.
    if (info.si_code == SI_KERNEL && (info.si_signo == SIGINT || info.si_signo == SIGQUIT)) continue;
    stopAll(info.si_signo);
  }
  return results;
}

ChildResult launch(const LaunchSpec& spec) { return launchAll({spec}).front(); }

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
