"""Replay and preflight cannot touch the user's files (issue 27, items 1 and 2; docs/reliability.md
"What a replay can touch"): a job that writes through paths the libc hooks cannot see (a symlink
it made, /proc/self/cwd, /dev/fd, /dev/shm, chown, setxattr, fchmod on a read-only descriptor, a
static binary, a raw syscall) leaves every file of the user's bit-identical (contents, mode,
owner, mtime, extended attributes, symlinks) after dlreplay and after dlpreflight, because the
job runs on an overlay in its own mount namespace; the report lists what it wrote from the
overlay. A non-empty --scratch is refused."""
import json
import os
import shutil
import subprocess
import tempfile
import unittest

from harness import PY, TraceTestCase, run, tool

JOB = os.path.join(os.path.dirname(os.path.abspath(__file__)), "jobs", "files", "escape_job.py")
FILES = {"runs/r1/ckpt_old.pt": b"old", "runs/r1/ckpt_best.pt": b"best", "notes.txt": b"notes",
         "todo.txt": b"todo", "data.txt": b"data", "mode.txt": b"mode", "owned.txt": b"owned",
         "victim.txt": b"victim", "static.txt": b"static target", "static_victim.txt": b"static victim"}
STATIC_SRC = r"""
#include <fcntl.h>
#include <unistd.h>
int main(int argc, char** argv) {
  (void)argc;
  int fd = open(argv[1], O_WRONLY | O_TRUNC);
  if (fd >= 0) { if (write(fd, "static\n", 7) < 0) return 2; close(fd); }
  return unlink(argv[2]) == 0 ? 0 : 1;
}
"""


def make_tree(root):
    for rel, data in FILES.items():
        p = os.path.join(root, rel)
        os.makedirs(os.path.dirname(p), exist_ok=True)
        with open(p, "wb") as f:
            f.write(data)
        os.chmod(p, 0o444 if rel == "mode.txt" else 0o644)
        os.utime(p, ns=(1_600_000_000_000_000_000, 1_600_000_000_000_000_000))


def state(root):
    """Everything a write could change: per path, type, contents or link target, mode, owner,
    mtime, extended attributes."""
    out = {}
    for d, dirs, names in os.walk(root):
        for n in dirs + names:
            p = os.path.join(d, n)
            st = os.lstat(p)
            if os.path.islink(p):
                body = "-> " + os.readlink(p)
            elif os.path.isdir(p):
                body = "dir"
            else:
                with open(p, "rb") as f:
                    body = f.read()
            try:
                xattrs = sorted((a, os.getxattr(p, a, follow_symlinks=False)) for a in os.listxattr(p, follow_symlinks=False))
            except OSError:
                xattrs = None
            mtime = None if os.path.isdir(p) else st.st_mtime_ns
            out[os.path.relpath(p, root)] = (body, st.st_mode, st.st_uid, st.st_gid, mtime, xattrs)
    return out


def static_helper(where):
    """A statically linked helper (gcc -static), or busybox-static's cp... None if neither."""
    if shutil.which("gcc"):
        src = os.path.join(where, "helper.c")
        with open(src, "w") as f:
            f.write(STATIC_SRC)
        out = os.path.join(where, "static_helper")
        if subprocess.run(["gcc", "-static", "-O1", "-o", out, src], capture_output=True).returncode == 0:
            return out
    return None


# Set by scripts/torch2.sh: its chroot's / is not a mount point, so no mount namespace can be
# made there and dlreplay says "isolation: libc hooks only (weak)"; the sandbox is tested on
# the main platform, where these tests must pass.
NO_SANDBOX_HERE = ("scripts/torch2.sh's chroot, whose / is not a mount point"
                   if os.environ.get("DLRR_TEST_CHROOT") else "")


class IsolationTest(TraceTestCase):

    def setUp(self):
        if NO_SANDBOX_HERE:
            self.skipTest("no kernel sandbox on this platform: " + NO_SANDBOX_HERE)
        super().setUp()
        self.user = os.path.join(self.tmp, "user")
        fd, self.shm = tempfile.mkstemp(prefix="dlrr-it-", dir="/dev/shm")
        os.write(fd, b"user's shared memory")
        os.close(fd)
        self.helper = static_helper(self.tmp)

    def tearDown(self):
        for p in (self.shm, self.shm + ".new"):
            if os.path.exists(p):
                os.unlink(p)
        super().tearDown()

    def job(self):
        return [PY, JOB, self.shm] + ([self.helper] if self.helper else [])

    def fresh_tree(self):
        shutil.rmtree(self.user, ignore_errors=True)
        make_tree(self.user)
        with open(self.shm, "wb") as f:
            f.write(b"user's shared memory")
        if os.path.exists(self.shm + ".new"):
            os.unlink(self.shm + ".new")
        with open(self.shm, "rb") as f:
            return state(self.user), f.read()

    def assert_untouched(self, before, p):
        tree, shm = before
        self.assertEqual(state(self.user), tree, p.stderr[-3000:])
        with open(self.shm, "rb") as f:
            self.assertEqual(f.read(), shm, p.stderr[-3000:])
        self.assertFalse(os.path.exists(self.shm + ".new"), p.stderr[-3000:])

    def test_the_recording_really_writes_there(self):
        # The job's operations do change the files when it runs for real (so the tests below
        # would see a write that escaped).
        before = self.fresh_tree()
        p = run(self.job(), cwd=self.user)
        self.assertEqual(p.returncode, 0, p.stderr)
        after = state(self.user)
        self.assertNotEqual(after, before[0])
        self.assertNotIn("runs/r1/ckpt_old.pt", after)
        self.assertEqual(after["runs/r1/ckpt_best.pt"][0], b"new checkpoint")
        self.assertEqual(after["data.txt"][0], b"overwritten through /dev/fd")
        self.assertNotIn("victim.txt", after)
        self.assertEqual(after["mode.txt"][1] & 0o777, 0o600)
        if self.helper:
            self.assertNotIn("static_victim.txt", after)

    def test_replay_leaves_every_file_as_it_was(self):
        self.fresh_tree()
        p = run([tool("dlrecord"), "-o", self.trace_path(), "--"] + self.job(), cwd=self.user)
        self.assertEqual(p.returncode, 0, p.stderr)
        recorded = p.stdout
        before = self.fresh_tree()
        p = run([tool("dlreplay"), self.trace_path(), "--until", "end", "--json"], cwd=self.user)
        self.assert_untouched(before, p)
        self.assertEqual(p.returncode, 0, p.stderr)
        # The job did what it did when recorded (its writes succeeded, on the overlay).
        self.assertEqual(p.stdout.rsplit("done", 1)[0], recorded.rsplit("done", 1)[0])
        doc = json.loads(p.stdout.rstrip("\n").rsplit("\n", 1)[-1])
        files = doc["files"]
        self.assertTrue(files["isolation"].startswith("kernel:"), files["isolation"])
        # What reached the overlay is listed, whatever call made it.
        self.assertIn(os.path.join(self.user, "victim.txt"), files["deleted"])
        self.assertIn(os.path.join(self.user, "data.txt"), files["written"])
        if self.helper:
            self.assertIn(os.path.join(self.user, "static_victim.txt"), files["deleted"])
        text = run([tool("dlreplay"), self.trace_path(), "--until", "end"], cwd=self.user)
        self.assertIn("dlreplay: isolation: kernel:", text.stderr)
        self.assert_untouched(before, text)

    def test_preflight_leaves_every_file_as_it_was(self):
        before = self.fresh_tree()
        p = run([tool("dlpreflight"), "--json", "--"] + self.job(), cwd=self.user)
        self.assert_untouched(before, p)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("rotate ok", p.stdout)
        doc = json.loads(p.stdout.rstrip("\n").rsplit("\n", 1)[-1])
        self.assertTrue(doc["isolation"].startswith("kernel:"), doc["isolation"])
        self.assertIn(os.path.join(self.user, "victim.txt"), doc["overlay_removed"])
        self.assertIn("isolation: kernel:", p.stderr)

    def test_without_namespaces_every_report_says_isolation_is_weak(self):
        self.fresh_tree()
        p = run([tool("dlrecord"), "-o", self.trace_path(), "--"] + self.job(), cwd=self.user)
        self.assertEqual(p.returncode, 0, p.stderr)
        weak = {"DLRR_NO_SANDBOX": "1"}
        p = run([tool("dlreplay"), self.trace_path(), "--until", "end"], cwd=self.user, env=weak)
        self.assertIn("dlreplay: isolation: libc hooks only (weak): DLRR_NO_SANDBOX is set", p.stderr)
        p = run([tool("dlreplay"), self.trace_path(), "--until", "end", "--json"], cwd=self.user, env=weak)
        doc = json.loads(p.stdout.rstrip("\n").rsplit("\n", 1)[-1])
        self.assertEqual(doc["files"]["isolation"], "libc hooks only (weak): DLRR_NO_SANDBOX is set")
        p = run([tool("dlpreflight"), "--", PY, "-c", "import torch"], cwd=self.user, env={"DLRR_NO_SANDBOX": "1"})
        self.assertIn("isolation: libc hooks only (weak): DLRR_NO_SANDBOX is set", p.stderr)

    def test_a_scratch_directory_that_is_not_empty_is_refused(self):
        self.fresh_tree()
        p = run([tool("dlrecord"), "-o", self.trace_path(), "--"] + self.job(), cwd=self.user)
        self.assertEqual(p.returncode, 0, p.stderr)
        before = self.fresh_tree()
        p = run([tool("dlreplay"), self.trace_path(), "--until", "end", "--scratch", "."], cwd=self.user)
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn("--scratch . is not empty; give a new or empty directory", p.stderr)
        self.assert_untouched(before, p)

    def test_the_network_is_loopback_only_unless_asked(self):
        code = ("import socket\n"
                "s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
                "try:\n"
                "    s.connect(('192.0.2.1', 9)); print('route')\n"
                "except OSError:\n"
                "    print('no route')\n"
                "l = socket.socket(); l.bind(('127.0.0.1', 0)); l.listen(); print('loopback')\n")
        p = run([tool("dlrecord"), "-o", self.trace_path(), "--", PY, "-c", code], cwd=self.tmp)
        self.assertEqual(p.returncode, 0, p.stderr)
        p = run([tool("dlreplay"), self.trace_path()], cwd=self.tmp)
        self.assertIn("no route", p.stdout, p.stderr)
        self.assertIn("loopback", p.stdout, p.stderr)
        if "route\n" in run([PY, "-c", code]).stdout:  # only where this machine has a route
            p = run([tool("dlreplay"), self.trace_path(), "--net", "host"], cwd=self.tmp)
            self.assertIn("route\n", p.stdout, p.stderr)


if __name__ == "__main__":
    unittest.main()


PATHS_JOB = os.path.join(os.path.dirname(os.path.abspath(__file__)), "jobs", "files", "paths_job.py")


class ReplayPathsTest(TraceTestCase):
    """Issue 27, item 6: a symlink to a directory the job made and removes, and ../cfg.txt from
    a directory it made, behave in replay as they did when recorded."""

    def setUp(self):
        if NO_SANDBOX_HERE:  # the kernel's path resolution inside the sandbox makes them right
            self.skipTest("no kernel sandbox on this platform: " + NO_SANDBOX_HERE)
        super().setUp()

    def fresh(self):
        user = os.path.join(self.tmp, "user")
        shutil.rmtree(user, ignore_errors=True)
        os.makedirs(os.path.join(user, "datadir"))
        for n in ("a.txt", "b.txt"):
            with open(os.path.join(user, "datadir", n), "w") as f:
                f.write(n)
        with open(os.path.join(user, "cfg.txt"), "w") as f:
            f.write("lr=0.1")
        return user

    def test_symlink_to_a_directory_and_dotdot_from_a_made_directory(self):
        user = self.fresh()
        p = run([tool("dlrecord"), "-q", "-o", self.trace_path(), "--", PY, PATHS_JOB], cwd=user)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("link True True ['a.txt', 'b.txt']", p.stdout)
        recorded = p.stdout
        user = self.fresh()
        before = state(user)
        p = run([tool("dlreplay"), self.trace_path(), "--until", "end"], cwd=user)
        self.assertEqual(p.stdout, recorded, p.stderr)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(state(user), before)


class ExclusiveRecordTest(TraceTestCase):
    """Issue 27, item 6: two dlrecord -o SAME started together: one records, the other is
    refused (the launcher stream's name is created with O_EXCL), never both into one trace."""

    def test_two_dlrecords_into_one_directory(self):
        both = []
        for i in range(20):
            t = os.path.join(self.tmp, "t%d" % i)
            ps = [subprocess.Popen([tool("dlrecord"), "-q", "-o", t, "--", "true"], stdout=subprocess.DEVNULL,
                                   stderr=subprocess.PIPE, text=True) for _ in range(2)]
            results = [(p.wait(), p.stderr.read()) for p in ps]
            for p in ps:
                p.stderr.close()
            codes = sorted(rc for rc, _ in results)
            if codes == [0, 0]:
                both.append(i)
            else:
                self.assertEqual(codes, [0, 2], results)
                refused = [err for rc, err in results if rc == 2][0]
                self.assertRegex(refused, "already holds a trace|is being recorded by another dlrecord")
        self.assertEqual(both, [], "both dlrecords recorded into one trace")


NOBODY = 65534


def can_setpriv():
    if os.geteuid() != 0 or not shutil.which("setpriv"):
        return False
    p = subprocess.run(["setpriv", "--reuid=%d" % NOBODY, "--regid=%d" % NOBODY, "--clear-groups", "true"],
                       capture_output=True)
    return p.returncode == 0


class NonRootIsolationTest(IsolationTest):
    """The same as a user who is not root (a user namespace maps them; overlayfs cannot stack on
    directories with mounts below in one, so those are rebuilt around the mounts)."""

    def setUp(self):
        if not can_setpriv():
            self.skipTest("needs root and setpriv to run as nobody")
        super().setUp()
        os.chmod(self.tmp, 0o755)
        os.chown(self.tmp, NOBODY, NOBODY)
        os.chown(self.shm, NOBODY, NOBODY)
        if self.helper:
            os.chown(self.helper, NOBODY, NOBODY)

    def fresh_tree(self):
        got = super().fresh_tree()
        for d, dirs, names in os.walk(self.user):
            for n in dirs + names:
                os.lchown(os.path.join(d, n), NOBODY, NOBODY)
        os.lchown(self.user, NOBODY, NOBODY)
        return state(self.user), got[1]

    def as_nobody(self, argv):
        return ["setpriv", "--reuid=%d" % NOBODY, "--regid=%d" % NOBODY, "--clear-groups",
                "env", "HOME=" + self.tmp, "TMPDIR=" + self.tmp] + argv

    def test_the_recording_really_writes_there(self):
        self.skipTest("shown as root")

    def test_replay_leaves_every_file_as_it_was(self):
        self.fresh_tree()
        p = run(self.as_nobody([tool("dlrecord"), "-o", self.trace_path(), "--"] + self.job()), cwd=self.user)
        self.assertEqual(p.returncode, 0, p.stderr)
        before = self.fresh_tree()
        p = run(self.as_nobody([tool("dlreplay"), self.trace_path(), "--until", "end", "--json"]), cwd=self.user)
        self.assert_untouched(before, p)
        self.assertEqual(p.returncode, 0, p.stderr)
        files = json.loads(p.stdout.rstrip("\n").rsplit("\n", 1)[-1])["files"]
        self.assertTrue(files["isolation"].startswith("kernel:"), files["isolation"])
        self.assertIn(os.path.join(self.user, "victim.txt"), files["deleted"])

    def test_preflight_leaves_every_file_as_it_was(self):
        before = self.fresh_tree()
        p = run(self.as_nobody([tool("dlpreflight"), "--json", "--"] + self.job()), cwd=self.user)
        self.assert_untouched(before, p)
        self.assertEqual(p.returncode, 0, p.stderr)
        doc = json.loads(p.stdout.rstrip("\n").rsplit("\n", 1)[-1])
        self.assertTrue(doc["isolation"].startswith("kernel:"), doc["isolation"])
        self.assertIn(os.path.join(self.user, "victim.txt"), doc["overlay_removed"])

    def test_without_namespaces_every_report_says_isolation_is_weak(self):
        self.skipTest("shown as root")

    def test_a_scratch_directory_that_is_not_empty_is_refused(self):
        self.skipTest("shown as root")

    def test_the_network_is_loopback_only_unless_asked(self):
        self.skipTest("shown as root")
