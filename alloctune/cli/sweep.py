"""`alloctune sweep WORKLOAD.yaml`: measure (or replay) a grid of allocator settings and choose the best."""
from __future__ import annotations

import shlex

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from ..records import TrialRecord
from ..units import format_bytes
from . import console, fraction, gpu_list, seconds


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "sweep", help="measure a workload under a grid of allocator settings and choose the best",
        description="Run WORKLOAD under each allocator setting of a grid, each trial in a fresh process (or replay "
                    "its recorded allocation trace through the simulator), and write results/<workload>-<time>/ "
                    "with trials.jsonl, summary.md, best.env and plot.png. Running the same sweep again resumes it.")
    p.add_argument("workload", help="workload file (YAML); see workloads/README.md")
    p.add_argument("--preset", help="workload preset, e.g. 24gib or h200 (default: the file's default_preset)")
    p.add_argument("--conf", action="append", metavar="CONF", dest="grid",
                   help="a setting to include instead of the default grid (repeatable); the default is always added")
    p.add_argument("--grid", dest="grid_file", metavar="FILE", help="a file listing the settings to sweep")
    p.add_argument("--repeats", type=int, default=3, help="fresh processes per setting, interleaved across settings (default: 3)")
    p.add_argument("--gpus", type=gpu_list,
                   help="comma-separated GPU indices; one trial runs on each at a time (default: 0)")
    p.add_argument("--budget", help="memory budget per trial: a size (24GiB) or a fraction of the device (0.5)")
    p.add_argument("--max-slowdown", type=fraction, default=0.02,
                   help="reject settings significantly slower than the default by more than this fraction "
                        "(default: 0.02)")
    p.add_argument("--timeout", type=seconds, help="per-trial time limit in seconds (default: the workload's, or 600)")
    p.add_argument("--python", action="append", dest="pythons", metavar="PATH",
                   help="interpreter to run trials with (repeatable: the same grid under each, e.g. two torch versions)")
    p.add_argument("--backend", choices=("auto", "cuda", "sim", "hybrid"), default="auto",
                   help="cuda: measure on the GPU; sim: replay the recorded trace; hybrid: simulate all, measure the "
                        "best few; auto (default): cuda when a GPU is visible, else sim")
    p.add_argument("--executor", choices=("local", "ray"), default="local",
                   help="where measured trials run: local (default) child processes on this machine's GPUs, or ray: "
                        "one Ray task per trial across a cluster (pip install 'alloctune[ray]')")
    p.add_argument("--ray-address", metavar="ADDR",
                   help="Ray cluster to use with --executor ray (default: RAY_ADDRESS, else the cluster 'ray start' "
                        "runs here, else a new local one)")
    p.add_argument("--ray-accelerator", metavar="TYPE",
                   help="GPU model to sweep on with --executor ray, as Ray names it (e.g. H100, A100); default: "
                        "that of the node where the interpreter is probed")
    p.add_argument("--trace", help="allocation trace to replay for --backend sim/hybrid (default: the workload's); "
                                   "one recorded from another workload is refused")
    p.add_argument("--results", default="results", help="folder under which results folders are created (default: results)")
    p.add_argument("--out", help="exact results folder to write (or resume)")
    p.add_argument("--fresh", action="store_true", help="start a new results folder instead of resuming")
    p.set_defaults(func=run)


def run(args) -> int:
    from ..grid import load_grid_file
    from ..report import ranked_table
    from ..sweeper import sweep

    err = console(stderr=True)
    grid = list(args.grid or [])
    if args.grid_file:
        grid += load_grid_file(args.grid_file)
    with Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn(), console=err,
                  transient=False) as bar:
        task = bar.add_task("trials", total=None)

        def progress(record: TrialRecord, done: int, total: int) -> None:
            bar.update(task, completed=done, total=total)
            bar.console.print(_trial_line(record, where=args.executor == "ray"))

        outcome = sweep(args.workload, preset=args.preset, grid=grid or None, repeats=args.repeats, gpus=args.gpus,
                        budget=args.budget, pythons=args.pythons, backend=args.backend, results_root=args.results,
                        out=args.out, fresh=args.fresh, max_slowdown=args.max_slowdown, timeout_s=args.timeout,
                        trace=args.trace, executor=args.executor, ray_address=args.ray_address,
                        ray_accelerator=args.ray_accelerator, progress=progress,
                        notice=lambda text: bar.console.print(f"[yellow]notice:[/] {text}"))
    out = console()
    for skip in outcome.skipped:
        out.print(f"[dim]skipped {skip.conf or 'default'} ({skip.env_id}): {skip.reason}[/]")
    for choice in outcome.choices:
        out.print(ranked_table(outcome.settings, choice))
        for reason in choice.reasons:
            out.print(f"  {reason}")
    folder = outcome.folder.path
    # Commands to copy: one line each, never folded at the terminal's width.
    out.print(f"\nResults: {folder}/ (summary.md, best.env, plot.png, trials.jsonl)", soft_wrap=True)
    out.print(f"Next: alloctune export {folder} --format env -o alloc.env", soft_wrap=True)
    if outcome.backend == "sim":
        out.print(f"Confirm on a GPU: {_on_gpu(outcome.folder.info().command)}", soft_wrap=True)
    return 0


def _on_gpu(command: str) -> str:
    """The same sweep command, measured on the GPU: every option kept, the backend and trace swapped, and --out
    dropped (that folder holds the simulated sweep, which a measured one may not resume)."""
    words, out, skip = shlex.split(command), [], False
    for word in words:
        if skip:
            skip = False
        elif word in ("--backend", "--trace", "--out"):
            skip = True
        elif not word.startswith(("--backend=", "--trace=", "--out=")):
            out.append(word)
    return shlex.join(out + ["--backend", "cuda"])


def _trial_line(record: TrialRecord, where: bool = False) -> str:
    m = record.measurement
    what = f"{record.conf or 'default'} #{record.repeat + 1}"
    if where and record.node:  # on a cluster, which node and GPUs ran it
        what += f" on {record.node}" + (f" GPU {record.gpus}" if record.gpus else "")
    if record.state.value == "ok" and m:
        speed = f", {m.throughput:,.0f} {m.unit}/s" if m.throughput else ""
        return f"  [green]ok[/] {what}: peak reserved {format_bytes(m.peak_reserved_bytes)}{speed}"
    last = (record.error or "").strip().splitlines()
    return f"  [red]{record.state.value}[/] {what}: {last[-1] if last else ''}"
