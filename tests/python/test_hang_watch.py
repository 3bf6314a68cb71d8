"""hang_watch.HangWatch: one CollectiveWait per wait, with the stacks (docs/distributed.md)."""
import threading
import time
import unittest

import support  # puts the hook on sys.path
from dlrr_hook import hang_watch

assert support


class Lib:
    def __init__(self):
        self.waits = []

    def dlrr_collective_wait(self, reason, waiting, seq, op, group, step, c_seq, c_op, c_step, waited_ms, stacks):
        self.waits.append((reason, waiting, seq, op, group, c_seq, c_op, stacks.decode()))


def blocked_in_collective(started, release):
    started.set()
    release.wait(10)


class HangWatchTest(unittest.TestCase):
    def test_threshold_and_setting(self):
        self.assertEqual(hang_watch.hang_after_seconds({}), 60.0)
        self.assertEqual(hang_watch.hang_after_seconds({"DLRR_HANG_AFTER": "0"}), 0.0)
        self.assertEqual(hang_watch.hang_after_seconds({"DLRR_HANG_AFTER": "2.5"}), 2.5)
        self.assertEqual(hang_watch.hang_after_seconds({"DLRR_HANG_AFTER": "soon"}), 60.0)

    def test_one_event_per_wait_with_every_threads_stack(self):
        lib = Lib()
        w = hang_watch.HangWatch(lib, 0.05, lambda: 3)
        w._check(None)
        self.assertEqual(lib.waits, [])  # nothing issued yet: nothing to say
        started, release = threading.Event(), threading.Event()
        t = threading.Thread(target=blocked_in_collective, args=(started, release), name="job")
        t.start()
        started.wait(5)
        w.issue(7, "all_reduce", b"world")
        w._check(None)
        self.assertEqual(lib.waits, [])  # not yet longer than the threshold
        time.sleep(0.1)
        w._check(None)
        w._check(None)
        w._check(hang_watch.TERMINATED)  # already said for this wait
        self.assertEqual(len(lib.waits), 1)
        reason, waiting, seq, op, group, c_seq, _, stacks = lib.waits[0]
        self.assertEqual((reason, waiting, seq, op, group, c_seq), (hang_watch.HANG, 1, 7, b"all_reduce", b"world", -1))
        self.assertIn("Thread job:", stacks)
        self.assertIn("in blocked_in_collective", stacks)
        self.assertIn("release.wait(10)", stacks)
        release.set()
        t.join()
        # Completed, then nothing for longer than the threshold: stalled, once; SIGTERM after a
        # new wait began is said too.
        w.complete(7, "all_reduce")
        time.sleep(0.1)
        w._check(None)
        w._check(None)
        self.assertEqual([x[0] for x in lib.waits], [hang_watch.HANG, hang_watch.STALLED])
        self.assertEqual(lib.waits[1][5:7], (7, b"all_reduce"))
        w.issue(8, "barrier", b"world")
        w._check(hang_watch.TERMINATED)
        self.assertEqual(lib.waits[2][:4], (hang_watch.TERMINATED, 1, 8, b"barrier"))


if __name__ == "__main__":
    unittest.main()
