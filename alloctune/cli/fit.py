"""`alloctune fit`: the largest value of a parameter of your command (batch size, sequence length) each setting
allows on each card or budget, from recordings at a few values."""
from __future__ import annotations

import argparse
import contextlib
import json
import re

from ..decide.fit import EXACT_RECORDINGS
from ..errors import AlloctuneError, OptionError, OptionText, shown
from ..sim.limits import DEFAULT_CARDS_GIB
from ..workload.spec import DEFAULT_TIMEOUT_S, DEFAULT_WARMUP_STEPS
from .args import add_device, add_dry_run, console, positive_int, seconds, whole_int


JSON_HELP = ("print the answer as JSON in the names every command's --json shares: a setting 'default' for the "
             "default, each point's peaks replayed without a memory limit as unlimited_peak_reserved_bytes and "
             "unlimited_peak_allocated_bytes, each answer's basis replayed or predicted (with its curve and margin; "
             "margin null with margin_why where nothing tested the curve), where the context came from as "
             "overhead_from; fit.json keeps its stored form ('' for the default, the peaks as peak_*_bytes)")


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "fit", help="the largest batch (or any parameter of your command) each setting allows on each card",
        description="Record your command at a few values of one of its parameters (one GPU run each, a --steps "
                    "window is enough), replay every setting at each, fit peak memory as a function of the "
                    "parameter, and answer per setting: the largest value that runs without an OOM and without an "
                    "alloc retry on each card or under each budget, the headroom, the next value to confirm, and how "
                    "many copies fit at once; then record each answer's value and the next one, so that answers "
                    "come from replays. Without a GPU, --dry-run traces the command at each value instead "
                    "(docs/dry-run.md; nothing is measured). Or fit traces already recorded: --trace VALUE=FILE "
                    "(no GPU: the curve's answers, with their margins).")
    p.add_argument("command", nargs="*", metavar="-- COMMAND",
                   help="your command, with {NAME} where the value goes (without it: in the environment variable "
                        "NAME)")
    p.add_argument("--param", required=True, metavar="NAME=V1,V2,...",
                   help="the parameter and its values, whole numbers: batch=8,16,32 (with --trace: its name)")
    p.add_argument("--trace", action="append", metavar="VALUE=FILE",
                   help="a trace recorded at VALUE ('-' for stdin, once); repeatable, instead of a command")
    p.add_argument("--conf", action="append", metavar="CONF",
                   help="a setting to answer for ('default' for the default; repeatable; default: the default grid)")
    p.add_argument("--grid", metavar="FILE", help="a file listing the settings ('-' for stdin)")
    p.add_argument("--cards", metavar="SIZES",
                   help="card memories to answer for, e.g. 24GiB,80GiB (default, unless --budget is given: "
                        f"{', '.join(map(str, DEFAULT_CARDS_GIB))} GiB)")
    p.add_argument("--budget", action="append", metavar="SIZE",
                   help="a budget on the recording GPU, as sweep --budget applies it: a size or a fraction; "
                        "repeatable")
    p.add_argument("--step", type=positive_int, metavar="N",
                   help="the spacing of the values answered (default: the greatest common divisor of the values)")
    p.add_argument("--overhead", metavar="SIZE",
                   help="the CUDA context each process holds outside the allocator (default: what the recordings "
                        "measured, else 1GiB)")
    p.add_argument("--confirm", action="append", metavar="CONF",
                   help="with a command and --budget: run the predicted largest value and the next one under each "
                        "budget with this setting on the GPU ('default' for the default); repeatable")
    p.add_argument("--confirm-copies", type=positive_int, metavar="VALUE",
                   help="with --confirm: under each budget, also start the copies of the command at VALUE (a value "
                        "of --param) predicted to fit at once together on the GPU, in the budget and one context")
    p.add_argument("--extra-recordings", type=whole_int, default=EXACT_RECORDINGS, metavar="N",
                   help="with a command: record at most N more values, each answer's and the next, so that answers "
                        f"come from replays, not the curve (default: {EXACT_RECORDINGS}; 0: the curve's answers)")
    p.add_argument("--out", metavar="DIR",
                   help="folder for fit.json, plot.png and the recordings (default for a command: "
                        "alloctune-results/fit-cmd-<script>-<param>-<time>; a folder with recordings keeps them)")
    p.add_argument("--gpu", type=int, default=0, help="GPU index to record and confirm on (default: 0)")
    p.add_argument("--timeout", type=seconds,
                   help="time limit of each run, in seconds (default: none for a recording, "
                        f"{DEFAULT_TIMEOUT_S:g} for a run that confirms an answer or copies at once)")
    p.add_argument("--steps", type=positive_int, default=0, metavar="N",
                   help="end each run after N steps past --warmup-steps, as sweep --steps does")
    p.add_argument("--warmup-steps", type=int, metavar="N",
                   help=f"steps before the --steps window (default: {DEFAULT_WARMUP_STEPS})")
    add_dry_run(p, "without a GPU: trace the command at each value with fake tensors standing for CUDA tensors (as "
                   "'record --dry-run'), each answer's value and the next too, so that answers come from the dry "
                   "runs' replays, else from the curve; nothing is measured")
    add_device(p)
    p.add_argument("--jobs", type=positive_int, metavar="N", help="replay worker processes (default: all cores)")
    p.add_argument("--json", action="store_true", help=JSON_HELP)
    p.set_defaults(func=run, flags=FLAGS)


FLAGS = {"param": "--param", "values": "--param", "traces": "--trace", "command": "your command after '--'",
         "confs": "--conf", "grid": "--grid", "cards": "--cards", "budgets": "--budget", "budget": "--budget",
         "step": "--step", "overhead": "--overhead", "confirm": "--confirm", "confirm_copies": "--confirm-copies",
         "extra_recordings": "--extra-recordings", "out": "--out", "gpu": "--gpu", "timeout_s": "--timeout",
         "steps": "--steps", "warmup_steps": "--warmup-steps", "jobs": "--jobs", "device": "--device",
         "dry_run": "--dry-run", "arch": "--arch"}


def parse_param(text: str) -> tuple[str, list[int | str]]:
    """--param NAME=V1,V2,...: the name and the values (FitOptions checks both; a value that is no whole number
    is handed on as given, to be refused there)."""
    name, _, values = text.partition("=")
    return name, [_whole(v) for v in values.split(",")] if values else []


def parse_traces(entries: list[str]) -> dict[int | str, str]:
    """--trace VALUE=FILE entries, by value (FitOptions checks them); a value given twice is refused here, where
    the entries are still apart."""
    out: dict[int | str, str] = {}
    for entry in entries:
        value, _, path = entry.partition("=")
        if _whole(value) in out:
            raise AlloctuneError(f"--trace {entry!r}: the value {value} is given twice ({out[_whole(value)]!r} "
                                 "first): one trace per value")
        if not path:
            raise AlloctuneError(f"--trace {entry!r}: expected VALUE=FILE with a distinct whole VALUE above 0")
        out[_whole(value)] = path
    return out


def _whole(text: str) -> int | str:
    """A whole number written in ASCII digits, a minus sign before them or not, as an int (FitOptions refuses one
    that is no value); anything else, or more digits than Python reads, as it is."""
    if re.fullmatch(r"-?[0-9]+", text):
        with contextlib.suppress(ValueError):
            return int(text)
    return text


def _as_typed(exc: OptionError, param: str) -> OptionError:
    """A refusal of --param's name or values that shows them ({got}) as the user typed them, not as the Python values
    they became (the API shows what its caller gave)."""
    said = exc.args[0]
    if exc.field not in ("param", "values") or not isinstance(said, OptionText) or "got" not in said.values:
        return exc
    return OptionError(exc.field, said.template, **{**said.values, "got": shown(param)})


def run(args: argparse.Namespace) -> int:
    from ..api.fit import FitOptions, fit
    from ..results.names import FIT_FILE, PLOT_FILE
    from ..report.fits import print_fit

    param, values = parse_param(args.param)
    traces = parse_traces(args.trace) if args.trace else None   # a value that is no number: refused by FitOptions
    try:
        options = FitOptions(param, tuple(values), traces,  # type: ignore[arg-type]
                             tuple(args.command) or None, tuple(args.conf or ()), args.grid,
                             None if args.cards is None else args.cards.split(","), tuple(args.budget or ()),
                             args.step, args.overhead, tuple(args.confirm or ()), args.confirm_copies,
                             args.extra_recordings, args.out, args.gpu, args.timeout, args.steps, args.warmup_steps,
                             args.jobs, args.device, dry_run=args.dry_run, arch=args.arch)
    except OptionError as exc:
        raise _as_typed(exc, args.param) from None
    from rich.text import Text

    err = console(stderr=True)   # a line per run on the GPU: each takes a while
    result = fit(options=options, progress=lambda line, _: err.print(Text(line, style="dim"), soft_wrap=True))
    if args.json:
        print(json.dumps(result.to_json(), indent=2))
        return 0
    out = console()
    print_fit(out, result.fit, result.simulated_torch)
    if result.folder is not None:
        made = ", the dry runs' traces" if args.dry_run else ", the recordings" if args.command else ""
        out.print(Text(f"Written to {result.folder}: {FIT_FILE}, {PLOT_FILE}{made}"))
    return 0
