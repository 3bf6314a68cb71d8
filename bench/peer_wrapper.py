"""Runs a training script under one of the peer techniques dlrr is compared with.

    python3 bench/peer_wrapper.py MODE SCRIPT [ARGS...]

MODE:
  plain     nothing (the wrapper's own cost, for fairness)
  anomaly   torch.autograd.set_detect_anomaly(True) for the whole run
  isfinite  a global forward hook that checks torch.isfinite() on every module output
  save      torch.save() of every DataLoader batch (the naive "record the inputs"), into
            $PEER_SAVE_DIR when set (left there, for the caller to measure and remove), else
            into a temporary directory removed at exit

The script runs through runpy exactly as `python3 SCRIPT ARGS` would.
"""
import atexit
import os
import runpy
import shutil
import sys
import tempfile


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    mode, script = sys.argv[1], sys.argv[2]
    sys.argv = [script] + sys.argv[3:]
    import torch

    if mode == "anomaly":
        torch.autograd.set_detect_anomaly(True)
    elif mode == "isfinite":
        def check(module, inputs, output):
            outs = output if isinstance(output, (tuple, list)) else (output,)
            for t in outs:
                if torch.is_tensor(t) and t.is_floating_point() and not bool(torch.isfinite(t).all()):
                    module._peer_nonfinite = True
        torch.nn.modules.module.register_module_forward_hook(check)
    elif mode == "save":
        from torch.utils.data import dataloader
        out = os.environ.get("PEER_SAVE_DIR")
        if out:
            os.makedirs(out, exist_ok=True)
        else:
            out = tempfile.mkdtemp(prefix="dlrr-peer-save-")
            atexit.register(shutil.rmtree, out, True)
        original = dataloader._BaseDataLoaderIter.__next__
        counter = [0]

        def saving_next(self):
            batch = original(self)
            torch.save(batch, os.path.join(out, "%08d.pt" % counter[0]))
            counter[0] += 1
            return batch
        dataloader._BaseDataLoaderIter.__next__ = saving_next
    elif mode != "plain":
        sys.exit("unknown mode %r" % mode)
    sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
    runpy.run_path(script, run_name="__main__")


if __name__ == "__main__":
    main()
