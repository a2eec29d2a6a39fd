"""`alloctune record`: record a workload's allocation trace once, to replay it under any setting later."""
from __future__ import annotations

import json

from ..workload.spec import DEFAULT_TIMEOUT_S, DEFAULT_WARMUP_STEPS
from .args import add_dry_run, console, flagged, gpu_list, positive_int, seconds, written

# RecordOptions' fields and record()'s output as this command's flags: a library message that names one shows the flag.
FLAGS = {"output": "--output", "preset": "--preset", "conf": "--conf", "gpus": "--gpu", "python": "--python",
         "timeout_s": "--timeout", "steps": "--steps", "warmup_steps": "--warmup-steps", "dry_run": "--dry-run",
         "arch": "--arch"}


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "record", help="record a workload's allocation trace (PyTorch snapshot format) on a GPU",
        description="Run WORKLOAD once on the GPU with torch's allocation history recording on (no stack frames), "
                    "and write the trace in PyTorch's snapshot format (a pickle that pytorch.org/memory_viz opens), "
                    "with the peaks measured in that run and its environment. Or record your own command: "
                    "alloctune record -o trace.pickle -- python train.py ... (each process that uses CUDA "
                    "leaves its own trace: trace.rank0.pickle, trace.rank1.pickle, ... when there are several)")
    p.add_argument("target", nargs="*", metavar="WORKLOAD.yaml | - | -- COMMAND",
                   help="a workload file ('-' for stdin), or after '--' your own command")
    p.add_argument("-o", "--output", required=True, type=written("the trace files, one per process"),
                   help="trace file to write: NAME.pickle (or .pkl) for PyTorch's snapshot, which "
                        "pytorch.org/memory_viz opens; any other name for alloctune's compact xz trace, which replay, "
                        "search, fit and fleet read as they read a snapshot")
    p.add_argument("--preset", help="workload preset")
    p.add_argument("--conf", default="", help="allocator setting to record under (the alloc sequence does not "
                                             "depend on it for most workloads)")
    p.add_argument("--gpu", type=gpu_list, default=[0],
                   help="GPU index; for a command of several ranks, the GPUs it sees, e.g. 0,1")
    p.add_argument("--python", help="interpreter to run the workload with (default: this one)")
    p.add_argument("--timeout", type=seconds,
                   help=f"time limit in seconds (default: a workload file's own, else {DEFAULT_TIMEOUT_S:g}; your "
                        "own command: none)")
    p.add_argument("--steps", type=positive_int, metavar="N",
                   help="your own command: end it after N steps past --warmup-steps (optimizer steps, or "
                        "alloctune.step() marks), as 'sweep --steps N' does, so the trace covers that window")
    p.add_argument("--warmup-steps", type=int, metavar="N",
                   help=f"with --steps: steps before the window (default: {DEFAULT_WARMUP_STEPS})")
    add_dry_run(p, "your own command: run it without a GPU, with fake tensors standing for CUDA tensors, and write "
                   "the allocations the caching allocator would see (docs/dry-run.md); any GPU is hidden")
    p.add_argument("--json", action="store_true",
                   help="print a JSON list, one object per trace written (path, events, what was measured)")
    p.set_defaults(func=run, flags=FLAGS)


def run(args) -> int:
    from rich.text import Text

    from ..api.record import RecordOptions, record
    from ..report.layout import command, say
    from ..units import format_bytes
    from ..workload.loader import names_workload

    workload = names_workload(args.target)
    # a trace is written once the run ends: an interrupted one leaves none, and a long job has a window to offer
    args.interrupted = "no trace was kept" + ("" if workload or args.steps else
                                              "; --steps N ends your command after N steps past the warm-up")
    recording = record(args.target[0] if workload else args.target, args.output, RecordOptions(
        preset=args.preset, conf=args.conf, gpus=args.gpu, python=args.python, timeout_s=args.timeout,
        steps=args.steps or 0, warmup_steps=args.warmup_steps, dry_run=args.dry_run, arch=args.arch))
    args.interrupted = f"the traces were written: {', '.join(map(str, recording.paths))}"
    for notice in recording.notices:   # on standard error, as sweep's: standard output may be --json
        say(console(stderr=True), Text.assemble(("notice:", "yellow"), " ", flagged(notice, FLAGS)))
    if args.json:
        print(json.dumps(recording.to_json(), indent=2))
        return 0
    out = console()
    for recorded in recording.traces:
        if not recorded.provenance.measured:
            for line in dry_run_lines(recorded.path, recorded.trace, recorded.provenance):
                say(out, Text(line))
            continue
        measured = recorded.measured or {}
        speed = (f", {measured['throughput']:,.0f} {measured.get('unit')}/s over "
                 f"{measured.get('measured_seconds'):.2f} s (recording slows it)" if measured.get("throughput") else "")
        say(out, Text(f"Recorded {len(recorded.trace.kinds):,} allocation events to {recorded.path}; measured peak "
                      f"reserved {format_bytes(measured.get('peak_reserved_bytes'))}, allocated "
                      f"{format_bytes(measured.get('peak_allocated_bytes'))}{speed}."))
    for line in command("Next:", ["alloctune", "replay", *(str(p) for p in recording.paths)], out.width):
        out.print(Text(line), soft_wrap=True)
    return 0


def dry_run_lines(path, trace, provenance) -> list[str]:
    """What `record --dry-run` says of one trace: what it stands for (the torch named as replay names it), what it
    made up, what it could not size."""
    from ..report.provenance import origin, workspace_warning
    from ..sim.target import simulated_torch

    torch = simulated_torch(trace.meta.get("torch_version"))
    return [f"Traced {len(trace.kinds):,} allocation events to {path}: {origin(provenance)}, the requests "
            f"torch {torch}'s caching allocator would see. Nothing was measured: replay the trace to see what each "
            f"setting would reserve.", *filter(None, [workspace_warning(provenance)])]
