"""`alloctune fit`: the largest value of a parameter of your command (batch size, sequence length) each setting
allows on each card or budget, from recordings at a few values."""
from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

from ..errors import AlloctuneError
from ..settings.conf import AllocConf
from ..sim.limits import DEFAULT_CARDS_GIB
from ..workload.spec import DEFAULT_WARMUP_STEPS
from .args import console, positive_int, seconds

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "fit", help="the largest batch (or any parameter of your command) each setting allows on each card",
        description="Record your command at a few values of one of its parameters (one GPU run each, a --steps "
                    "window is enough), replay every setting at each, fit peak memory as a function of the "
                    "parameter, and answer per setting: the largest value that runs without an OOM and without an "
                    "alloc retry on each card or under each budget, the headroom, the next value to confirm, and how "
                    "many copies fit at once. Or fit traces already recorded: --trace VALUE=FILE (no GPU).")
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
    p.add_argument("--out", metavar="DIR",
                   help="folder for fit.json, plot.png and the recordings (default for a command: "
                        "alloctune-results/fit-cmd-<script>-<param>-<time>; a folder with recordings keeps them)")
    p.add_argument("--gpu", type=int, default=0, help="GPU index to record and confirm on (default: 0)")
    p.add_argument("--timeout", type=seconds, help="time limit of each run, in seconds")
    p.add_argument("--steps", type=positive_int, default=0, metavar="N",
                   help="end each run after N steps past --warmup-steps, as sweep --steps does")
    p.add_argument("--warmup-steps", type=int, default=DEFAULT_WARMUP_STEPS, metavar="N",
                   help=f"steps before the --steps window (default: {DEFAULT_WARMUP_STEPS})")
    p.add_argument("--jobs", type=positive_int, metavar="N", help="replay worker processes (default: all cores)")
    p.add_argument("--json", action="store_true", help="print fit.json's object")
    p.set_defaults(func=run)


def parse_param(text: str, with_values: bool) -> tuple[str, list[int]]:
    """--param NAME=V1,V2,...: a name as a variable's, distinct whole values above 0, at least two (values may be
    left out with --trace)."""
    name, _, values = text.partition("=")
    if not _NAME.fullmatch(name):
        raise AlloctuneError(f"--param {text!r}: expected NAME=V1,V2,... with NAME a name such as batch")
    if not values and not with_values:
        return name, []
    try:
        numbers = [int(v) for v in values.split(",")]
    except ValueError:
        numbers = []
    if len(numbers) < 2 or min(numbers) < 1 or len(set(numbers)) != len(numbers):
        raise AlloctuneError(f"--param {text!r}: expected at least two distinct whole numbers above 0, e.g. "
                             f"{name}=8,16,32")
    return name, sorted(numbers)


def parse_traces(entries: list[str]) -> dict[int, str]:
    """--trace VALUE=FILE entries: distinct whole values above 0, at least two, '-' once."""
    out: dict[int, str] = {}
    for entry in entries:
        value, _, path = entry.partition("=")
        if not value.isdigit() or int(value) < 1 or not path or int(value) in out:
            raise AlloctuneError(f"--trace {entry!r}: expected VALUE=FILE with a distinct whole VALUE above 0")
        out[int(value)] = path
    if len(out) < 2:
        raise AlloctuneError("a fit needs traces at two values at least: --trace 8=a.xz --trace 16=b.xz")
    if list(out.values()).count("-") > 1:
        raise AlloctuneError("'-' (stdin) can be given once among the traces")
    return dict(sorted(out.items()))


def run(args: argparse.Namespace) -> int:
    from ..report.fits import plot_fit, print_fit
    from ..results.names import FIT_FILE, PLOT_FILE

    if bool(args.trace) == bool(args.command):
        raise AlloctuneError("give your command after '--', or traces recorded at each value with --trace")
    if args.confirm and not (args.command and args.budget):
        raise AlloctuneError("--confirm runs the answers under each --budget on the GPU: give a command and --budget")
    if args.warmup_steps < 0:
        raise AlloctuneError(f"--warmup-steps must be a whole number of steps >= 0, got {args.warmup_steps}")
    param, values = parse_param(args.param, with_values=bool(args.command))
    fit, folder = _answer(args, param, values)
    if folder is not None:
        fit.write(folder)
        plot_fit(fit, Path(folder) / PLOT_FILE)
    if args.json:
        print(json.dumps(fit.to_json(), indent=2))
        return 0
    out = console()
    print_fit(out, fit)
    if folder is not None:
        out.print(f"Written to {folder}: {FIT_FILE}, {PLOT_FILE}" + (", the recordings" if args.command else ""))
    return 0


def _answer(args: argparse.Namespace, param: str, values: list[int]):
    """The fit (confirmed where asked) and the folder it is written to (None: none asked, for traces). Every
    option is read before the first GPU run: a typo costs no recording."""
    from ..sweeper.fitrun import confirm, record_values
    from ..sweeper.fitting import fit_traces

    limits = _limits(args)
    from ..settings.grid import load_grid_file   # loads yaml: not at every command's start-up

    entries = (args.conf or []) + (load_grid_file(args.grid) if args.grid else [])
    confirms = [AllocConf.parse(c) for c in args.confirm or []]
    folder = _folder(args, param)
    say = _progress()
    if args.command and folder is not None:
        traces = record_values(args.command, param, values, folder, gpu=args.gpu, timeout_s=args.timeout,
                               warmup_steps=args.warmup_steps, steps=args.steps, say=say)
    else:
        traces = _load(args, values)
    fit = fit_traces(_request(args, param, traces, entries, limits), jobs=args.jobs)
    if confirms:
        fit = confirm(fit, args.command, confirms, gpu=args.gpu, timeout_s=args.timeout,
                      warmup_steps=args.warmup_steps, steps=args.steps, say=say)
    return fit, folder


def _folder(args: argparse.Namespace, param: str) -> Path | None:
    """--out, or for a command a new folder under the results root; created."""
    from datetime import datetime, timezone

    from ..results.folder import DEFAULT_RESULTS_ROOT
    from ..workload.command import command_name

    folder = Path(args.out) if args.out else None
    if folder is None and args.command:
        stamp = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
        folder = Path(DEFAULT_RESULTS_ROOT) / f"fit-{command_name(args.command)}-{param}-{stamp}"
    if folder is not None:
        folder.mkdir(parents=True, exist_ok=True)
    return folder


def _progress():
    """A line on standard error per run on the GPU: each takes a while."""
    err = console(stderr=True)
    return lambda line: err.print(f"[dim]{line}[/]", soft_wrap=True)


def _load(args: argparse.Namespace, values: list[int]) -> dict:
    from ..sim.trace import load_trace

    paths = parse_traces(args.trace)
    if values and values != list(paths):
        raise AlloctuneError(f"--param gives the values {values} but --trace the values {list(paths)}: give the "
                             f"parameter's name alone with --trace")
    if args.grid == "-" and "-" in paths.values():
        raise AlloctuneError("'-' (stdin) can be given once, among the traces and --grid")
    return {value: (path, load_trace(path)) for value, path in paths.items()}


def _limits(args: argparse.Namespace) -> tuple[list[int], list[tuple[str, tuple[int | None, float | None]]],
                                                 int | None]:
    """(cards in bytes, budgets as given and parsed, the overhead or None): cards by default unless --budget."""
    from ..units import GiB, parse_budget, parse_size

    cards = ([parse_size(c) for c in args.cards.split(",")] if args.cards else
             [] if args.budget else [g * GiB for g in DEFAULT_CARDS_GIB])
    if any(c <= 0 for c in cards):
        raise AlloctuneError(f"--cards {args.cards!r}: expected card memories above 0, e.g. 24GiB,80GiB")
    budgets = [(text, parse_budget(text)) for text in args.budget or []]
    return cards, budgets, parse_size(args.overhead) if args.overhead else None


def _request(args: argparse.Namespace, param: str, traces: dict, entries: list, limits: tuple):
    from ..decide.fit import step_of
    from ..settings.grid import ranked_settings
    from ..sim.points import recording_device
    from ..sweeper.fitting import FitRequest
    from ..units import budget_on

    cards, budgets, overhead = limits
    torch_version = next((t.meta.get("torch_version") for _, t in traces.values()), None)
    confs, _ = ranked_settings(entries, torch_version, has_budget=bool(budgets))
    device = recording_device([t for _, t in traces.values()])
    on_device = [(text, budget_on(parsed[0], parsed[1], device) or 0) for text, parsed in budgets]
    return FitRequest(param, traces, confs, cards, on_device, args.step or step_of(list(traces)), overhead,
                      list(args.command) or None)
