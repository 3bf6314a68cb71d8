"""The session core and its strategies: each mode implements the strategy methods and may
extend the extension points (session.STRATEGY, EXTENSIONS), nothing else of the core; a
method overridden outside them is refused when the class is defined."""

import unittest

import fake_native  # noqa: F401  (puts interpose/python on sys.path)

from dlrr_hook import session
from dlrr_hook.recorder import Recorder
from dlrr_hook.replay import Replayer
from dlrr_hook.session import EXTENSIONS, STRATEGY, Session


def core_methods_replaced(cls):
    return sorted(name for name in vars(cls) if name in vars(Session) and not name.startswith("__"))


class StrategyInterface(unittest.TestCase):
    def test_the_interface_names_methods_of_the_core(self):
        missing = [name for name in list(STRATEGY) + list(EXTENSIONS) if not callable(vars(Session).get(name))]
        self.assertEqual(missing, [])
        self.assertEqual(set(STRATEGY) & set(EXTENSIONS), set())

    def test_the_core_leaves_the_strategy_to_the_modes(self):
        with self.assertRaises(NotImplementedError):
            Session.snapshot_rng(None)

    def test_record_implements_the_strategy_and_nothing_else(self):
        self.assertEqual(core_methods_replaced(Recorder), sorted(STRATEGY))

    def test_replay_implements_the_strategy_and_extends_every_extension_point(self):
        self.assertEqual(core_methods_replaced(Replayer), sorted(list(STRATEGY) + list(EXTENSIONS)))
        self.assertEqual(session.overridden_core_methods(Replayer), [])

    def test_replay_is_not_a_recorder(self):
        self.assertFalse(issubclass(Replayer, Recorder))

    def test_a_core_method_overridden_by_mistake_is_refused(self):
        with self.assertRaisesRegex(TypeError, "_digest_gradients"):
            class Wrong(Session):
                def _digest_gradients(self):
                    pass

        class Right(Recorder):
            def end_step(self, step, loss):
                super().end_step(step, loss)
        self.assertTrue(issubclass(Right, Session))


if __name__ == "__main__":
    unittest.main()
