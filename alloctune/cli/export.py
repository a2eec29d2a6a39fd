"""`alloctune export RESULTS`: the chosen setting as env / shell / json / docker / k8s text."""
from __future__ import annotations

import sys

from ..errors import printable
from ..files import write_file
from ..api.export import ExportOptions, export_results
from ..report.export import FORMATS
from ..results.folder import passed_by
from .args import written

# ExportOptions' fields as this command's flags: a library message that names one shows the flag.
FLAGS = {"format": "--format", "workload": "--workload", "conf": "--conf", "env_id": "--env",
         "allow_incomplete": "--allow-incomplete"}


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "export", help="write the chosen setting as an env file, shell, JSON, Dockerfile or Kubernetes snippet",
        description="Write the setting a finished sweep chose in the form a consumer reads. When the default was "
                    "best, the variable is written with an empty value (PyTorch's defaults; it also overrides an "
                    "inherited setting).")
    p.add_argument("results", metavar="RESULTS", help="a results folder, or a folder of them")
    p.add_argument("--format", "-f", choices=FORMATS, default=ExportOptions.format,
                   help="output format (default: %(default)s)")
    p.add_argument("-o", "--output", metavar="FILE", type=written("a file", stdout=True),
                   help="write to FILE instead of standard output ('-': standard output)")
    p.add_argument("--workload", metavar="NAME", help="the workload, when RESULTS holds several")
    p.add_argument("--conf", metavar="CONF", help="export this setting (one that ran and fitted) instead of the choice")
    p.add_argument("--env", dest="env_id", metavar="ENV", help="the environment (env_id), when the sweep had several")
    p.add_argument("--allow-incomplete", action="store_true",
                   help="export a choice that `alloctune report` took from an interrupted sweep")
    p.set_defaults(func=run, flags=FLAGS)


def run(args) -> int:
    exported = export_results(args.results, options=ExportOptions(
        **{name: getattr(args, name) for name in FLAGS}))
    for folder in exported.skipped:   # passed by, as `report` passes them by
        print(printable(passed_by(folder, "not exported")), file=sys.stderr)
    if args.output and args.output != "-":
        write_file(args.output, exported.text)   # an existing FILE stays whole if the write fails
        print(printable(f"wrote {args.output}"), file=sys.stderr)
    else:
        sys.stdout.write(exported.text)
    return 0
