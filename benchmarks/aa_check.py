"""A/A check: can a sweep tell the default allocator from itself? It must not.

    python benchmarks/aa_check.py [WORKLOAD.yaml] [--preset h200] [--gpu 0] [--max-repeats 10]
                                  [--time-budget S] [--results DIR] [--also CONF ...]

Sweeps the default spelled two ways, `default` and `expandable_segments:False` (the same allocator, the same
settings in force), with `--repeats auto`, and prints what a sweep's throughput figures are worth on this machine:
per trial the steady-state throughput, its first run in the warm pass, the spread of its timed blocks and what
happened meanwhile (cudaMalloc calls, GC, GPU clock and temperature, load); then the paired ratio with its 95%
interval, whose half-width is the smallest slowdown such a sweep can detect here. The check passes when the two
spellings come out as no significant difference. `--also CONF` adds real settings to the same sweep: the A/A pair
is then a control measured in the same rounds, under the same conditions, sharing the default's runs (its
summary.md is that sweep's). Needs a CUDA GPU (default workload: transformer-varlen, preset
h200); exit status 0 = pass, 1 = a difference was called, 2 = could not run. Not a test: it prints figures.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SAME = ["default", "expandable_segments:False"]


def _cv(values: list[float]) -> float | None:
    return statistics.stdev(values) / statistics.fmean(values) if len(values) > 1 else None


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.1%}"


def _pair(values) -> str:
    return "-" if not values else "->".join(str(v) for v in values)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("workload", nargs="?", default=os.path.join(ROOT, "workloads", "transformer-varlen.yaml"))
    p.add_argument("--preset", default="h200")
    p.add_argument("--gpu", type=int, default=0)
    p.add_argument("--max-repeats", type=int, default=10)
    p.add_argument("--time-budget", type=float, help="seconds of measuring (see alloctune sweep --time-budget)")
    p.add_argument("--max-slowdown", type=float, default=0.02)
    p.add_argument("--results", default="results-aa", help="folder under which the sweep's folder is written")
    p.add_argument("--also", action="append", default=[], metavar="CONF",
                   help="another setting to sweep in the same rounds (repeatable)")
    args = p.parse_args(argv)

    import torch

    if not torch.cuda.is_available():
        print("aa_check needs a CUDA GPU: it times real trials (torch.cuda.is_available() is False here)")
        return 2

    import alloctune

    def progress(record, done, total):
        m = record.measurement
        speed = f"{m.throughput:,.0f} {m.unit}/s" if m and m.throughput else record.state.value
        print(f"  trial {done}: {record.conf or 'default'} #{record.repeat + 1}: {speed}", flush=True)

    outcome = alloctune.sweep(args.workload, preset=args.preset, grid=SAME + args.also, repeats="auto",
                              max_repeats=args.max_repeats, time_budget_s=args.time_budget, gpus=[args.gpu],
                              backend="cuda", results_root=args.results, fresh=True,
                              max_slowdown=args.max_slowdown, progress=progress, notice=lambda t: print("notice:", t))
    print(f"\nA/A check: {os.path.basename(args.workload)} preset {args.preset}, results {outcome.folder.path}")
    return report(outcome.settings, outcome.choices)


def report(settings, choices) -> int:
    """Print the trials and the verdict of an A/A sweep; the exit status."""
    from alloctune.decide.choice import within
    from alloctune.settings.conf import canonical
    from alloctune.units import format_bytes

    base = next(s for s in settings if s.is_default)
    other = next(s for s in settings if s.conf == canonical(SAME[1]))
    print(f"{'setting':<28}{'#':>3}{'tput':>10}{'warm':>10}{'blocks cv':>10}{'mallocs':>8}{'gc':>4}"
          f"{'clock MHz':>12}{'temp C':>8}{'load':>11}  wall s")
    for record in sorted((r for s in settings for r in s.trials), key=lambda r: (r.repeat, r.conf != "", r.conf)):
        m = record.measurement
        if m is None:
            print(f"{record.conf or 'default':<28}{record.repeat + 1:>3}  {record.state.value}: {record.error}")
            continue
        c = m.conditions
        blocks = [u / t for u, t in zip(m.block_units or [], m.block_seconds or []) if t > 0]
        print(f"{record.conf or 'default':<28}{record.repeat + 1:>3}{m.throughput or 0:>10,.0f}"
              f"{m.warm_throughput or 0:>10,.0f}{_pct(_cv(blocks)):>10}"
              f"{'-' if c is None or c.device_allocs is None else c.device_allocs:>8}"
              f"{'-' if c is None or c.gc_collections is None else c.gc_collections:>4}"
              f"{_pair(c and c.gpu_clock_mhz):>12}{_pair(c and c.gpu_temperature_c):>8}"
              f"{_pair(c and c.load_avg):>11}  {record.wall_seconds}")
    for s in settings:
        t = s.throughputs
        if not t:
            print(f"{s.label}: {s.state}, no throughput")
            continue
        warm = [r.measurement.warm_throughput for r in s.trials
                if r.measurement is not None and r.measurement.warm_throughput and r.measurement.throughput]
        steady = [r.measurement.throughput for r in s.trials
                  if r.measurement is not None and r.measurement.warm_throughput and r.measurement.throughput]
        first_seen = statistics.median(w / st for w, st in zip(warm, steady)) if warm else None
        print(f"{s.label}: {len(t)} trials, median {statistics.median(t):,.0f} {s.unit}/s, between-process "
              f"CV {_pct(_cv(t))}; first run of the same steps (warm pass) at "
              f"{'-' if first_seen is None else f'{first_seen:.3f}x'} the steady figure; "
              f"peak reserved {format_bytes(s.peak_reserved_bytes)}, repeats agree: {s.memory_spread == 0}")
    c = other.vs_default
    if c is None:
        print("no throughput comparison was possible (see the table above)")
        return 2
    ratios = [cand / b for b, cand in other.pairs]
    print(f"per-round ratios (interpolated default): {', '.join(f'{r:.3f}' for r in ratios)}")
    interval = "-" if c.ci_low is None else f"{c.ci_low:.3f}-{c.ci_high:.3f}"
    print(f"ratio {c.ratio:.4f}, 95% interval {interval}, half-width (smallest detectable slowdown) "
          f"{_pct(c.half_width)}, p = {c.p_value if c.p_value is None else f'{c.p_value:.3g}'}, "
          f"{c.pairs} paired rounds: {c.verdict}")
    for choice in choices:
        print(f"choice: {choice.best.label if choice.best else 'nothing fits'}; precision: {choice.precision}")
    for s in settings:
        if s.vs_default is not None and s is not other:
            v = s.vs_default
            print(f"{s.label}: ratio {v.ratio:.4f}, half-width {_pct(v.half_width)}, {v.pairs} rounds: {v.verdict}")
    same_memory = base.memory is not None and other.memory is not None and within(base.memory, other.memory, 0)
    ok = not c.significant
    print(f"A/A check: {'PASS' if ok else 'FAIL'}: {c.verdict}"
          f"{'' if same_memory else ' (and the peaks differ, which they must not)'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
