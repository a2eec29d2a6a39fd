"""`alloctune diagnose`: name the cause of a CUDA out-of-memory error and the next step."""
from __future__ import annotations

import argparse
import json
import textwrap

from .args import positive_int


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "diagnose", help="explain a CUDA out-of-memory error: its cause, the figures, the next step",
        description="Read an OOM message (any torch format; a traceback or a whole log will do), a memory "
                    "snapshot pickle (alloctune.dump_on_oom, torch.cuda.memory._dump_snapshot; read without "
                    "running any code it holds) or a results folder's failed trial, and say which it was: a true "
                    "shortage, cached/fragmented memory, other processes holding the GPU, or a budget below the "
                    "card. With a trace in the snapshot, replay the run under other settings and name one that "
                    "would have fit.")
    p.add_argument("sources", nargs="+", metavar="SOURCE",
                   help="OOM message file, snapshot pickle or results folder; '-' reads stdin; a message and a "
                        "snapshot of the same OOM may be given together")
    p.add_argument("--conf", action="append", metavar="CONF",
                   help="a setting to replay instead of the default grid (repeatable)")
    p.add_argument("--device", type=int, help="which device's state, when the snapshot has several")
    p.add_argument("--jobs", type=positive_int, metavar="N", help="replay worker processes (default: all usable "
                                                                   "cores)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ..diagnosis import diagnose

    result = diagnose(*args.sources, device=args.device, confs=args.conf, jobs=args.jobs)
    if args.json:
        print(json.dumps(result.to_json(), indent=2))
    else:
        print("\n".join(_lines(result)))
    return 0


def _lines(d) -> list[str]:
    from ..units import format_bytes as fb

    out = _items("source: ", d.sources)
    if d.message:
        out.append(f"message: {d.message.format}")
    out += [line for w in d.warnings for line in _wrap(w, "warning: ")]
    v, f = d.verdict, d.facts
    if v and f:
        where = f"GPU {f.gpu}" if f.gpu is not None else "the GPU"
        out += ["", f"OOM on {where}: tried to allocate {fb(f.requested)}",
                *_wrap(f"Verdict ({v.cause}{'' if v.sure else ', within the rounding of the figures'}): "
                       f"{v.summary}", "")]
        out += [line for r in v.reasons for line in _wrap(r, "  - ")]
        out += [line for n in v.notes for line in _wrap(n, "  note: ")]
        out += _items("  figures: ", [f"{k.replace('_', ' ')} {fb(n)}" for k, n in v.numbers.items()
                                       if n is not None])
    picture = d.picture()
    if picture:
        out += ["", "Fragmentation picture (snapshot):"] + [f"  {line}" for line in picture]
    if d.replay:
        r = d.replay
        out += ["", f"Replay of the trace (confidence {r.confidence}):"] + _wrap(r.confidence_reason, "  ")
        out.append(f"  {'setting':<48} {'would fit':>9} {'peak reserved':>14} {'retries':>8}")
        for o in r.outcomes:
            res = o.result
            label = o.conf + (" (recorded)" if o.conf == r.recorded_conf else "")
            if res is None:
                out.append(f"  {label:<48} {'-':>9} {'not simulated':>14}")
            else:
                out.append(f"  {label:<48} {'yes' if o.fits else 'no':>9} "
                           f"{fb(res.peak_reserved_bytes):>14} {res.num_alloc_retries:>8}")
    if v:
        out += ["", "Next steps:"]
        for i, step in enumerate(d.next_steps, 1):
            out += _wrap(step, f"  {i}. ")
    return out


def _items(prefix: str, items: list[str]) -> list[str]:
    """Items joined by commas, wrapped at 100 columns between items only."""
    lines, line = [], prefix
    for i, item in enumerate(items):
        piece = item + ("," if i < len(items) - 1 else "")
        if len(line) + len(piece) + 1 > 100 and line.strip():
            lines.append(line.rstrip())
            line = " " * len(prefix)
        line += piece + " "
    return lines + [line.rstrip()]


def _wrap(text: str, prefix: str) -> list[str]:
    return textwrap.wrap(text, 100, initial_indent=prefix, subsequent_indent=" " * len(prefix),
                         break_on_hyphens=False) or [prefix]
