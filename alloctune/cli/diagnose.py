"""`alloctune diagnose`: name the cause of a CUDA out-of-memory error and the next step."""
from __future__ import annotations

import argparse
import json
import sys

from ..errors import printable
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
    p.set_defaults(func=run, flags=FLAGS)


FLAGS = {"sources": "SOURCE", "device": "--device", "confs": "--conf", "jobs": "--jobs",
         "all_problems": "--all-problems"}


def run(args: argparse.Namespace) -> int:
    from ..api.diagnose import DiagnoseOptions, diagnose
    from ..report.diagnosis import diagnosis_lines
    from ..report.layout import output_width

    options = DiagnoseOptions(args.sources, args.device, args.conf, args.jobs, args.all_problems)
    result = diagnose(options=options)
    if args.json:
        print(json.dumps(result.to_json(), indent=2))
    else:
        print(printable("\n".join(diagnosis_lines(result, output_width(sys.stdout)))))
    return 0
