#!/usr/bin/python3
"""Write the synthetic image-classification dataset used by train.py.

Layout (N samples, 10 classes):

    DIR/labels.npy          int64, shape (N,)
    DIR/samples/00000.npy   float32, shape (3, 16, 16)
    ...
    DIR/samples/{N-1:05d}.npy

Each class has a smooth random 16x16 RGB prototype; a sample is its class
prototype plus Gaussian noise, so the small CNN in train.py can learn it
(eval accuracy clearly rises above chance within one epoch).

Everything comes from one seeded numpy Generator and np.save is
deterministic, so the same arguments always give byte-identical files.

Fault injection:

--corrupt-index I   sample I gets a 2x2 patch of +inf in every channel.
                    When it reaches the model the first conv output is
                    non-finite, the batch loss becomes NaN, the NaN
                    gradients poison Adam's state and every later loss is
                    NaN too.  (inf rather than a large finite value such as
                    1e38: with the default init the small conv weights
                    shrink 1e38 pixels, and in a quick test only ~25% of
                    random inits overflowed even at 3e38.)  Default:
                    2 * N // 3, i.e. outside the first 128 samples that
                    train.py evaluates on.  Since train.py shuffles without
                    a seed, the step at which it is drawn is uniform over
                    the first epoch whatever index is chosen; pass -1 for
                    a clean dataset.
--malformed-index J sample J is written with shape (3, 16) instead of
                    (3, 16, 16), so collating the batch that contains it
                    raises.  Default: none.

Usage:
    /usr/bin/python3 examples/prepare_data.py --out /tmp/exdata
    /usr/bin/python3 examples/prepare_data.py --out /tmp/exbad \\
        --malformed-index 1000
"""

import argparse
import os
import sys

import numpy as np

NUM_CLASSES = 10
SHAPE = (3, 16, 16)


def make_prototypes(rng):
    """One smooth (3, 16, 16) pattern per class: 4x4 noise upsampled x4."""
    coarse = rng.normal(0.0, 1.0, size=(NUM_CLASSES, 3, 4, 4))
    return np.kron(coarse, np.ones((1, 1, 4, 4))).astype(np.float32)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="output directory")
    parser.add_argument("--n", type=int, default=2048,
                        help="number of samples (default 2048)")
    parser.add_argument("--corrupt-index", type=int, default=None,
                        help="sample holding +inf pixels (default 2*N//3; "
                             "-1 for none)")
    parser.add_argument("--malformed-index", type=int, default=None,
                        help="sample written with a wrong shape "
                             "(default none)")
    parser.add_argument("--seed", type=int, default=0,
                        help="generator seed (default 0)")
    args = parser.parse_args(argv)

    n = args.n
    if n <= 0:
        parser.error("--n must be positive")
    corrupt = 2 * n // 3 if args.corrupt_index is None else args.corrupt_index
    for name, idx in (("--corrupt-index", corrupt),
                      ("--malformed-index", args.malformed_index)):
        if idx is not None and idx != -1 and not 0 <= idx < n:
            parser.error(f"{name} {idx} out of range [0, {n})")

    rng = np.random.default_rng(args.seed)
    prototypes = make_prototypes(rng)
    labels = rng.integers(0, NUM_CLASSES, size=n, dtype=np.int64)

    sample_dir = os.path.join(args.out, "samples")
    os.makedirs(sample_dir, exist_ok=True)
    np.save(os.path.join(args.out, "labels.npy"), labels)

    for i in range(n):
        # Always draw the noise, so every other sample is identical whether
        # or not a fault is injected.
        noise = rng.normal(0.0, 4.0, size=SHAPE).astype(np.float32)
        x = prototypes[labels[i]] + noise
        if i == corrupt:
            x[:, 6:8, 9:11] = np.inf
        if i == args.malformed_index:
            x = np.ascontiguousarray(x[:, 0, :])  # (3, 16)
        np.save(os.path.join(sample_dir, f"{i:05d}.npy"), x)

    print(f"wrote {n} samples to {args.out} "
          f"(corrupt={corrupt if corrupt != -1 else 'none'}, "
          f"malformed={args.malformed_index})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
