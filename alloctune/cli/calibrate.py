"""`alloctune calibrate`: measure this GPU's driver-call costs, which predict each setting's speed, and keep them."""
from __future__ import annotations

import json
import sys

from .args import console

# CalibrateOptions' fields as this command's flags: a library message that names one shows the flag.
FLAGS = {"gpu": "--gpu", "python": "--python", "output": "--output"}


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "calibrate", help="measure the GPU's cost of the allocator's driver calls (about 40 s)",
        description="Time, through torch's own allocator, the driver calls the caching allocator makes: "
                    "cudaMalloc and cudaFree of segments from 2 MiB to 1 GiB, mapping and unmapping pages of "
                    "expandable segments, and a device synchronisation, on an idle GPU and again behind queued GPU "
                    "work, as a job makes them (what prices a job's calls). Each is fitted as a fixed cost plus a "
                    "cost per MiB (the repeated median of the sizes: one size far off the others is left out of "
                    "the line). Three pairs of processes take turns, and each size's figures are the median of "
                    "theirs: one process's figures on a busy device move from process to process. The result is "
                    "kept in the per-user store "
                    "($XDG_CACHE_HOME/alloctune/calibration/, one file per GPU model, driver, torch and host CPU, "
                    "as the costs move with the host), where sweeps on this GPU and host find it.")
    p.add_argument("-o", "--output", metavar="FILE", help="also write the calibration (JSON) to FILE")
    p.add_argument("--gpu", type=int, default=0, metavar="N", help="GPU index (default: 0)")
    p.add_argument("--python", default=sys.executable,
                   help="interpreter whose torch is calibrated (default: this one)")
    p.add_argument("--json", action="store_true", help="print the calibration as JSON")
    p.set_defaults(func=run, flags=FLAGS)


def run(args) -> int:
    from rich.text import Text

    from ..api.calibrate import CalibrateOptions, calibrate
    from ..report.layout import say
    from ..report.tables import figures_table, print_table

    calibrated = calibrate(CalibrateOptions(gpu=args.gpu, python=args.python, output=args.output or None))
    calibration = calibrated.calibration
    if args.json:
        print(json.dumps(calibration.to_json(), indent=2))
        return 0
    def line(fit) -> str:   # a synchronisation moves no bytes: its fixed cost alone
        if fit is None:
            return "-"
        sized = any(s.bytes for s in fit.samples)
        return f"{fit.fixed_us:.1f} + {fit.per_mib_us:.3f}/MiB" if sized else f"{fit.fixed_us:.1f}"

    rows = []
    for call, fit in (("cudaMalloc", calibration.device_alloc), ("cudaFree", calibration.device_free),
                      ("map pages", calibration.map), ("unmap pages", calibration.unmap),
                      ("synchronize", calibration.sync)):
        points = ", ".join(f"{s.bytes / 2**20:g}: {s.median_us:.0f}" if s.bytes else f"idle: {s.median_us:.1f}"
                           for s in fit.samples)
        rows.append([call, line(fit), line(fit.busy), points])
    out = console()
    print_table(out, figures_table(
        ["call", "idle device, µs", "busy device, µs", "idle, MiB: median µs"], rows, column={0: {}, 3: {}},
        title=f"{calibration.gpu}, driver {calibration.driver or '?'}, CUDA {calibration.cuda or '?'}, "
              f"torch {calibration.torch}, host CPU {calibration.host_cpu or '?'}",
        caption=f"measured {calibration.measured_at}; pages: of expandable segments; busy: behind queued GPU work, "
                f"less what the call waits for, as a job's calls are priced"))
    say(out, Text("Kept for sweeps on this GPU model, driver, torch and host CPU:"))
    out.print(Text(f"  {calibrated.stored}"), soft_wrap=True)   # a path whole, to copy
    if args.output:
        say(out, Text(f"Also written to {args.output}."))
    return 0
