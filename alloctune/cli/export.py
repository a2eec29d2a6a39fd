"""`alloctune export RESULTS`: the chosen setting as env / shell / json / docker / k8s text."""
from __future__ import annotations

import sys

from ..errors import printable
from ..files import write_file
from ..report.export import FORMATS, export_results
from .args import written

# export_results()'s parameters as this command's flags: a library message that names one shows the flag.
FLAGS = {"workload": "--workload", "conf": "--conf", "env_id": "--env", "allow_incomplete": "--allow-incomplete"}


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "export", help="write the chosen setting as an env file, shell, JSON, Dockerfile or Kubernetes snippet",
        description="Write the setting a finished sweep chose in the form a consumer reads. When the default was "
                    "best, the variable is written with an empty value (PyTorch's defaults; it also overrides an "
                    "inherited setting).")
    p.add_argument("results", metavar="RESULTS", help="a results folder, or a folder of them")
    p.add_argument("--format", "-f", choices=FORMATS, default="env", help="output format (default: env)")
    p.add_argument("-o", "--output", metavar="FILE", type=written("a file", stdout=True),
                   help="write to FILE instead of standard output ('-': standard output)")
    p.add_argument("--workload", metavar="NAME", help="the workload, when RESULTS holds several")
    p.add_argument("--conf", metavar="CONF", help="export this setting (one that ran and fitted) instead of the choice")
    p.add_argument("--env", dest="env_id", metavar="ENV", help="the environment (env_id), when the sweep had several")
    p.add_argument("--allow-incomplete", action="store_true",
                   help="export a choice that `alloctune report` took from an interrupted sweep")
    p.set_defaults(func=run, flags=FLAGS)


def run(args) -> int:
    text = export_results(args.results, args.format, workload=args.workload, conf=args.conf, env_id=args.env_id,
                          allow_incomplete=args.allow_incomplete)
    if args.output and args.output != "-":
        write_file(args.output, text)   # an existing FILE stays whole if the write fails
        print(printable(f"wrote {args.output}"), file=sys.stderr)
    else:
        sys.stdout.write(text)
    return 0
