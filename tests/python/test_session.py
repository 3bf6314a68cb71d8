"""The session core and its strategy objects: one Session class for both modes, holding a
RecordStrategy or a ReplayStrategy; the core never asks which mode it runs, and each strategy
implements every method the interface leaves to the modes."""

import ast
import glob
import inspect
import os
import unittest

import fake_native  # noqa: F401  (puts pyhook/python on sys.path)

import dlrr_hook
from dlrr_hook import native, session
from dlrr_hook.recorder import RecordStrategy
from dlrr_hook.replay import ReplayStrategy
from dlrr_hook.session import Session, Strategy

def required(cls):
    """Strategy methods whose default raises NotImplementedError, as `cls` leaves them."""
    out = []
    for name, fn in vars(Strategy).items():
        if not callable(fn) or name.startswith("__"):
            continue
        if "raise NotImplementedError" in inspect.getsource(fn) and getattr(cls, name) is fn:
            out.append(name)
    return sorted(out)


def strategy_calls(cls):
    """Names the Session's code calls or reads on self.strategy."""
    tree = ast.parse(inspect.getsource(cls))
    names = set()
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Attribute)
                and node.value.attr == "strategy"):
            names.add(node.attr)
    return names


class StrategyInterface(unittest.TestCase):
    def test_each_mode_implements_what_the_interface_leaves_to_it(self):
        self.assertNotEqual(required(Strategy), [])
        self.assertEqual(required(RecordStrategy), [])
        self.assertEqual(required(ReplayStrategy), [])

    def test_the_core_calls_only_what_the_interface_declares(self):
        declared = {name for name in dir(Strategy) if not name.startswith("_")} | {"session"}
        self.assertEqual(strategy_calls(Session) - declared, set())

    def test_the_strategies_are_objects_the_session_holds_not_sessions(self):
        self.assertFalse(issubclass(RecordStrategy, Session))
        self.assertFalse(issubclass(ReplayStrategy, Session))
        self.assertFalse(issubclass(ReplayStrategy, RecordStrategy))

    def test_install_makes_one_session_with_the_mode_strategy(self):
        for mode, cls in ((native.MODE_RECORD, RecordStrategy), (native.MODE_REPLAY, ReplayStrategy)):
            try:
                s = dlrr_hook.install(lib=fake_native.FakeLib(mode=mode))
                self.assertIs(type(s), Session)
                self.assertIs(type(s.strategy), cls)
                self.assertIs(s.strategy.session, s)
            finally:
                dlrr_hook.uninstall()

    def test_the_core_never_asks_which_mode_it_runs(self):
        """No dlrr_mode() test and no record or replay flag in the core: what differs is the
        strategy's (the only mode test is __init__.install's choice of strategy)."""
        source = inspect.getsource(session)
        for needle in ("dlrr_mode() ==", "MODE_RECORD", "MODE_REPLAY", "isinstance(self.strategy", "self.mode",
                       "__init_subclass__"):
            self.assertFalse(needle in source, needle)

    def test_no_module_reads_another_objects_private_members(self):
        """`x._name` in the hook, where x is neither self nor a name bound to self (the patches'
        closures: `hooks = self`, `pf = self`), reaches into another object: only what belongs
        to other projects' objects (torch, numpy, CPython) is allowed, since it has no public
        spelling, and dlrr's own tags on torch's iterators."""
        foreign = {
            "_getframe", "_current_frames", "_exit",  # sys, os
            "_C", "_distributed_c10d", "_pg_group_ranks", "_store_based_barrier", "_schema",  # torch
            "_BaseDataLoaderIter", "_index_sampler", "_next_data", "_num_yielded", "_shutdown_workers",
            "_is_compiling_flag", "_rand", "_bit_generator", "_length_",  # numpy, ctypes
            "_dlrr_iteration", "_dlrr_index",  # dlrr's tags on torch's DataLoader iterators (loaders.py)
            # read with getattr, where an older or newer torch/CPython may lack them
            "_create_work_from_future", "_MultiProcessingDataLoaderIter", "_dataset", "_persistent_workers",
            "_task_info", "_mmap", "_orig_mod", "_identity", "_target", "_inst", "_LRScheduler", "_functorch",
            "_cuda_getCurrentRawStream",
            "_get_tracing_state", "_set_tracing_state",  # torch.jit.trace's state: no public setter
        }
        own_class = {("gpu.py", "digester", "_close"),  # a classmethod completing the instance it made
                     ("explain.py", "Explainer", "_Pause")}
        found = []
        for path in sorted(glob.glob(os.path.join(os.path.dirname(session.__file__), "*.py"))):
            tree = ast.parse(open(path).read())
            selves = {"self", "cls"} | {t.id for n in ast.walk(tree) if isinstance(n, ast.Assign)
                                        and isinstance(n.value, ast.Name) and n.value.id == "self"
                                        for t in n.targets if isinstance(t, ast.Name)}
            name = os.path.basename(path)
            for node in ast.walk(tree):
                # getattr(x, "_name", default) is the same reach, and hides a missing name too
                if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "getattr"
                        and len(node.args) >= 2 and isinstance(node.args[1], ast.Constant)
                        and isinstance(node.args[1].value, str)):
                    attr = node.args[1].value
                    owner = ast.unparse(node.args[0])
                    if (attr.startswith("_") and not attr.startswith("__") and attr not in foreign
                            and owner not in selves and (name, owner, attr) not in own_class):
                        found.append("%s: getattr(%s, %r)" % (name, owner, attr))
                    continue
                if not (isinstance(node, ast.Attribute) and node.attr.startswith("_")
                        and not node.attr.startswith("__")) or node.attr in foreign:
                    continue
                owner = ast.unparse(node.value)
                if owner in selves or (name, owner, node.attr) in own_class:
                    continue
                found.append("%s: %s.%s" % (name, owner, node.attr))
        self.maxDiff = None
        self.assertEqual(found, [])


if __name__ == "__main__":
    unittest.main()
