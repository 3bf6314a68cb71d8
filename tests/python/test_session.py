"""The session core and its strategy objects: one Session class for both modes, holding a
RecordStrategy or a ReplayStrategy; the core never asks which mode it runs, and each strategy
implements every method the interface leaves to the modes."""

import ast
import inspect
import unittest

import fake_native  # noqa: F401  (puts interpose/python on sys.path)

import dlrr_hook
from dlrr_hook import native, recorder, replay, session
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
            self.assertNotIn(needle, source)

    def test_no_module_reads_another_objects_private_members(self):
        """`x._name` where x is not self, cls or a name bound to self in a closure (the
        patches' `hooks`, `tracker`, ...): the strategies use the Session's public members."""
        for module in (session, recorder, replay):
            tree = ast.parse(inspect.getsource(module))
            found = []
            for node in ast.walk(tree):
                if (isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__")
                        and isinstance(node.value, ast.Attribute)
                        and node.value.attr in ("session", "loaders", "modules", "training", "marshal", "strategy",
                                                "steps", "rng", "gpu", "values", "registry", "dist")):
                    found.append("%s.%s.%s" % (ast.unparse(node.value.value), node.value.attr, node.attr))
            self.assertEqual(found, [], module.__name__)


if __name__ == "__main__":
    unittest.main()
