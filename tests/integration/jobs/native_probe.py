"""Runs a script (argv[1:]) as __main__ after saying on stderr which module hooks the recorder
installed: "dlrr-test: module hooks native" (the _dlrr_native extension) or "... python", and
which gradient and parameter digests: "dlrr-test: tensor lists native" (its TensorListDigest)
or "... python", which batch value walk: "dlrr-test: batch values native" (its ValueWriter) or
"... python", and which RNG states: "dlrr-test: rng states native" (its RngStates) or "... python"."""
import importlib
import runpy
import sys

import dlrr_hook

importlib.import_module("torch")  # the recorder installs its module hooks as torch is imported

rec = dlrr_hook.current()
kind = "native" if rec is not None and rec.modules is not None and rec.modules.native_hooks is not None else "python"
sys.stderr.write("dlrr-test: module hooks %s\n" % kind)
lists = "native" if rec is not None and rec._native_lists() is not None else "python"
sys.stderr.write("dlrr-test: tensor lists %s\n" % lists)
values = "native" if rec is not None and rec.values.native_walker is not None else "python"
sys.stderr.write("dlrr-test: batch values %s\n" % values)
states = "native" if rec is not None and rec.rng is not None and rec.rng._native is not None else "python"
sys.stderr.write("dlrr-test: rng states %s\n" % states)
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
