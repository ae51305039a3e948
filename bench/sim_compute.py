"""Compute the simulator benchmark and pickle it (for a many-core machine without the
plotting stack); ``bench/sim_render.py`` writes the report from the pickle.

    PYTHONPATH=operator:runtime python3 bench/sim_compute.py OUT.pickle --jobs 6
"""

from __future__ import annotations

import argparse
import gzip
import pickle
import time
from pathlib import Path

from slo_devtools.sim.bench import TARGETS, TRACES
from slo_devtools.sim.command import compute


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out", type=Path)
    ap.add_argument("--trace", action="append", default=None)
    ap.add_argument("--targets", action="append", default=None)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--jobs", type=int, default=1)
    a = ap.parse_args()
    t0 = time.time()
    res = compute(a.trace or list(TRACES), a.targets or list(TARGETS), a.seed, a.jobs)
    a.out.write_bytes(gzip.compress(pickle.dumps(res)))
    print(f"computed {len(res)} workloads in {time.time() - t0:.0f} s")


if __name__ == "__main__":
    main()
