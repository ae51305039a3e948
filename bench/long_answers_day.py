"""Write a day of long answers as a ``bench --trace-file`` JSONL (docs/slo-loop.md, the
pooled-routing measurement): ServeGen m-small day 3 (Apache-2.0, shipped in
``devtools/slo_devtools/data/traces/``), its rate scaled to 13 req/s at its start, 8x
compressed, Gamma renewal arrivals; prompts log-normal (median 650 tokens, sigma 0.65),
answers log-normal (median 1,500 tokens, sigma 0.9, at most 30,000): a mean answer of
about 2,240 tokens with a P99 near 12,000, the shape of reasoning-model traffic.

    PYTHONPATH=operator:devtools:runtime python3 bench/long_answers_day.py day.jsonl
    slo-operator bench --trace-file day.jsonl --objectives 240000,3000,50 --fleet x1.0

The options write other days of the same kind (docs/slo-loop-measurements.md, the reasoning
days held out on 8 December), for example ServeGen m-large day 9, 4 req/s at its start,
arrivals of CV 1.5, prompts of median 400 tokens and answers of median 2,500 (sigma 0.8):

    python3 bench/long_answers_day.py r9.jsonl --set m-large --day 9 --start-rate 4 \
        --cv 1.5 --prompt-median 400 --prompt-sigma 0.8 --answer-median 2500 \
        --answer-sigma 0.8 --seed 11
"""

from __future__ import annotations

import argparse
import json
import math
import random
from pathlib import Path

from slo_devtools.sim.traces import (
    SERVEGEN_DEFAULT_CV,
    SERVEGEN_FILES,
    SERVEGEN_WINDOW_S,
    gamma_arrivals,
    read_servegen,
)

DAY = 3
START_RATE = 13.0  # req/s in the day's first window
COMPRESSION = 8.0
PROMPT_MEDIAN, PROMPT_SIGMA = 650.0, 0.65
ANSWER_MEDIAN, ANSWER_SIGMA, ANSWER_MAX = 1500.0, 0.9, 30_000


def _positive(text: str) -> float:
    try:
        x = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not (math.isfinite(x) and x > 0):
        raise argparse.ArgumentTypeError(f"must be a positive number, got {text}")
    return x


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--set", choices=sorted(SERVEGEN_FILES), default="m-small",
                    help="ServeGen aggregate-rate set (default m-small)")
    ap.add_argument("--day", type=int, default=DAY, help=f"day of the set (default {DAY})")
    ap.add_argument("--start-rate", type=_positive, default=START_RATE,
                    help=f"req/s in the day's first window (default {START_RATE:g})")
    ap.add_argument("--cv", type=_positive, default=SERVEGEN_DEFAULT_CV,
                    help=f"arrivals' CV (Gamma renewal; default {SERVEGEN_DEFAULT_CV:g})")
    ap.add_argument("--prompt-median", type=_positive, default=PROMPT_MEDIAN)
    ap.add_argument("--prompt-sigma", type=_positive, default=PROMPT_SIGMA)
    ap.add_argument("--answer-median", type=_positive, default=ANSWER_MEDIAN)
    ap.add_argument("--answer-sigma", type=_positive, default=ANSWER_SIGMA)
    a = ap.parse_args()
    rows = [r for t, r in read_servegen(a.set) if a.day * 86400 <= t < (a.day + 1) * 86400]
    if not rows or rows[0] <= 0:
        ap.error(f"day: ServeGen {a.set} has no day {a.day} starting with traffic")
    scale = a.start_rate / rows[0]
    rng = random.Random(a.seed)
    times = gamma_arrivals([scale * r for r in rows], SERVEGEN_WINDOW_S / COMPRESSION,
                           a.cv, rng)
    lines = []
    for t in times:
        prompt = max(16, int(rng.lognormvariate(math.log(a.prompt_median), a.prompt_sigma)))
        answer = max(1, min(ANSWER_MAX, int(rng.lognormvariate(math.log(a.answer_median),
                                                               a.answer_sigma))))
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
