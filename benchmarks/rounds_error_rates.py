"""How often `--repeats auto` gets the speed question wrong: simulated sweeps of one setting against the default,
decided by the sweep's own rules (`decide.rounds.standings` over `decide.summary.summarize_settings`, the same
bracketing, outlier handling and tests a sweep uses), for a true throughput ratio and a run-to-run noise.

    python benchmarks/rounds_error_rates.py [--sweeps 2000] [--max-repeats 10] [--max-slowdown 0.02]

Each simulated round runs the default, the setting, and the next round's default, every run's throughput off by
lognormal noise of the given spread; after each round's default the rules say whether the setting is refused
(significantly slower beyond the allowance), answered or cleared (settled: kept), or still open. Printed per true
ratio and noise: the share of sweeps that refused the setting, settled it, or reached --max-repeats undecided (the
choice then keeps it, as not significantly slower), and the mean rounds. The rules look again after every round from the third on, so a boundary case is decided wrongly more
often than one look's 5% would suggest: these are the rates to quote. Not a test: it prints figures.
"""
from __future__ import annotations

import argparse
import math
import os
import random
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from alloctune.decide.rounds import Contention, standings  # noqa: E402
from alloctune.decide.summary import summarize_settings  # noqa: E402
from alloctune.results.records import Measurement, TrialRecord, TrialState  # noqa: E402
from alloctune.units import GiB  # noqa: E402

CONF = "expandable_segments:True"


def _run(conf: str, repeat: int, tput: float) -> TrialRecord:
    # the setting needs less memory than the default, so memory never ends its contention: speed decides
    reserved = 10 * GiB if conf else 12 * GiB
    m = Measurement(peak_reserved_bytes=reserved, peak_allocated_bytes=9 * GiB, throughput=tput, unit="steps")
    return TrialRecord("w", "h", conf, repeat, "env", "cuda", TrialState.OK, m)


def one_sweep(ratio: float, noise: float, max_rounds: int, max_slowdown: float, rng: random.Random
              ) -> tuple[Contention, int]:
    """The setting's standing when the rounds stop, and the rounds it ran."""
    def speed(base: float) -> float:
        return base * math.exp(rng.gauss(0.0, noise))

    runs = [_run("", 0, speed(100.0))]
    for r in range(max_rounds):
        runs.append(_run(CONF, r, speed(100.0 * ratio)))
        runs.append(_run("", r + 1, speed(100.0)))
        [st] = standings(summarize_settings(runs, max_slowdown), ["", CONF], max_slowdown)
        if not st.open:
            return st.why, r + 1
    return Contention.TOO_WIDE, max_rounds


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sweeps", type=int, default=2000)
    ap.add_argument("--max-repeats", type=int, default=10)
    ap.add_argument("--max-slowdown", type=float, default=0.02)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    rng = random.Random(args.seed)
    kept = (Contention.ANSWERED, Contention.CLEARED)
    print(f"{args.sweeps} simulated sweeps per row, --max-repeats {args.max_repeats}, "
          f"--max-slowdown {args.max_slowdown:g}")
    print(f"{'true ratio':>10} {'noise':>6} {'refused':>8} {'settled':>8} {'at cap':>7} {'rounds':>6}")
    for noise in (0.02, 0.05, 0.10):
        for ratio in (0.90, 0.95, 0.97, 0.98, 0.99, 1.00, 1.05):
            outcomes = [one_sweep(ratio, noise, args.max_repeats, args.max_slowdown, rng)
                        for _ in range(args.sweeps)]
            n = len(outcomes)
            refused = sum(w is Contention.TOO_SLOW for w, _ in outcomes) / n
            keep = sum(w in kept for w, _ in outcomes) / n
            rounds = sum(k for _, k in outcomes) / n
            print(f"{ratio:>10.2f} {noise:>6.0%} {refused:>8.1%} {keep:>8.1%} {max(0.0, 1 - refused - keep):>7.1%} "
                  f"{rounds:>6.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
