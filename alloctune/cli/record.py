"""`alloctune record`: record a workload's allocation trace once, to replay it under any setting later."""
from __future__ import annotations


from . import console, seconds


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "record", help="record a workload's allocation trace (PyTorch snapshot format) on a GPU",
        description="Run WORKLOAD once on the GPU with torch's allocation history recording on (no stack frames), "
                    "and write the trace in PyTorch's snapshot format (a pickle that pytorch.org/memory_viz opens), "
                    "with the peaks measured in that run and its environment. Or record your own command: "
                    "alloctune record -o trace.pickle -- python train.py ...")
    p.add_argument("target", nargs="*", metavar="WORKLOAD.yaml | -- COMMAND ...",
                   help="a workload file, or after '--' your own command")
    p.add_argument("-o", "--output", required=True,
                   help="trace file to write: .pickle (PyTorch snapshot) or the compact format (see replay --help)")
    p.add_argument("--preset", help="workload preset")
    p.add_argument("--conf", default="", help="allocator setting to record under (the alloc sequence does not "
                                             "depend on it for most workloads)")
    p.add_argument("--gpu", type=int, default=0, help="GPU index")
    p.add_argument("--python", help="interpreter to run the workload with (default: this one)")
    p.add_argument("--timeout", type=seconds, help="time limit in seconds")
    p.set_defaults(func=run)


def run(args) -> int:
    from ..errors import AlloctuneError
    from ..record import record_command, record_workload
    from ..units import format_bytes

    if not args.target:
        raise AlloctuneError("give a workload file, or '-- COMMAND ...' to record your own program")
    if len(args.target) == 1 and args.target[0].endswith((".yaml", ".yml")):
        trace = record_workload(args.target[0], args.output, preset=args.preset, conf=args.conf, gpu=args.gpu,
                                python=args.python, timeout_s=args.timeout)
    else:
        if args.preset or args.python or args.timeout:
            raise AlloctuneError("--preset, --python and --timeout apply to a workload file, not to '-- COMMAND'")
        trace = record_command(args.target, args.output, gpu=args.gpu, conf=args.conf)
    measured = (trace.meta.get("measured") or [{}])[0]
    speed = (f", {measured['throughput']:,.0f} {measured.get('unit')}/s over {measured.get('measured_seconds'):.2f} s "
             f"(recording slows it)" if measured.get("throughput") else "")
    console().print(f"Recorded {len(trace.kinds):,} allocation events to {args.output}; measured peak reserved "
                    f"{format_bytes(measured.get('peak_reserved_bytes'))}, allocated "
                    f"{format_bytes(measured.get('peak_allocated_bytes'))}{speed}.\n"
                    f"Next: alloctune replay {args.output}")
    return 0
