"""Write the benchmark report from ``bench/sim_compute.py``'s pickle.

    .venv/bin/python bench/sim_render.py OUT.pickle docs/bench
"""

from __future__ import annotations

import gzip
import pickle
import sys
from pathlib import Path

from slo_devtools.sim.report import render


def main() -> None:
    results = pickle.loads(gzip.decompress(Path(sys.argv[1]).read_bytes()))
    cpu = sum(e.run.cpu_s for r in results for e in r.entries)
    print(render(results, Path(sys.argv[2]), cpu))


if __name__ == "__main__":
    main()
