"""The module tree's fingerprint (_dlrr_native.module_tree_version, pyhook/ext/ModuleTreeVersion.cc)
and the parameter names the hook keeps with it across steps on torch 1.x (ModulePaths.parameters).

Every change that can change root.named_parameters() must change the fingerprint; data changes
must not; a tree the fingerprint cannot speak for gives None.  End to end on the fake library, a
job that reshapes its model between steps must see, at every step, the gradient and parameter
digests named exactly as named_parameters() names them then, and an unchanged model must keep
its names without a new walk.

The extension is the build's (DLRR_TEST_NATIVE_EXT); without it these tests are skipped, saying so.
"""

import sys
import unittest

import fake_native
import torch
from torch import nn

from dlrr_hook import native
from test_native_hooks import EXT, WithExtension, load_extension

HAS_TAGS = sys.version_info < (3, 12)  # ma_version_tag: deprecated from 3.12, where None is answered


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(3, 3)
        self.seq = nn.Sequential(nn.Linear(3, 3), nn.ReLU())

    def forward(self, x):
        return self.seq(self.lin(x))


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = Block()
        self.b = Block()
        self.scale = nn.Parameter(torch.ones(3))

    def forward(self, x):
        second = self._modules.get("b") or self._modules["c"]  # renamed by a change below
        return (second(self.a(x)) * self.scale).sum()


class OwnWalk(Net):
    def named_modules(self, *args, **kwargs):
        return super().named_modules(*args, **kwargs)


def changes():
    """(what, change(model)) pairs: each must change named_parameters() or what it is made of."""
    def replace_parameter(m):
        m.a.lin.weight = nn.Parameter(torch.zeros(3, 3))

    def add_parameter(m):
        m.b.extra = nn.Parameter(torch.ones(2))

    def delete_parameter(m):
        del m.a.seq[0].bias

    def none_parameter(m):
        m.a.lin.register_parameter("bias", None)

    def rename_module(m):
        m.c = m.b
        del m.b

    def replace_deep_module(m):
        m.b.seq[0] = nn.Linear(3, 3)

    def append_module(m):
        m.a.seq.append(nn.Linear(3, 3))

    def new_parameters_dict(m):
        m.b.lin._parameters = dict(m.b.lin._parameters)

    def share_module(m):
        m.b.seq[0] = m.a.seq[0]

    return [(f.__name__, f) for f in (replace_parameter, add_parameter, delete_parameter, none_parameter,
                                      rename_module, replace_deep_module, append_module, new_parameters_dict,
                                      share_module)]


@unittest.skipUnless(EXT, "the native extension was not built for this interpreter (DLRR_TEST_NATIVE_EXT unset)")
class ModuleTreeVersionTest(unittest.TestCase):
    def setUp(self):
        self.version = load_extension().module_tree_version

    @unittest.skipUnless(HAS_TAGS, "Python 3.12+: no dict version tags, the fingerprint is always None")
    def test_every_structural_change_changes_it(self):
        for what, change in changes():
            with self.subTest(what):
                torch.manual_seed(0)
                model = Net()
                before = self.version(model, nn.Module)
                self.assertIsInstance(before, bytes)
                names = [n for n, _ in model.named_parameters()]
                change(model)
                after = self.version(model, nn.Module)
                self.assertIsInstance(after, bytes)
                self.assertNotEqual(before, after)
                self.assertEqual(after, self.version(model, nn.Module))  # stable once changed
                del names

    @unittest.skipUnless(HAS_TAGS, "Python 3.12+: no dict version tags, the fingerprint is always None")
    def test_data_and_calls_leave_it_alone(self):
        model = Net()
        before = self.version(model, nn.Module)
        with torch.no_grad():
            model.a.lin.weight.add_(1)
        model.b.lin.bias.data = torch.zeros(3)
        model(torch.ones(2, 3)).backward()
        torch.optim.SGD(model.parameters(), lr=0.1).step()
        model.train(False)
        self.assertEqual(before, self.version(model, nn.Module))

    def test_none_where_it_cannot_tell(self):
        self.assertIsNone(self.version(OwnWalk(), nn.Module))  # the root walks its own way
        model = Net()
        model.a.seq = OwnWalk()  # ... or a module below it
        self.assertIsNone(self.version(model, nn.Module))
        model = Net()
        model.a.lin.__dict__["_parameters"] = [1]  # not a dict
        self.assertIsNone(self.version(model, nn.Module))
        model = Net()
        model.a._modules["odd"] = object()  # not a module
        self.assertIsNone(self.version(model, nn.Module))
        deep = nn.Linear(2, 2)
        for _ in range(300):
            deep = nn.Sequential(deep)
        self.assertIsNone(self.version(deep, nn.Module))
        self.assertIsNone(self.version(object(), nn.Module))
        with self.assertRaises(TypeError):
            self.version(Net(), "not a type")


def reshaping_job(steps=6):
    """Trains a Net whose structure changes before some steps; per step, the names of
    named_parameters() with a gradient and all of them."""
    torch.manual_seed(0)
    model = Net()
    edits = dict(changes())
    plan = {2: edits["add_parameter"], 3: edits["rename_module"], 5: edits["replace_parameter"]}
    seen = []
    x = torch.ones(2, 3)
    for step in range(steps):
        if step in plan:
            plan[step](model)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
        optimizer.zero_grad(set_to_none=True)
        model(x).backward()
        optimizer.step()
        seen.append(([n for n, p in model.named_parameters() if p.grad is not None],
                     [n for n, _ in model.named_parameters()]))
    return seen


def digests_per_step(calls, kind):
    steps, current = [], None
    for c in calls:
        if c[0] == "step_begin":
            current = []
            steps.append(current)
        elif c[0] == "digest" and c[1] == kind and current is not None:
            current.append(c[2])
    return steps


@unittest.skipUnless(EXT, "the native extension was not built for this interpreter (DLRR_TEST_NATIVE_EXT unset)")
class KeptParameterNamesTest(WithExtension, unittest.TestCase):
    def record(self, use_native, action):
        lib = fake_native.FakeLib()
        with self.installed(use_native, lib) as rec:
            return lib.calls, action(rec)

    def test_a_reshaped_model_is_named_as_it_is_at_every_step(self):
        for use_native in (True, False):
            with self.subTest(native=use_native):
                calls, seen = self.record(use_native, lambda rec: reshaping_job())
                self.assertEqual([c for c in calls if c[0] == "FAKE_ERROR"], [])
                grads = digests_per_step(calls, native.DIGEST_GRADIENT)
                params = digests_per_step(calls, native.DIGEST_PARAMETER)
                self.assertEqual(len(grads), len(seen))
                for step, (with_grad, names) in enumerate(seen):
                    self.assertEqual(grads[step], with_grad, "gradients of step %d" % step)
                    self.assertEqual(params[step], names, "parameters of step %d" % step)
                self.assertIn("b.extra", seen[2][1])  # unused: no gradient, but a parameter
                self.assertNotIn("b.extra", seen[2][0])
                self.assertIn("c.extra", seen[3][1])
                self.assertIn("c.lin.weight", seen[4][0])

    @unittest.skipUnless(HAS_TAGS, "Python 3.12+: no dict version tags, names are rebuilt every step")
    def test_an_unchanged_model_keeps_its_names_without_a_walk(self):
        def job(rec):
            paths = rec.modules.paths
            if paths.tracks_registrations:
                self.skipTest("torch has registration hooks: the fingerprint is not used")
            torch.manual_seed(0)
            model = Net()
            optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
            kept = []
            for step in range(5):
                if step == 3:
                    model.b.extra = nn.Parameter(torch.ones(3))
                optimizer.zero_grad(set_to_none=True)
                model(torch.ones(2, 3)).backward()
                optimizer.step()
                kept.append(paths._params[id(model)][2])
            return kept

        _, kept = self.record(True, job)
        self.assertIs(kept[0], kept[1])
        self.assertIs(kept[1], kept[2])
        self.assertIsNot(kept[2], kept[3])  # a parameter was added: named again
        self.assertIs(kept[3], kept[4])
        self.assertIn("b.extra", [n.decode() for n, _ in kept[3]])


if __name__ == "__main__":
    unittest.main()
