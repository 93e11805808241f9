"""docs/rotation.png: rigid-spectral on rotated MNIST-test (10,000 digits, each at a random angle).

One row per cluster: its prototype (framed), then six of its members as they came (closest to the cluster's
centre first) and, right of a gap, the same six posed onto the prototype by the pose the result holds.

    python docs/make_rotation_figure.py [--data-dir DIR]
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "benchmarks"))
sys.path.insert(0, str(HERE.parent / "src"))

import ticlust  # noqa: E402
from rotation import rotated_mnist  # noqa: E402
from ticlust.core.atomic import write_atomic  # noqa: E402
from ticlust.io.gallery import tile  # noqa: E402

MEMBERS = 6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data-dir")
    args = ap.parse_args()
    x, y = rotated_mnist(10000, data=args.data_dir)
    r = ticlust.fit(x, "rigid-spectral", k=10, device="cpu", seed=0, progress=False)
    print("ACC", ticlust.evaluate(y, r.labels)["acc"])
    blank = np.zeros_like(x[0])
    cells = []
    for c in np.argsort(-np.bincount(r.labels, minlength=10)):
        members = np.flatnonzero(r.labels == c)
        members = members[np.argsort(r.scores[members, c])][:MEMBERS]
        cells += [r.prototypes[c], blank, *x[members], blank, *r.aligned[members]]
    canvas = tile(cells, columns=3 + 2 * MEMBERS)
    w, gap = x.shape[2], 2
    for column in (1, 2 + MEMBERS):          # the spacers white, as the gaps
        canvas[:, gap + column * (w + gap): gap + column * (w + gap) + w] = 255
    canvas = np.kron(canvas, np.ones((2, 2, 1), np.uint8))    # twice the size: 28-pixel digits are small on a page
    from PIL import Image

    write_atomic(HERE / "rotation.png", lambda path: Image.fromarray(canvas).save(path, format="PNG"))


if __name__ == "__main__":
    main()
