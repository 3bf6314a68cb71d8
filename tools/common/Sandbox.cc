#include "tools/common/Sandbox.h"

#include <fcntl.h>
#include <linux/capability.h>
#include <net/if.h>
#include <sched.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <stdexcept>

namespace dlrr::tools {
namespace {

constexpr int kPassedOn[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2};

// mountinfo escapes space, tab, newline and backslash as \ooo.
std::string unescapeMount(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 3 < s.size() + 1 && std::isdigit(static_cast<unsigned char>(s[i + 1]))) {
      out.push_back(static_cast<char>(std::stoi(s.substr(i + 1, 3), nullptr, 8)));
      i += 3;
    } else {
      out.push_back(s[i]);
    }
  }
  return out;
}

bool under(const std::string& path, const std::string& dir) {
  if (dir == "/") return true;
  return path == dir || (path.size() > dir.size() && path.compare(0, dir.size(), dir) == 0 && path[dir.size()] == '/');
}

// Async-signal-safe output of a failure line (after fork).
void fail(int errFd, const char* what, const std::string& path, int err) {
  char buf[1024];
  int n = std::snprintf(buf, sizeof buf, "%s %s: %s\n", what, path.c_str(), std::strerror(err));
  if (n > 0) {
    ssize_t w = ::write(errFd >= 0 ? errFd : 2, buf, std::min(static_cast<size_t>(n), sizeof buf - 1));
    (void)w;
  }
}

bool writeFile(const char* path, const std::string& text) {
  int fd = ::open(path, O_WRONLY | O_CLOEXEC);
  if (fd < 0) return false;
  bool ok = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  ::close(fd);
  return ok;
}

// The loopback interface of a new network namespace starts down.
bool loopbackUp() {
  int s = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (s < 0) return false;
  ifreq ifr{};
  std::strncpy(ifr.ifr_name, "lo", IFNAMSIZ - 1);
  bool ok = ::ioctl(s, SIOCGIFFLAGS, &ifr) == 0;
  ifr.ifr_flags = static_cast<short>(ifr.ifr_flags | IFF_UP | IFF_RUNNING);
  ok = ok && ::ioctl(s, SIOCSIFFLAGS, &ifr) == 0;
  ::close(s);
  return ok;
}

// The dispositions the job must start with: those of the launcher (saved before PID 1 and the
// keeper install their own).
struct Dispositions {
  struct sigaction old[std::size(kPassedOn)]{};
};

void noop(int) {}

// Waits for `child` while passing on the signals in kPassedOn (not a terminal's Ctrl-C or
// Ctrl-\, which reached the child's process group already). Returns its wait status.
int waitPassingOn(pid_t child) {
  sigset_t set;
  sigemptyset(&set);
  for (int s : kPassedOn) sigaddset(&set, s);
  sigaddset(&set, SIGCHLD);
  for (;;) {
    int status = 0;
    pid_t done;
    // PID 1 also reaps the job's orphans; their ends are not the job's.
    while ((done = ::waitpid(-1, &status, WNOHANG)) > 0)
      if (done == child) return status;
    if (done < 0 && errno == ECHILD) return 0;
    siginfo_t info{};
    if (::sigwaitinfo(&set, &info) < 0 || info.si_signo == SIGCHLD) continue;
    if (info.si_code == SI_KERNEL && (info.si_signo == SIGINT || info.si_signo == SIGQUIT)) continue;
    ::kill(child, info.si_signo);
  }
}

}  // namespace

Sandbox::Sandbox(const SandboxSpec& spec) { plan(spec); }

void Sandbox::plan(const SandboxSpec& spec) {
  namespace fs = std::filesystem;
  userNs_ = ::geteuid() != 0;
  hostNetwork_ = spec.hostNetwork;
  uidMap_ = std::to_string(::geteuid()) + " " + std::to_string(::geteuid()) + " 1\n";
  gidMap_ = std::to_string(::getegid()) + " " + std::to_string(::getegid()) + " 1\n";
  std::error_code ec;
  std::string dir = fs::absolute(spec.dir, ec).lexically_normal().string();
  if (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  root_ = dir + "/root";
  for (const char* sub : {"", "/root", "/upper", "/work"})
    if (::mkdir((dir + sub).c_str(), 0700) != 0 && errno != EEXIST)
      throw std::runtime_error("cannot create " + dir + sub + ": " + std::strerror(errno));

  // This machine's mount points, the topmost of each, outermost first.
  std::ifstream in("/proc/self/mountinfo");
  std::vector<std::pair<std::string, std::string>> points;  // mount point, type
  for (std::string line; std::getline(in, line);) {
    std::istringstream ls(line);
    std::string id, parent, devno, mroot, point, opts, field;
    ls >> id >> parent >> devno >> mroot >> point >> opts;
    while (ls >> field && field != "-") {
    }
    std::string type;
    ls >> type;
    point = unescapeMount(point);
    points.erase(std::remove_if(points.begin(), points.end(), [&](const auto& p) { return p.first == point; }),
                 points.end());
    points.emplace_back(point, type);
  }
  auto special = [&](const std::string& p) {
    return under(p, "/proc") || under(p, "/sys") || under(p, "/dev") || under(p, dir);
  };
  std::vector<std::string> mountPoints;
  for (const auto& pt : points)
    if (!special(pt.first)) mountPoints.push_back(pt.first);
  auto mountBelow = [&](const std::string& p) {
    return std::any_of(mountPoints.begin(), mountPoints.end(),
                       [&](const std::string& m) { return m != p && under(m, p); });
  };
  auto overlayable = [](const std::string& p) { return p.find_first_of(",:\\") == std::string::npos; };
  // Every directory of this machine is the lower layer of an overlay: its files below, the
  // job's writes above. overlayfs cannot stack on a directory with mounts beneath it (in a
  // user namespace they are locked: "failed to clone lowerpath"), so such a directory is
  // rebuilt in a skeleton under SPEC.dir (its symlinks as they are, its files bound read-only)
  // and each of its entries is overlaid on its own, down to the mounts. A directory overlayfs
  // refuses (a path it cannot name, a file system it cannot stack on) is bound read-only:
  // a write there fails rather than reaching it.
  mounts_.push_back({root_, root_, "bind-self", "", 0, ""});
  size_t n = 0;
  std::vector<std::string> placeholders;
  std::function<void(const std::string&)> split = [&](const std::string& host) {
    for (const auto& e : fs::directory_iterator(host, ec)) {
      std::string path = e.path().string();
      if (special(path)) {
        if (host == "/" && (path == "/proc" || path == "/sys" || path == "/dev")) {
          ::mkdir((root_ + path).c_str(), 0755);
          placeholders.push_back(path);
        }
        continue;
      }
      std::string target = root_ + path;
      struct stat st {};
      if (::lstat(path.c_str(), &st) != 0) continue;
      placeholders.push_back(path);
      if (S_ISLNK(st.st_mode)) {
        std::error_code lec;
        fs::path to = fs::read_symlink(path, lec);
        if (!lec) fs::create_symlink(to, target, lec);
      } else if (S_ISREG(st.st_mode)) {
        int fd = ::open(target.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
        if (fd >= 0) ::close(fd);
        mounts_.push_back({path, target, "bind-ro", "", 0, ""});
      } else if (S_ISDIR(st.st_mode)) {
        ::mkdir(target.c_str(), 0755);
        // In a user namespace, overlayfs cannot copy up a directory whose owner is not mapped
        // (EOVERFLOW): one we may write in but do not own (/tmp) is split too, so that its
        // entries are layers of their own and new files in it land in the skeleton.
        bool othersWritable = userNs_ && st.st_uid != ::geteuid() && ::access(path.c_str(), W_OK) == 0;
        if (mountBelow(path) || othersWritable) {
          split(path);
          continue;
        }
        std::string upper = dir + "/upper/" + std::to_string(n), work = dir + "/work/" + std::to_string(n);
        ++n;
        if (!overlayable(path) || !overlayable(upper)) {
          mounts_.push_back({path, target, "bind-ro", "", 0, ""});
          continue;
        }
        if (::mkdir(upper.c_str(), 0755) != 0 || ::mkdir(work.c_str(), 0700) != 0)
          throw std::runtime_error("cannot create " + upper + ": " + std::strerror(errno));
        std::string data = "lowerdir=" + path + ",upperdir=" + upper + ",workdir=" + work;
        if (userNs_) data += ",userxattr";
        mounts_.push_back({"overlay", target, "overlay", data, 0, path});
        layers_.push_back({path, upper, false, {}});
      }
    }
  };
  split("/");
  std::sort(placeholders.begin(), placeholders.end());
  layers_.push_back({"/", root_, true, std::move(placeholders)});
  // /dev: a tmpfs holding the devices a job uses (as bubblewrap's --dev), not the disks.
  mounts_.push_back({"tmpfs", root_ + "/dev", "tmpfs", "mode=0755", MS_NOSUID, ""});
  for (const char* d : {"null", "zero", "full", "random", "urandom", "tty"})
    mounts_.push_back({std::string("/dev/") + d, root_ + "/dev/" + d, "bind-file", "", 0, ""});
  for (const auto& e : fs::directory_iterator("/dev", ec)) {
    std::string name = e.path().filename().string();
    bool gpu = name.rfind("nvidia", 0) == 0 || name == "dxg" || name == "kfd";
    bool gpuDir = name == "dri" || name == "infiniband" || name == "nvidia-caps";
    if (gpu && e.is_character_file(ec)) mounts_.push_back({e.path(), root_ + "/dev/" + name, "bind-file", "", 0, ""});
    if (gpuDir && e.is_directory(ec)) mounts_.push_back({e.path(), root_ + "/dev/" + name, "bind-dir", "", 0, ""});
  }
  mounts_.push_back({"/dev/pts", root_ + "/dev/pts", "bind-dir", "", 0, ""});
  mounts_.push_back({"pts/ptmx", root_ + "/dev/ptmx", "symlink", "", 0, ""});
  mounts_.push_back({"/proc/self/fd", root_ + "/dev/fd", "symlink", "", 0, ""});
  mounts_.push_back({"/proc/self/fd/0", root_ + "/dev/stdin", "symlink", "", 0, ""});
  mounts_.push_back({"/proc/self/fd/1", root_ + "/dev/stdout", "symlink", "", 0, ""});
  mounts_.push_back({"/proc/self/fd/2", root_ + "/dev/stderr", "symlink", "", 0, ""});
  mounts_.push_back({"tmpfs", root_ + "/dev/shm", "tmpfs", "mode=1777", MS_NOSUID | MS_NODEV, ""});
  mounts_.push_back({"/sys", root_ + "/sys", "bind-ro", "", 0, ""});
  mounts_.push_back({"proc", root_ + "/proc", "proc", "", MS_NOSUID | MS_NODEV | MS_NOEXEC, ""});
  for (const auto& w : spec.writable) {
    std::string abs = fs::absolute(w, ec).lexically_normal().string();
    if (abs.size() > 1 && abs.back() == '/') abs.pop_back();
    mounts_.push_back({abs, root_ + abs, "bind", "", 0, ""});
  }
}

bool Sandbox::setUp(int errFd) const {
  if (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0)
    return fail(errFd, "cannot make the mounts private:", "/", errno), false;
  for (const Mount& m : mounts_) {
    const char* t = m.target.c_str();
    int rc = 0;
    if (m.type == "bind-self") {  // the skeleton as a mount point (pivot_root needs one)
      rc = ::mount(t, t, nullptr, MS_BIND, nullptr);
    } else if (m.type == "overlay") {
      rc = ::mount(m.source.c_str(), t, "overlay", 0, m.data.c_str());
      if (rc != 0 && !m.fallbackSource.empty()) {
        rc = ::mount(m.fallbackSource.c_str(), t, nullptr, MS_BIND | MS_REC, nullptr);
        if (rc == 0) ::mount(nullptr, t, nullptr, MS_REMOUNT | MS_BIND | MS_RDONLY, nullptr);
        continue;
      }
    } else if (m.type == "bind" || m.type == "bind-ro" || m.type == "bind-dir" || m.type == "bind-file") {
      if (m.type == "bind-file") {
        int fd = ::open(t, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
        if (fd >= 0) ::close(fd);
      } else if (m.type == "bind-dir") {
        ::mkdir(t, 0755);
      }
      rc = ::mount(m.source.c_str(), t, nullptr, MS_BIND | MS_REC, nullptr);
      // Read-only where it can be: a user namespace may not change some locked flags (then
      // /sys stays as the host has it, writable by root only).
      if (rc == 0 && m.type == "bind-ro") ::mount(nullptr, t, nullptr, MS_REMOUNT | MS_BIND | MS_RDONLY, nullptr);
      if (rc != 0 && (m.type == "bind-file" || m.type == "bind-dir")) rc = 0;  // a device this machine lacks
      if (rc != 0 && m.type == "bind-ro" && errno == ENOENT) rc = 0;           // gone since plan() (a temporary file)
    } else if (m.type == "symlink") {
      rc = ::symlink(m.source.c_str(), t);
    } else {
      if (m.type == "tmpfs") ::mkdir(t, 0755);
      rc = ::mount(m.source.c_str(), t, m.type.c_str(), m.flags, m.data.empty() ? nullptr : m.data.c_str());
    }
    if (rc != 0) return fail(errFd, ("cannot mount " + m.type + " on").c_str(), m.target, errno), false;
  }
  if (!hostNetwork_ && !loopbackUp()) return fail(errFd, "cannot bring up", "lo", errno), false;
  if (::chdir(root_.c_str()) != 0 || ::syscall(SYS_pivot_root, ".", ".") != 0 || ::umount2(".", MNT_DETACH) != 0 ||
      ::chdir("/") != 0)
    return fail(errFd, "cannot enter the overlay", root_, errno), false;
  return true;
}

void Sandbox::run(char** argp, char** envp, const char* cwd, const sigset_t& jobMask, int execPipe, int errFd) const {
  sigset_t passed;
  sigemptyset(&passed);
  for (int s : kPassedOn) sigaddset(&passed, s);
  sigaddset(&passed, SIGCHLD);
  ::sigprocmask(SIG_BLOCK, &passed, nullptr);
  int flags = CLONE_NEWNS | CLONE_NEWPID | (hostNetwork_ ? 0 : CLONE_NEWNET) | (userNs_ ? CLONE_NEWUSER : 0);
  if (::unshare(flags) != 0) {
    int err = errno;
    fail(errFd, "cannot make namespaces:", userNs_ ? "unshare(user, mount, pid)" : "unshare(mount, pid)", err);
    ssize_t w = ::write(execPipe, &err, sizeof err);
    (void)w;
    ::_exit(126);
  }
  if (userNs_ && (!writeFile("/proc/self/setgroups", "deny") || !writeFile("/proc/self/uid_map", uidMap_) ||
                  !writeFile("/proc/self/gid_map", gidMap_))) {
    int err = errno;
    fail(errFd, "cannot map", "the user and group IDs", err);
    ssize_t w = ::write(execPipe, &err, sizeof err);
    (void)w;
    ::_exit(126);
  }
  int statusPipe[2];
  if (::pipe2(statusPipe, O_CLOEXEC) != 0) ::_exit(126);
  // The signals passed on stay blocked (the launcher blocked them) and are taken by
  // sigwaitinfo; PID 1 needs handlers too, or the kernel drops them before they are pending.
  pid_t one = ::fork();
  if (one < 0) ::_exit(126);
  if (one == 0) {
    ::close(statusPipe[0]);
    pidOne(argp, envp, cwd, jobMask, execPipe, statusPipe[1], errFd);
  }
  ::close(statusPipe[1]);
  ::close(execPipe);  // the job's exec reports through PID 1's copy
  waitPassingOn(one);
  int status = 0;
  ssize_t n;
  while ((n = ::read(statusPipe[0], &status, sizeof status)) < 0 && errno == EINTR) {
  }
  if (n != static_cast<ssize_t>(sizeof status)) ::_exit(126);  // PID 1 failed before the job (it said why)
  if (WIFEXITED(status)) ::_exit(WEXITSTATUS(status));
  // The same death as the job's: the launcher sees its signal (no core of this process).
  int sig = WTERMSIG(status);
  rlimit none{0, 0};
  ::setrlimit(RLIMIT_CORE, &none);
  ::signal(sig, SIG_DFL);
  sigset_t one_sig;
  sigemptyset(&one_sig);
  sigaddset(&one_sig, sig);
  ::sigprocmask(SIG_UNBLOCK, &one_sig, nullptr);
  ::kill(::getpid(), sig);
  ::_exit(128 + sig);
}

void Sandbox::pidOne(char** argp, char** envp, const char* cwd, const sigset_t& jobMask, int execPipe, int statusFd,
                     int errFd) const {
  Dispositions saved;
  for (size_t i = 0; i < std::size(kPassedOn); ++i) {
    struct sigaction sa {};
    sa.sa_handler = noop;
    ::sigaction(kPassedOn[i], nullptr, &saved.old[i]);
    if (saved.old[i].sa_handler != SIG_IGN) ::sigaction(kPassedOn[i], &sa, nullptr);
  }
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // the keeper gone (the launcher killed): so is the job
  char here[4096] = "/";               // no cwd asked: the launcher's, the same path in the overlay
  if (!cwd || !*cwd) cwd = ::getcwd(here, sizeof here) ? here : "/";
  if (!setUp(errFd)) {
    int err = EPERM;
    ssize_t w = ::write(execPipe, &err, sizeof err);
    (void)w;
    ::_exit(126);
  }
  pid_t job = ::fork();
  if (job < 0) ::_exit(126);
  if (job == 0) {
    for (size_t i = 0; i < std::size(kPassedOn); ++i) ::sigaction(kPassedOn[i], &saved.old[i], nullptr);
    // A job run as root keeps root's powers over its own namespace, not over the machine's
    // disks: it can neither mount nor unmount (the overlay stays), make device nodes or load
    // modules.
    for (int cap : {CAP_SYS_ADMIN, CAP_MKNOD, CAP_SYS_MODULE, CAP_SYS_RAWIO, CAP_SYS_BOOT})
      ::prctl(PR_CAPBSET_DROP, cap, 0, 0, 0);
    ::sigprocmask(SIG_SETMASK, &jobMask, nullptr);
    int err = 0;
    if (cwd && *cwd && ::chdir(cwd) != 0) err = errno;
    if (err == 0) {
      ::execvpe(argp[0], argp, envp);
      err = errno;
    }
    ssize_t w = ::write(execPipe, &err, sizeof err);
    (void)w;
    ::_exit(err == ENOENT ? 127 : 126);
  }
  ::close(execPipe);
  int status = waitPassingOn(job);
  ssize_t w = ::write(statusFd, &status, sizeof status);
  (void)w;
  ::_exit(0);
}

std::string Sandbox::probe() const {
  int errPipe[2], execPipe[2];
  if (::pipe2(errPipe, O_CLOEXEC) != 0) return std::string("pipe: ") + std::strerror(errno);
  if (::pipe2(execPipe, O_CLOEXEC) != 0) {
    ::close(errPipe[0]);
    ::close(errPipe[1]);
    return std::string("pipe: ") + std::strerror(errno);
  }
  std::string t = "/bin/true";
  char* argv[] = {t.data(), nullptr};
  char* envp[] = {nullptr};
  sigset_t mask, old;
  sigemptyset(&mask);
  for (int s : kPassedOn) sigaddset(&mask, s);
  sigaddset(&mask, SIGCHLD);
  ::pthread_sigmask(SIG_BLOCK, &mask, &old);
  pid_t pid = ::fork();
  if (pid == 0) {
    ::close(errPipe[0]);
    ::close(execPipe[0]);
    run(argv, envp, "/", old, execPipe[1], errPipe[1]);
  }
  ::pthread_sigmask(SIG_SETMASK, &old, nullptr);
  ::close(errPipe[1]);
  ::close(execPipe[1]);
  std::string why;
  char buf[512];
  ssize_t n;
  while ((n = ::read(errPipe[0], buf, sizeof buf)) > 0 || (n < 0 && errno == EINTR))
    if (n > 0) why.append(buf, static_cast<size_t>(n));
  ::close(errPipe[0]);
  ::close(execPipe[0]);
  int status = 0;
  if (pid < 0) return std::string("fork: ") + std::strerror(errno);
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  while (!why.empty() && why.back() == '\n') why.pop_back();
  if (!why.empty()) return why;
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) return "a test job in the sandbox did not run";
  return "";
}

OverlayChanges readOverlayChanges(const std::vector<OverlayLayer>& layers) {
  namespace fs = std::filesystem;
  OverlayChanges out;
  for (const auto& layer : layers) {
    std::error_code ec;
    fs::recursive_directory_iterator it(layer.upper, fs::directory_options::none, ec), end;
    for (; !ec && it != end; it.increment(ec)) {
      std::string rel = it->path().lexically_relative(layer.upper).string();
      std::string abs = layer.mountPoint == "/" ? "/" + rel : layer.mountPoint + "/" + rel;
      struct stat st {};
      if (::lstat(it->path().c_str(), &st) != 0) continue;
      if (layer.skeleton) {  // what the job made where the skeleton stood in for a directory
        if (std::binary_search(layer.placeholders.begin(), layer.placeholders.end(), abs)) continue;
        struct stat here {};
        if (::lstat(abs.c_str(), &here) == 0) continue;
        (S_ISDIR(st.st_mode) ? out.dirs : out.written).push_back(abs);
        continue;
      }
      if (S_ISCHR(st.st_mode) && st.st_rdev == makedev(0, 0)) {
        out.removed.push_back(abs);
      } else if (S_ISDIR(st.st_mode)) {
        // A directory copied up as the parent of a write is not one the job made: made ones
        // are missing below, or opaque (made where the job had removed one).
        char v = 0;
        bool opaque = ::lgetxattr(it->path().c_str(), "user.overlay.opaque", &v, 1) == 1 ||
                      ::lgetxattr(it->path().c_str(), "trusted.overlay.opaque", &v, 1) == 1;
        struct stat below {};
        if (opaque || ::lstat(abs.c_str(), &below) != 0 || !S_ISDIR(below.st_mode)) out.dirs.push_back(abs);
      } else {
        out.written.push_back(abs);
      }
    }
  }
  return out;
}

}  // namespace dlrr::tools
