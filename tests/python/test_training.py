"""Loss, gradients, parameters, module outputs and optimizer-driven steps (fake library)."""

import unittest

import torch
from torch import nn
from torch.utils.data import DataLoader

from support import IndexDataset, RecorderTestCase, small_model, train_step  # first
from dlrr_hook import native


class TwoOutputs(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Linear(3, 4)
        self.head = nn.Linear(4, 1)

    def forward(self, x):
        h = self.body(x)
        return {"y": self.head(h), "parts": (h, [h.sum()])}


class NoLoaderTest(RecorderTestCase):
    def test_optimizer_counted_steps(self):
        model = small_model()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        losses = [train_step(model, optimizer, torch.randn(8, 3)) for _ in range(5)]
        with torch.no_grad():
            model(torch.randn(2, 3))  # evaluation after training: no new step
        self.rec._at_exit()
        self.assert_steps_well_formed(5)
        begins = self.lib.of("step_begin")
        self.assertEqual([c[2:] for c in begins], [(native.NO_LOADER, k, -1, 1) for k in range(5)])
        self.assertEqual([c[2] for c in self.lib.of("step_end")], losses)
        # RNG states follow every step_begin; step k+1's are taken when step k's step() returns.
        names = self.lib.names()
        for i, name in enumerate(names):
            if name == "step_begin":
                self.assertEqual(names[i + 1], "rng_state")
        self.assert_no_status_errors()

    def test_rng_of_next_step_is_taken_at_optimizer_step_return(self):
        model = small_model()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        train_step(model, optimizer, torch.randn(8, 3))
        state_after_step0 = torch.get_rng_state().numpy().tobytes()
        x = torch.randn(8, 3)  # draws before step 1's forward
        train_step(model, optimizer, x)
        rng_cpu = [c for c in self.lib.of("rng_state") if c[1] == native.RNG_TORCH_CPU]
        self.assertEqual(rng_cpu[1][3], state_after_step0)

    def test_dry_run_then_loader(self):
        loader = DataLoader(IndexDataset(8), batch_size=4)
        model = small_model()
        model(torch.zeros(1, 3))  # dry run with grad enabled, before the loop
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        for x, _ in loader:
            train_step(model, optimizer, x)
        self.assert_steps_well_formed(2)
        self.assertEqual([c[5] for c in self.lib.of("step_begin")], [0, 0])


class DigestTest(RecorderTestCase):
    def test_module_output_paths_and_call_indices(self):
        model = small_model()
        criterion = nn.MSELoss()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        x = torch.randn(4, 3)
        expected_first = torch.nn.functional.linear(x, model[0].weight, model[0].bias).detach()
        for _ in range(2):
            optimizer.zero_grad()
            out = model(x)
            out2 = model(x)  # second call of each path in the step
            loss = criterion(out + out2, torch.zeros(4, 1))
            loss.backward()
            optimizer.step()
        outputs = [(c[2], c[3], c[4], c[6], c[8]) for c in self.digests(native.DIGEST_MODULE_OUTPUT)]
        # an nn.Sequential's children carry their class: a bare index names nothing (issue 18.12)
        lin, relu, out = "0 (Linear)", "1 (ReLU)", "2 (Linear)"
        per_step = [(lin, 0, 0, [4, 4], 1), (relu, 0, 0, [4, 4], 1), (out, 0, 0, [4, 1], 1), ("", 0, 0, [4, 1], 1),
                    (lin, 1, 0, [4, 4], 1), (relu, 1, 0, [4, 4], 1), (out, 1, 0, [4, 1], 1), ("", 1, 0, [4, 1], 1),
                    ("MSELoss", 0, 0, [], 1)]
        self.assertEqual(outputs, per_step * 2)
        first = self.digests(native.DIGEST_MODULE_OUTPUT)[0]
        self.assertEqual(first[7], expected_first.numpy().tobytes())  # the output's bytes

        grads = [(c[2], c[3]) for c in self.digests(native.DIGEST_GRADIENT)]
        names = ["0.weight", "0.bias", "2.weight", "2.bias"]
        self.assertEqual(grads, [(n, 0) for n in names] * 2)
        params = self.digests(native.DIGEST_PARAMETER)
        self.assertEqual([(c[2], c[3]) for c in params], [(n, 0) for n in names] * 2)
        self.assertEqual(params[-1][7], model[2].bias.detach().numpy().tobytes())
        losses = self.digests(native.DIGEST_LOSS)
        self.assertEqual([(c[2], c[3], c[4], c[6]) for c in losses], [("loss", 0, 0, [])] * 2)

    def test_replaced_submodule_gets_its_names(self):
        model = small_model()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        train_step(model, optimizer, torch.randn(2, 3))
        model[2] = nn.Linear(4, 1, bias=False)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        self.lib.clear()
        train_step(model, optimizer, torch.randn(2, 3))
        grads = [c[2] for c in self.digests(native.DIGEST_GRADIENT)]
        self.assertEqual(grads, ["0.weight", "0.bias", "2.weight"])
        new_weight = [c for c in self.digests(native.DIGEST_PARAMETER) if c[2] == "2.weight"][0]
        self.assertEqual(new_weight[7], model[2].weight.detach().numpy().tobytes())

    def test_flattened_outputs(self):
        model = TwoOutputs()
        with torch.no_grad():
            model(torch.randn(2, 3))
        root = [(c[4], c[6]) for c in self.digests(native.DIGEST_MODULE_OUTPUT) if c[2] == ""]
        self.assertEqual(root, [(0, [2, 1]), (1, [2, 4]), (2, [])])

    def test_module_not_registered_under_root(self):
        stray = nn.ReLU()

        class UsesStray(nn.Module):
            def __init__(self):
                super().__init__()
                self.fc = nn.Linear(3, 3)

            def forward(self, x):
                return stray(self.fc(x))

        with torch.no_grad():
            UsesStray()(torch.randn(1, 3))
        paths = [c[2] for c in self.digests(native.DIGEST_MODULE_OUTPUT)]
        self.assertEqual(paths, ["fc", "<ReLU>", ""])

    def test_second_root_of_same_class_gets_a_number(self):
        a, b = small_model(), small_model()
        with torch.no_grad():
            a(torch.randn(1, 3))
            b(torch.randn(1, 3))
        roots = [c[2] for c in self.digests(native.DIGEST_MODULE_OUTPUT) if c[2] in ("", "Sequential")]
        self.assertEqual(roots, ["", "Sequential"])
        paths = [c[2] for c in self.digests(native.DIGEST_MODULE_OUTPUT)][4:]
        self.assertEqual(paths, ["Sequential.0", "Sequential.1", "Sequential.2", "Sequential"])

    def test_exception_in_forward_keeps_stack_sane(self):
        class Boom(nn.Module):
            def forward(self, x):
                raise ValueError("boom")

        model = nn.Sequential(nn.Linear(3, 3), Boom())
        with self.assertRaises(ValueError):
            model(torch.randn(1, 3))
        other = small_model()
        loader = DataLoader(IndexDataset(4), batch_size=4)
        with torch.no_grad():
            for x, _ in loader:  # a delivery resets the stack
                other(x)
        paths = [c[2] for c in self.digests(native.DIGEST_MODULE_OUTPUT)][-4:]
        self.assertEqual(paths, ["Sequential.0", "Sequential.1", "Sequential.2", "Sequential"])


class MinimalCaptureTest(RecorderTestCase):
    capture_level = native.CAPTURE_MINIMAL

    def test_only_loss_digests(self):
        model = small_model()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        for _ in range(2):
            train_step(model, optimizer, torch.randn(4, 3))
        kinds = {c[1] for c in self.digests()}
        self.assertEqual(kinds, {native.DIGEST_LOSS})
        self.assert_steps_well_formed(2)


class ProcessCaptureTest(RecorderTestCase):
    capture_level = native.CAPTURE_PROCESS

    def test_torch_left_unpatched(self):
        from dlrr_hook.patching import original_of
        model = small_model()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        for x, _ in DataLoader(IndexDataset(8), batch_size=4):
            train_step(model, optimizer, x.float().view(-1, 1).expand(-1, 3))
        recorded = {c[0] for c in self.lib.calls}
        self.assertFalse(recorded & {"step_begin", "step_end", "batch_begin", "digest", "rng_state", "rng_states"},
                         recorded)
        self.assertIs(original_of(torch.Tensor.backward), torch.Tensor.backward)
        self.assertIsNone(self.rec.modules)


class BackwardPassThroughTest(RecorderTestCase):
    def _grads(self, tensor_backward, autograd_backward):
        w = torch.tensor([1.0, 2.0], requires_grad=True)
        v = torch.tensor(3.0, requires_grad=True)
        y = (w * w).sum() * v
        tensor_backward(y, retain_graph=True)
        tensor_backward(y, torch.tensor(2.0), retain_graph=True, inputs=[w])
        g = torch.autograd.grad((w * w * v).sum(), w, create_graph=True)[0]
        autograd_backward([g.sum()], inputs=[w])
        autograd_backward(y, grad_tensors=torch.tensor(0.5))
        return w.grad.tolist(), v.grad.tolist()

    def test_arguments_and_results_unchanged(self):
        from dlrr_hook.patching import original_of
        expected = self._grads(original_of(torch.Tensor.backward), original_of(torch.autograd.backward))
        self.lib.clear()
        got = self._grads(torch.Tensor.backward, torch.autograd.backward)
        self.assertEqual(got, expected)
        self.assertEqual(len(self.digests(native.DIGEST_LOSS)), 4)  # each call once, no double count

    def test_checkpointed_backward_counts_once(self):
        from torch.utils.checkpoint import checkpoint
        model = small_model()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        x = torch.randn(4, 3, requires_grad=True)
        losses = []
        for _ in range(2):
            optimizer.zero_grad()
            loss = checkpoint(model, x).pow(2).mean()  # reentrant: backward inside backward
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
        self.assertEqual([(c[2], c[3]) for c in self.digests(native.DIGEST_LOSS)], [("loss", 0)] * 2)
        self.assertEqual([c[2] for c in self.lib.of("step_end")], losses)

    def test_non_scalar_backward_keeps_the_loss(self):
        model = small_model()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        loss = model(torch.randn(4, 3)).pow(2).mean()
        loss.backward()
        extra = model(torch.randn(2, 3))
        extra.backward(torch.ones_like(extra))  # non-scalar root: no loss value
        optimizer.step()
        (end,) = self.lib.of("step_end")
        self.assertEqual(end[2], loss.item())

    def test_exceptions_pass_through(self):
        t = torch.ones(2)
        with self.assertRaises(RuntimeError) as hooked:
            t.sum().backward()
        from dlrr_hook.patching import original_of
        with self.assertRaises(RuntimeError) as plain:
            original_of(torch.Tensor.backward)(t.sum())
        self.assertEqual(str(hooked.exception), str(plain.exception))
        w = torch.ones(2, requires_grad=True)
        y = (w * w).sum()
        y.backward()
        with self.assertRaises(RuntimeError):
            y.backward()  # graph freed: still raises
        self.assertTrue(self.rec.active)

    def test_optimizer_nested_step_counts_once(self):
        class Wrapped(torch.optim.SGD):
            def step(self, closure=None):
                return super().step(closure)

        torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.1)  # SGD.step wrapped too
        model = small_model()
        optimizer = Wrapped(model.parameters(), lr=0.1)
        for _ in range(3):
            train_step(model, optimizer, torch.randn(2, 3))
        self.assert_steps_well_formed(3)

    def test_lbfgs_closure(self):
        model = small_model()
        optimizer = torch.optim.LBFGS(model.parameters(), max_iter=3)
        x = torch.randn(4, 3)

        def closure():
            optimizer.zero_grad()
            loss = model(x).pow(2).mean()
            loss.backward()
            return loss

        for _ in range(2):
            optimizer.step(closure)
        self.rec._at_exit()
        self.assert_steps_well_formed(2)

    def test_unnamed_optimizer_parameters(self):
        p = torch.zeros(2, requires_grad=True)
        optimizer = torch.optim.SGD([p], lr=0.1)
        p.sum().backward()
        optimizer.step()
        self.assertEqual([c[2] for c in self.digests(native.DIGEST_PARAMETER)], ["optimizer0.group0.0"])


if __name__ == "__main__":
    unittest.main()
