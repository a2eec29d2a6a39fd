"""`alloctune diagnose`: name the cause of a CUDA out-of-memory error and the next step."""
from __future__ import annotations

import argparse
import json
import sys

from ..errors import printable
from ..report import layout

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
    p.add_argument("--all-problems", action="store_true",
                   help="list every known problem of the recommended setting, not only the few that matter most "
                        "for this job")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ..diagnosis import diagnose
    from ..report.layout import output_width

    result = diagnose(*args.sources, device=args.device, confs=args.conf, jobs=args.jobs,
                      all_problems=args.all_problems)
    if args.json:
        print(json.dumps(result.to_json(), indent=2))
    else:
        print(printable("\n".join(_lines(result, output_width(sys.stdout)))))
    return 0


def _lines(d, width: int) -> list[str]:
    """The diagnosis in `width` columns (report/layout.py's rule: breaks between words and items only)."""
    from ..diagnosis.words import heading, oom_heading, several
    from ..units import format_bytes as fb

    def items(prefix: str, values: list[str]) -> list[str]:
        return _items(prefix, values, width)

    def wrap(text: str, prefix: str) -> list[str]:
        return layout.wrap(text, width, prefix)

    out = items("source: ", d.sources)
    if d.message:
        out += wrap(f"message: {d.message.format}", "")
    out += [line for w in d.warnings for line in wrap(w, "warning: ")]
    v, f = d.verdict, d.facts
    rank = d.message.rank if d.message else None
    if len(d.ooms) > 1 and f:
        head, *each = several([(o.rank, o.facts, o.verdict.cause, o.facts is f) for o in d.ooms])
        out += ["", *wrap(head, "")] + [line for e in each for line in wrap(e, "  - ")]
    if v and f:
        out += ["", *wrap(oom_heading(rank, f), ""),
                *wrap(f"{heading(v.cause, v.sure)}: {v.summary}", "")]
        out += [line for r in v.reasons for line in wrap(r, "  - ")]
        out += [line for n in v.notes for line in wrap(n, "  note: ")]
        out += items("  figures: ", [f"{k.replace('_', ' ')} {fb(n)}" for k, n in v.numbers.items()
                                      if n is not None])
    picture = d.picture()
    if picture:
        indents = ["  " + p[:len(p) - len(p.lstrip())] for p in picture]
        out += ["", "Fragmentation picture (snapshot):"]
        out += [line for p, ind in zip(picture, indents) for line in layout.wrap(p.lstrip(), width, ind, ind + "  ")]
    if d.replay:
        out += ["", f"Replay of the trace (confidence {d.replay.confidence}):"]
        out += wrap(d.replay.confidence_reason, "  ") + _replay_table(d.replay, width)
    if v:
        out += ["", "Next steps:"]
        for i, step in enumerate(d.next_steps, 1):
            out += wrap(step, f"  {i}. ")
    return out


def _replay_table(r, width: int) -> list[str]:
    """The replayed settings, one a line; settings too long for the line numbered, and given whole below."""
    from ..units import format_bytes as fb

    labels = [o.conf + (" (recorded)" if o.conf == r.recorded_conf else "") for o in r.outcomes]
    figures = f" {'fits':>4} {'peak reserved':>13} {'retries':>7}"
    if 2 + max(map(len, labels + ["setting"])) + len(figures) > width:
        below = [f"  ({n}) {label}" for n, label in enumerate(labels, 1)]
        labels = [f"({n})" for n in range(1, len(labels) + 1)]
    else:
        below = []
    column = max(map(len, labels + ["setting"]))
    out = [f"  {'setting':<{column}}{figures}"]
    for label, o in zip(labels, r.outcomes):
        res = o.result
        if res is None:
            out.append(f"  {label:<{column}} {'-':>4} {'not simulated':>13}")
        else:
            out.append(f"  {label:<{column}} {'yes' if o.fits else 'no':>4} "
                       f"{fb(res.peak_reserved_bytes):>13} {res.num_alloc_retries:>7}")
    return out + below


def _items(prefix: str, items: list[str], width: int) -> list[str]:
    """Items joined by commas, wrapped at `width` columns between items only."""
    lines, line = [], prefix
    for i, item in enumerate(items):
        piece = item + ("," if i < len(items) - 1 else "")
        if len(line) + len(piece) > width and line.strip():
            lines.append(line.rstrip())
            line = " " * len(prefix)
        line += piece + " "
    return lines + [line.rstrip()]
