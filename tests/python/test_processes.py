"""processes.py: the identities the hook gives children (multiprocessing Processes, plain
os.fork() children) so that each records its own stream and replay can find it again."""

import os
import unittest

import fake_native  # noqa: F401  (puts pyhook/python on sys.path)
from dlrr_hook import processes


class ForkNamingTest(unittest.TestCase):
    def setUp(self):
        self.saved = os.environ.pop(processes.ENV, None)
        self.addCleanup(self.restore)

    def restore(self):
        os.environ.pop(processes.ENV, None)
        if self.saved is not None:
            os.environ[processes.ENV] = self.saved

    def test_plain_forks_are_numbered_in_the_parents_order(self):
        naming = processes.ForkNaming()
        for n in (1, 2):
            naming.before()
            self.assertEqual(os.environ[processes.ENV], "fork%d" % n)  # what libdlrr's fork handlers read
            naming.after_in_parent()
            self.assertNotIn(processes.ENV, os.environ)  # the parent's own again

    def test_a_child_keeps_its_name_and_numbers_its_own_forks_under_it(self):
        naming = processes.ForkNaming()
        naming.before()
        naming.after_in_child()
        self.assertEqual(os.environ[processes.ENV], "fork1")
        naming.before()
        self.assertEqual(os.environ[processes.ENV], "fork1:fork1")
        naming.after_in_parent()
        self.assertEqual(os.environ[processes.ENV], "fork1")

    def test_a_multiprocessing_start_names_its_child_itself(self):
        naming = processes.ForkNaming()
        os.environ[processes.ENV] = "dataloader-worker:3"  # what Process.start set
        naming.enter_start(1)
        naming.before()
        self.assertEqual(os.environ[processes.ENV], "dataloader-worker:3")
        naming.after_in_parent()
        naming.enter_start(-1)
        self.assertEqual(os.environ[processes.ENV], "dataloader-worker:3")  # Process.start restores it
        self.assertEqual(naming.forks, 0)

    def test_a_real_fork_carries_the_name_into_the_child(self):
        from dlrr_hook.patching import Patcher
        patcher = Patcher()
        processes.install(patcher)
        self.addCleanup(patcher.restore)
        read_end, write_end = os.pipe()
        pid = os.fork()
        if pid == 0:
            try:
                os.write(write_end, os.environ.get(processes.ENV, "").encode())
            finally:
                os._exit(0)
        os.close(write_end)
        name = os.read(read_end, 100).decode()
        os.close(read_end)
        os.waitpid(pid, 0)
        self.assertRegex(name, r"^fork\d+$")
        self.assertNotIn(processes.ENV, os.environ)

    def test_identity_of_a_process(self):
        self.assertEqual(processes.fork_identity("", 2), "fork2")
        self.assertEqual(processes.fork_identity("1:2", 1), "1:2:fork1")
        self.assertTrue(processes.is_trainer_identity("fork1"))
        self.assertFalse(processes.is_trainer_identity("dataloader-worker:1"))


if __name__ == "__main__":
    unittest.main()
