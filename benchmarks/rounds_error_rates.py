"""How often `--repeats auto` gets the speed question wrong: simulated sweeps of one setting against the default,
decided by the sweep's own rules (`decide.rounds.standings` over `decide.summary.summarize_settings`, the same
bracketing, outlier handling and sequential test a sweep uses), for a true throughput ratio and a run-to-run noise.

    python benchmarks/rounds_error_rates.py [--sweeps 1000] [--max-repeats 10] [--max-slowdown 0.02]

Each simulated round runs the default, the setting, and the next round's default, every run's throughput off by
lognormal noise of the given spread; after each round's default the rules say whether the setting is refused
(slower beyond the allowance), accepted (no slower than it), or still open. Printed per true ratio and noise: the
share of sweeps that refused the setting, accepted it, or reached --max-repeats inconclusive, the share in which
the choice (`decide.choice.choose`, as `alloctune report` calls it for such a sweep) refuses it for speed, and
the mean rounds. With 1000 sweeps a rate near 5% is known to about ±1.4 points (two standard errors). Not a test:
it prints figures.
"""
from __future__ import annotations

import argparse
import math
import os
import random
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from alloctune.decide.choice import choose  # noqa: E402
from alloctune.decide.reasons import Code  # noqa: E402
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
              ) -> tuple[Contention, int, bool]:
    """The setting's standing when the rounds stop, the rounds it ran, and whether the choice refuses it."""
    def speed(base: float) -> float:
        return base * math.exp(rng.gauss(0.0, noise))

    runs = [_run("", 0, speed(100.0))]
    for r in range(max_rounds):
        runs.append(_run(CONF, r, speed(100.0 * ratio)))
        runs.append(_run("", r + 1, speed(100.0)))
        group = summarize_settings(runs, max_slowdown)
        [st] = standings(group, ["", CONF], max_slowdown, max_rounds=max_rounds)
        if not st.open or r + 1 == max_rounds:
            [choice] = choose(group, max_slowdown, horizon=max_rounds)
            return st.why, r + 1, any(why.code is Code.TOO_SLOW for _, why in choice.runners_up)
    raise AssertionError("unreachable: the last round returns")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sweeps", type=int, default=1000)
    ap.add_argument("--max-repeats", type=int, default=10)
    ap.add_argument("--max-slowdown", type=float, default=0.02)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    rng = random.Random(args.seed)
    print(f"{args.sweeps} simulated sweeps per row, --max-repeats {args.max_repeats}, "
          f"--max-slowdown {args.max_slowdown:g}, seed {args.seed}")
    print(f"{'true ratio':>10} {'noise':>6} {'refused':>8} {'accepted':>8} {'at cap':>7} {'choice refuses':>14} "
          f"{'rounds':>6}")
    for noise in (0.02, 0.05, 0.10, 0.20):
        for ratio in (0.90, 0.95, 0.98, 1.00, 1.05):
            outcomes = [one_sweep(ratio, noise, args.max_repeats, args.max_slowdown, rng)
                        for _ in range(args.sweeps)]
            n = len(outcomes)
            refused = sum(w is Contention.TOO_SLOW for w, _, _ in outcomes) / n
            accepted = sum(w is Contention.CLEARED for w, _, _ in outcomes) / n
            chosen = sum(slow for _, _, slow in outcomes) / n
            rounds = sum(k for _, k, _ in outcomes) / n
            print(f"{ratio:>10.2f} {noise:>6.0%} {refused:>8.1%} {accepted:>8.1%} {1 - refused - accepted:>7.1%} "
                  f"{chosen:>14.1%} {rounds:>6.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
