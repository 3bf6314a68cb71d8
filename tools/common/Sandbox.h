#pragma once
// Isolation the kernel enforces for a replayed or preflighted job (docs/reliability.md, "What a
// replay can touch"): the job runs in its own mount, PID and (by default) network namespace,
// and in a user namespace when dlrr is not run as root. Its root is an overlay of this
// machine's file systems: reads see them, every write (whatever path or call it takes: libc,
// a raw syscall, a static binary, /proc/self/cwd, /dev/fd) lands in an upper directory under
// the scratch directory. /dev/shm is a private tmpfs, /proc is the job's own PID namespace's,
// /sys is read-only, and the network is loopback only unless asked.
//
// Why hand-made with the kernel's calls rather than bubblewrap or unshare(1) (docs/design.md,
// "Isolation"): Debian 12's bubblewrap 0.8 has no overlay mounts, and bubblewrap, unshare(1)
// and tini all report a job killed by a signal as exit status 128+N, which dlreplay's verdict
// could not tell from an exit (a replayed crash must die of the recorded signal). The job here
// is not PID 1 either: PID 1 ignores signals it has no handler for (os.abort() would no longer
// end it with SIGABRT).
//
// Process layout: the launcher's child (the "keeper", still in the launcher's PID namespace)
// unshares the namespaces and forks PID 1 of the new PID namespace, which sets up the mounts,
// pivots into the overlay and forks the job. PID 1 passes on signals and hands the job's wait
// status to the keeper through a pipe; the keeper ends the same way (the same exit code or
// the same signal), so the launcher sees the job's own status.
#include <sys/types.h>

#include <string>
#include <vector>

namespace dlrr::tools {

struct SandboxSpec {
  std::string dir;                    // where the overlay's upper and work directories go (made here)
  std::vector<std::string> writable;  // host directories the job writes through to (scratch, report, trace)
  bool hostNetwork = false;           // false: a network namespace with loopback only
};

// One overlaid directory: where the job sees it and its upper directory (for the report). The
// skeleton (the directories rebuilt around mounts, where new entries of theirs land) is one
// too, with `skeleton` set: only what this machine lacks there is the job's.
struct OverlayLayer {
  std::string mountPoint, upper;
  bool skeleton = false;
  // The skeleton's own entries (host paths, sorted): made at set-up for what this machine had
  // then. Never the job's, even once the machine's entry is gone (another process removed it
  // while the job ran).
  std::vector<std::string> placeholders;
};

// Everything the forked side needs, built before fork (after it, no allocation).
class Sandbox {
 public:
  // Reads this machine's mounts and makes SPEC.dir's upper/work directories. Throws
  // std::runtime_error when they cannot be made.
  explicit Sandbox(const SandboxSpec& spec);
  Sandbox(const Sandbox&) = delete;
  Sandbox& operator=(const Sandbox&) = delete;

  // Runs /bin/true inside: "" when the namespaces and mounts can be made here, else why not
  // (e.g. "unprivileged user namespaces are disabled: unshare: Operation not permitted").
  std::string probe() const;

  // In the launcher's forked child, instead of exec: never returns. Failures before the job
  // runs are written to `errFd` (a line of text) or stderr, then the child exits 126.
  [[noreturn]] void run(char** argp, char** envp, const char* cwd, const sigset_t& jobMask, int execPipe,
                        int errFd) const;

  const std::vector<OverlayLayer>& layers() const { return layers_; }

 private:
  struct Mount {
    std::string source, target, type, data;
    unsigned long flags = 0;
    std::string fallbackSource;  // overlay failed: bind this read-only instead ("" = required)
  };
  void plan(const SandboxSpec& spec);
  [[noreturn]] void pidOne(char** argp, char** envp, const char* cwd, const sigset_t& jobMask, int execPipe,
                           int statusFd, int errFd) const;
  bool setUp(int errFd) const;

  bool userNs_ = false;
  bool hostNetwork_ = false;
  std::string root_;  // the new root's mount point
  std::string uidMap_, gidMap_;
  std::vector<Mount> mounts_;
  std::vector<OverlayLayer> layers_;
};

// What the job changed, read from the overlay's upper directories: files (and symlinks)
// written, paths removed (whiteouts), directories made. Absolute paths as the job saw them.
struct OverlayChanges {
  std::vector<std::string> written, removed, dirs;
};
OverlayChanges readOverlayChanges(const std::vector<OverlayLayer>& layers);

}  // namespace dlrr::tools
