"""Data-less replay (docs/replay.md "Files"): jobs whose main process reads its data files
(torchvision MNIST and ImageFolder, an index read in Dataset.__init__, an .npz, an np.memmap
sliced without a DataLoader) are recorded, their data is moved away, and replay reaches the
recorded NaN bit-exactly from the files the trace serves. A job that saves checkpoints is
replayed without touching the recording's files."""
import hashlib
import json
import os
import shutil
import struct
import tempfile

import numpy as np
import torch

from harness import PY, TraceTestCase, events, run, tool


JOBS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "jobs", "files")


def job(name):
    return os.path.join(JOBS, name)


def replay(trace, *args, env=None):
    p = run([tool("dlreplay"), trace, "--json"] + list(args), env=env)
    last = p.stdout.rstrip("\n").rsplit("\n", 1)[-1]
    doc = json.loads(last) if last.startswith("{") else None
    return p, doc


def tree_state(root):
    """path -> (sha256, mtime_ns) of every file under root."""
    out = {}
    for d, _, names in os.walk(root):
        for n in names:
            p = os.path.join(d, n)
            with open(p, "rb") as f:
                out[p] = (hashlib.sha256(f.read()).hexdigest(), os.stat(p).st_mtime_ns)
    return out


def write_mnist(root, n):
    """IDX files where torchvision 0.14's MNIST looks for them (root/MNIST/raw)."""
    raw = os.path.join(root, "MNIST", "raw")
    os.makedirs(raw)
    rng = np.random.default_rng(1)
    images = rng.integers(0, 256, size=(n, 28, 28), dtype=np.uint8)
    labels = rng.integers(0, 10, size=n, dtype=np.uint8)
    for split, m in (("train", n), ("t10k", n // 2)):
        with open(os.path.join(raw, "%s-images-idx3-ubyte" % split), "wb") as f:
            f.write(struct.pack(">IIII", 2051, m, 28, 28) + images[:m].tobytes())
        with open(os.path.join(raw, "%s-labels-idx1-ubyte" % split), "wb") as f:
            f.write(struct.pack(">II", 2049, m) + labels[:m].tobytes())


TORCH_TEMPLATE = "_remote_module_non_scriptable"


def only_torch_template(files):
    """Whether the scratch directory holds torch 2.x's own write and nothing else: importing
    torch.distributed.nn.jit generates _remote_module_non_scriptable.py into a fresh
    tempfile.TemporaryDirectory and imports it (Python 3.13 then writes its .pyc); the finalizer
    that removes the directory does not run when replay stops the job (--until nan) or in a
    spawned child, so replay keeps it in the scratch directory (issue 19)."""
    if not files["scratch"] or files["deleted"]:
        return False
    paths = files["written"] + files["dirs"] + [q for r in files["renamed"] for q in r.split(" -> ")]
    roots = set()
    for q in paths:
        if os.path.basename(q).startswith(TORCH_TEMPLATE):
            d = os.path.dirname(q)
            roots.add(os.path.dirname(d) if os.path.basename(d) == "__pycache__" else d)
    tmp = tempfile.gettempdir()
    return bool(roots) and all(os.path.dirname(r) == tmp for r in roots) and \
        all(any(q == r or q.startswith(r + "/") for r in roots) for q in paths)


class DatalessReplayTest(TraceTestCase):

    def record(self, script, *args, env=None):
        p = run([tool("dlrecord"), "-o", self.trace_path(), "--", PY, job(script)] + [str(a) for a in args], env=env)
        self.assertEqual(p.returncode, 0, p.stderr)
        return p

    def replay_to_nan(self, nan_step, data_paths, where=r"at module 0 \(\w+\) \(call 0\) of step %d"):
        """Replays to the NaN with the data gone; returns the JSON report's files section."""
        p, doc = replay(self.trace_path(), "--until", "nan")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(doc["outcome"], "reached", p.stderr)
        self.assertEqual(doc["verified_steps"], nan_step, p.stderr)  # every step before it, bit-exact
        self.assertEqual(doc["report"]["stop.step"], nan_step, p.stderr)
        self.assertRegex(doc["report"]["stop.where"], where % nan_step)  # an nn.Sequential's child: "0 (Conv2d)"
        files = doc["files"]
        for path in data_paths:
            self.assertIn(path, files["served"], p.stderr)
        for path in data_paths:
            self.assertFalse(os.path.exists(path))  # served, never recreated in place
        # The job wrote nothing of its own: no directory left behind (but torch 2.x's template).
        if not only_torch_template(files):
            self.assertEqual(files["scratch"], "", json.dumps(files, indent=1) + p.stderr[-3000:])
        # The text report names what was served.
        text = run([tool("dlreplay"), self.trace_path(), "--until", "nan"])
        self.assertEqual(text.returncode, 0, text.stderr)
        self.assertIn("dlreplay: files: served %d path(s) from the trace" % len(files["served"]), text.stderr)
        self.assertIn(data_paths[0], text.stderr)
        return files

    def test_torchvision_mnist(self):
        root = os.path.join(self.tmp, "data")
        write_mnist(root, 96)
        self.record("mnist_job.py", root, 4)
        shutil.move(root, root + ".away")
        raw = os.path.join(root, "MNIST", "raw")
        self.replay_to_nan(4, [os.path.join(raw, "train-images-idx3-ubyte"),
                               os.path.join(raw, "train-labels-idx1-ubyte")])

    def test_without_the_served_files_replay_fails_as_the_job_would(self):
        # The check that the served files are what made replay possible.
        root = os.path.join(self.tmp, "data")
        write_mnist(root, 96)
        self.record("mnist_job.py", root, 4)
        shutil.move(root, root + ".away")
        p, doc = replay(self.trace_path(), "--until", "nan", "--serve-files", "never")
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("RuntimeError: Dataset not found", p.stderr)

    def test_imagefolder(self):
        from PIL import Image
        root = os.path.join(self.tmp, "images")
        rng = np.random.default_rng(2)
        for c in ("cat", "dog", "fox"):
            os.makedirs(os.path.join(root, c))
            for i in range(6):
                pixels = rng.integers(0, 256, size=(8, 8, 3), dtype=np.uint8)
                Image.fromarray(pixels).save(os.path.join(root, c, "%d.png" % i))
        self.record("imagefolder_job.py", root, 6)
        shutil.move(root, root + ".away")
        files = self.replay_to_nan(6, [root, os.path.join(root, "dog")])
        self.assertFalse(any(p.endswith(".png") for p in files["served"]),
                         "images are read while a batch is fetched: replay serves the batch instead")

    def test_index_json_csv_and_npz(self):
        root = os.path.join(self.tmp, "indexed")
        os.makedirs(root)
        rng = np.random.default_rng(3)
        np.savez(os.path.join(root, "features.npz"), x=rng.standard_normal((40, 5)).astype(np.float32))
        with open(os.path.join(root, "labels.json"), "w") as f:
            json.dump({"classes": ["a", "b", "c"]}, f)
        with open(os.path.join(root, "index.csv"), "w") as f:
            f.write("row,label\n" + "".join("%d,%s\n" % (i, "abc"[i % 3]) for i in range(40)))
        self.record("index_job.py", root, 7)
        shutil.move(root, root + ".away")
        self.replay_to_nan(7, [os.path.join(root, n) for n in ("features.npz", "labels.json", "index.csv")])

    def test_memmap_language_model_records_the_bytes_used_not_the_file(self):
        path = os.path.join(self.tmp, "tokens.bin")
        size = 8 << 20  # 4 Mi tokens
        np.random.default_rng(4).integers(0, 512, size=size // 2, dtype=np.uint16).tofile(path)
        iters, nan_step = 12, 9
        self.record("memmap_lm_job.py", path, nan_step, iters, env={"DLRR_FILES_WHOLE_MAX": str(1 << 20)})
        facts = [e["event"]["file"] for e in events(self.trace_path(), kind="file")]
        used = sum(int(f["data"]["size"]) for f in facts if f["path"] == path)
        # get_batch() reads batch x (block + 1) tokens per iteration (x and y overlap but for one).
        at_most = iters * 4 * 2 * 32 * 2
        self.assertGreater(used, 0)
        self.assertLessEqual(used, at_most)
        trace_bytes = sum(os.path.getsize(os.path.join(self.trace_path(), n)) for n in os.listdir(self.trace_path()))
        self.assertLess(trace_bytes, size // 8, "the trace grows by the bytes used, not the file size")
        shutil.move(path, path + ".away")
        self.replay_to_nan(nan_step, [path], where=r"before backward\(\) of step %d")

    def test_large_files_read_with_read_and_fread_keep_the_bytes_read(self):
        root = os.path.join(self.tmp, "large")
        os.makedirs(root)
        rng = np.random.default_rng(6)
        np.save(os.path.join(root, "features.npy"), rng.standard_normal((16384, 32)).astype(np.float32))  # 2 MiB
        rng.standard_normal(4 << 20).astype(np.float32).tofile(os.path.join(root, "big.bin"))  # 16 MiB
        self.record("large_read_job.py", root, 5, env={"DLRR_FILES_WHOLE_MAX": str(1 << 20)})
        facts = [e["event"]["file"] for e in events(self.trace_path(), kind="file")]
        kept = {}  # path -> bytes of the file the trace holds (ranges may overlap)
        for f in facts:
            start, size = int(f["offset"]), int(f["data"]["size"])
            kept.setdefault(f["path"], set()).update(range(start, start + size))
        npy = os.path.getsize(os.path.join(root, "features.npy"))
        self.assertEqual(len(kept[os.path.join(root, "features.npy")]), npy)  # read whole: header + fromfile's fread
        big = kept[os.path.join(root, "big.bin")]
        self.assertTrue(set(range(3 << 20, (3 << 20) + (64 << 10))) <= big)
        self.assertLessEqual(len(big), 2 * (64 << 10))  # the read (and a buffer's read-ahead), not 16 MiB
        trace_bytes = sum(os.path.getsize(os.path.join(self.trace_path(), n)) for n in os.listdir(self.trace_path()))
        self.assertLess(trace_bytes, 6 << 20)
        shutil.move(root, root + ".away")
        self.replay_to_nan(5, [os.path.join(root, "features.npy"), os.path.join(root, "big.bin")],
                           where=r"before backward\(\) of step %d")

    def test_a_file_that_exists_is_used_unless_serving_always(self):
        # Tokens that differ from the recording's: used as they are by default (the replay
        # diverges at the first step), replaced by the recorded bytes with --serve-files always.
        path = os.path.join(self.tmp, "tokens.bin")
        np.random.default_rng(4).integers(0, 512, size=1 << 20, dtype=np.uint16).tofile(path)
        self.record("memmap_lm_job.py", path, 5, 8, env={"DLRR_FILES_WHOLE_MAX": "0"})
        np.random.default_rng(5).integers(0, 512, size=1 << 20, dtype=np.uint16).tofile(path)
        p, doc = replay(self.trace_path(), "--until", "nan")
        self.assertEqual(p.returncode, 11, p.stderr)
        self.assertEqual(doc["report"]["divergence.step"], 0, p.stderr)
        self.assertEqual(doc["files"]["served"], [])
        p, doc = replay(self.trace_path(), "--until", "nan", "--serve-files", "always")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(doc["verified_steps"], 5, p.stderr)
        self.assertIn(path, doc["files"]["served"])

    def test_serving_always_never_shadows_the_jobs_own_code(self):
        # An edited helper module of the job's, whose bytes the trace holds: --serve-files always
        # --serve-code served the recorded one over it (the edit silently not run, under a warning
        # that said the replay runs the code as it is now).
        src = os.path.join(self.tmp, "src")
        os.mkdir(src)
        with open(os.path.join(src, "helper.py"), "w") as f:
            f.write("SCALE = 1.0\n")
        with open(os.path.join(src, "job.py"), "w") as f:
            f.write("import torch, helper\ntorch.manual_seed(0)\nm = torch.nn.Linear(4, 1)\n"
                    "opt = torch.optim.SGD(m.parameters(), lr=0.1)\nfor i in range(3):\n"
                    "    loss = m(torch.randn(8, 4)).pow(2).mean() * helper.SCALE\n"
                    "    opt.zero_grad(); loss.backward(); opt.step()\nprint('scale', helper.SCALE)\n")
        p = run([tool("dlrecord"), "-q", "-o", self.trace_path(), "--", PY, "job.py"], cwd=src)
        self.assertEqual(p.returncode, 0, p.stderr)
        with open(os.path.join(src, "helper.py"), "w") as f:
            f.write("SCALE = 2.0\nprint('edited helper', SCALE)\n")
        p = run([tool("dlreplay"), self.trace_path(), "--until", "end", "--serve-files", "always", "--serve-code"],
                cwd=src)
        self.assertIn("edited helper 2.0", p.stdout, p.stderr)
        self.assertIn("helper.py changed since the recording", p.stderr)
        self.assertEqual(p.returncode, 11, p.stderr)  # the edit changes the loss: a divergence

    def test_checkpoints_of_the_recording_are_never_modified(self):
        # The libc layer alone (where namespaces cannot be made): the kernel's overlay, the
        # default, is test_isolation.py's.
        weak = {"DLRR_NO_SANDBOX": "1"}
        out = os.path.join(self.tmp, "run")
        self.record("checkpoint_job.py", out)
        before = tree_state(out)
        self.assertIn(os.path.join(out, "ckpt", "step7.pt"), before)
        self.assertNotIn(os.path.join(out, "ckpt", "step1.pt"), before)  # rotated away
        scratch = os.path.join(self.tmp, "scratch")
        p, doc = replay(self.trace_path(), "--until", "end", "--scratch", scratch, env=weak)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(doc["outcome"], "reached", p.stderr)
        self.assertEqual(tree_state(out), before)  # same bytes, same mtimes
        files = doc["files"]
        self.assertEqual(files["scratch"], scratch)
        ckpt = os.path.join(out, "ckpt", "step7.pt")
        self.assertIn(ckpt, [r.split(" -> ")[1] for r in files["renamed"]])
        # The rotation removed the replay's own step1/step3 (the recording's were gone already).
        self.assertEqual(files["deleted"], [])
        written_ckpt = os.path.join(scratch, "written") + os.path.join(out, "ckpt")
        self.assertEqual(sorted(os.listdir(written_ckpt)), ["step5.pt", "step7.pt"])
        self.assertIn(os.path.join(out, "train.log"), files["written"])
        self.assertIn(os.path.join(out, "losses.npy"), files["written"])
        # The replay's own files are in the scratch directory: the log appended to a copy.
        with open(os.path.join(scratch, "written") + os.path.join(out, "train.log")) as f:
            lines = f.read().splitlines()
        self.assertEqual(len(lines), 16)  # the recording's 8 lines, then the replay's 8
        self.assertEqual(lines[:8], lines[8:])
        import torch
        saved = torch.load(os.path.join(scratch, "written") + ckpt)
        self.assertEqual(saved["step"], 7)
        # The text report says where the writes went.
        scratch2 = os.path.join(self.tmp, "scratch2")
        text = run([tool("dlreplay"), self.trace_path(), "--until", "end", "--scratch", scratch2], env=weak)
        self.assertEqual(text.returncode, 0, text.stderr)
        self.assertIn("the job's writes went to %s/written" % scratch2, text.stderr)
        self.assertIn("(your files were not modified)", text.stderr)
        self.assertEqual(tree_state(out), before)

    def test_multiprocessing_sockets_in_directories_the_replay_made(self):
        self.record("multiprocessing_job.py")
        p, doc = replay(self.trace_path(), "--until", "end")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("manager ok 1", p.stdout)
        self.assertIn("spawn ok True", p.stdout)
        self.assertEqual(doc["verified_steps"], 3, p.stderr)
        self.assertEqual(doc["files"]["written"], [])  # pymp-* and its socket: made and removed
        if not only_torch_template(doc["files"]):
            self.assertEqual(doc["files"]["scratch"], "", json.dumps(doc["files"], indent=1))


class ScratchCleanupTest(TraceTestCase):
    """dlreplay's own scratch directories, kept when the job wrote files, go after 7 days or at
    `dlreplay --clean-scratch`; a --scratch directory, one another replay runs in and one that
    dlreplay did not make stay (issue 32: 33 of them, 216 MiB, in one afternoon)."""

    def test_kept_scratch_directories_are_cleaned(self):
        import fcntl
        import time
        tmpdir = os.path.join(self.tmp, "tmp")  # the replays' TMPDIR: nobody else's directories
        os.mkdir(tmpdir)
        env = {"TMPDIR": tmpdir}
        out = os.path.join(self.tmp, "run")
        p = run([tool("dlrecord"), "-o", self.trace_path(), "--", PY, job("checkpoint_job.py"), out, "4"])
        self.assertEqual(p.returncode, 0, p.stderr)
        week_ago = time.time() - 8 * 86400

        def age(path):  # everything under it a week old (dlreplay reads its mark's time)
            for root, dirs, files in os.walk(path):
                for f in files + dirs:
                    os.utime(os.path.join(root, f), (week_ago, week_ago), follow_symlinks=False)
            os.utime(path, (week_ago, week_ago))

        p = run([tool("dlreplay"), self.trace_path(), "--until", "end"], env=env)
        self.assertEqual(p.returncode, 0, p.stderr)
        kept = [l for l in p.stderr.splitlines() if l.startswith("dlreplay: files: the job's writes went to ")]
        self.assertEqual(len(kept), 1, p.stderr)
        old = kept[0].split(" went to ", 1)[1].split("/written ", 1)[0]
        self.assertEqual(os.path.dirname(old), tmpdir)
        self.assertIn("remove it with 'rm -rf %s', or every replay's with 'dlreplay --clean-scratch' "
                      "(those older than 7 days go at the next replay)" % old, p.stderr)
        age(old)
        mine = os.path.join(tmpdir, "dlreplay-mine00")  # the user's own, named like dlreplay's
        p, doc = replay(self.trace_path(), "--until", "end", "--scratch", mine, env=env)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertNotIn("rm -rf", p.stderr)  # the user's --scratch: theirs to keep
        age(mine)
        mine_files = sorted(os.path.join(r, f) for r, ds, fs in os.walk(mine) for f in fs + ds)
        self.assertTrue(mine_files)
        stranger = os.path.join(tmpdir, "dlreplay-other0")  # not made by dlreplay: no mark
        os.mkdir(stranger)
        age(stranger)
        p, doc = replay(self.trace_path(), "--until", "end", env=env)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("dlreplay: removed 1 scratch directory of replays older than 7 days (", p.stderr)
        self.assertFalse(os.path.exists(old))
        recent = doc["files"]["scratch"]
        for kept in (recent, mine, stranger):
            self.assertTrue(os.path.isdir(kept), kept)
        # A replay running in `recent` (its lock held as dlreplay holds it) keeps it.
        with open(os.path.join(recent, ".dlreplay-scratch")) as mark:
            fcntl.flock(mark, fcntl.LOCK_SH)
            c = run([tool("dlreplay"), "--clean-scratch"], env=env)
        self.assertEqual(c.returncode, 0, c.stderr)
        self.assertIn("in use by a running replay, kept: %s\n" % recent, c.stdout)
        self.assertIn("dlreplay: removed 0 scratch directories in %s (" % tmpdir, c.stdout)
        self.assertTrue(os.path.isdir(recent))
        c = run([tool("dlreplay"), "--clean-scratch"], env=env)
        self.assertEqual(c.returncode, 0, c.stderr)
        self.assertIn("removed %s\n" % recent, c.stdout)
        self.assertIn("dlreplay: removed 1 scratch directory in %s (" % tmpdir, c.stdout)
        self.assertFalse(os.path.exists(recent))
        self.assertEqual(sorted(os.listdir(tmpdir)), ["dlreplay-mine00", "dlreplay-other0"])
        self.assertEqual(sorted(os.path.join(r, f) for r, ds, fs in os.walk(mine) for f in fs + ds), mine_files)
        bad = run([tool("dlreplay"), "--clean-scratch", self.trace_path()], env=env)
        self.assertEqual(bad.returncode, 2)
        self.assertIn("--clean-scratch replays nothing", bad.stderr)
