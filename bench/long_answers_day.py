"""Write a day of long answers as a ``bench --trace-file`` JSONL (docs/slo-loop.md, the
pooled-routing measurement): ServeGen m-small day 3 (Apache-2.0, shipped in
``devtools/slo_devtools/data/traces/``), its rate scaled to 13 req/s at its start, 8x
compressed, Gamma renewal arrivals; prompts log-normal (median 650 tokens, sigma 0.65),
answers log-normal (median 1,500 tokens, sigma 0.9, at most 30,000): a mean answer of
about 2,240 tokens with a P99 near 12,000, the shape of reasoning-model traffic.

    PYTHONPATH=operator:devtools:runtime python3 bench/long_answers_day.py day.jsonl
    slo-operator bench --trace-file day.jsonl --objectives 240000,3000,50 --fleet x1.0
"""

from __future__ import annotations

import argparse
import json
import math
import random
from pathlib import Path

from slo_devtools.sim.traces import (
    SERVEGEN_DEFAULT_CV,
    SERVEGEN_WINDOW_S,
    gamma_arrivals,
    read_servegen,
)

DAY = 3
START_RATE = 13.0  # req/s in the day's first window
COMPRESSION = 8.0
PROMPT_MEDIAN, PROMPT_SIGMA = 650.0, 0.65
ANSWER_MEDIAN, ANSWER_SIGMA, ANSWER_MAX = 1500.0, 0.9, 30_000


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--seed", type=int, default=7)
    a = ap.parse_args()
    rows = [r for t, r in read_servegen("m-small") if DAY * 86400 <= t < (DAY + 1) * 86400]
    scale = START_RATE / rows[0]
    rng = random.Random(a.seed)
    times = gamma_arrivals([scale * r for r in rows], SERVEGEN_WINDOW_S / COMPRESSION,
                           SERVEGEN_DEFAULT_CV, rng)
    lines = []
    for t in times:
        prompt = max(16, int(rng.lognormvariate(math.log(PROMPT_MEDIAN), PROMPT_SIGMA)))
        answer = max(1, min(ANSWER_MAX, int(rng.lognormvariate(math.log(ANSWER_MEDIAN),
                                                               ANSWER_SIGMA))))
        lines.append(json.dumps({"timestamp": round(t, 3), "prompt_tokens": prompt,
                                 "output_tokens": answer}) + "\n")
    try:
        a.out.write_text("".join(lines))
    except OSError as err:
        ap.error(f"out: cannot write {a.out}: {err.strerror}")
    print(f"wrote {len(times)} requests over {len(rows) * SERVEGEN_WINDOW_S / COMPRESSION / 60:.0f}"
          f" minutes to {a.out}")


if __name__ == "__main__":
    main()
