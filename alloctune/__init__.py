"""alloctune: find, prove and export the best PyTorch CUDA caching-allocator configuration for a workload.

The Python API, loaded on first use (trial children import this package too, and must not pay for scipy,
matplotlib or rich). Each use case (api/) takes its options object or its fields as keywords, and returns a typed
result:

    alloctune.sweep(workload, ...)        measure or replay a grid, choose, write a results folder -> SweepOutcome
    alloctune.analyze(folder, ...)        choose again from a folder's recorded trials -> Analysis
    alloctune.export_results(folder, fmt) the choice as env / shell / json / docker / k8s text -> Exported (.text)
    alloctune.compare(folders, ...)       folders and environments side by side, regressions marked -> Compared
    alloctune.record(target, output, ...) record a workload's or a command's allocation trace on a GPU -> Recording
    alloctune.calibrate(...)              time the GPU's driver calls, kept for sweeps -> Calibrated
    alloctune.SweepOptions(...), AnalyzeOptions, ExportOptions, CompareOptions, RecordOptions, CalibrateOptions
    alloctune.load_workload(path, ...)    a validated workload file
    alloctune.load_trace(path)            a PyTorch snapshot or compact trace
    alloctune.replay(trace, confs, ...)   simulate traces under settings, ranked (ReplayOptions -> ReplayResult)
    alloctune.search(trace, ...)          search the settings space by replay (SearchOptions -> SearchResult)
    alloctune.fit(param, traces=...)      the largest batch each setting allows per card (FitOptions -> FitResult)
    alloctune.fleet(traces, ...)          one setting for many jobs (FleetOptions -> FleetResult)
    alloctune.diagnose(source, ...)       the cause of a CUDA out-of-memory error and the next step
    alloctune.dump_on_oom(folder)         leave a memory snapshot at the next OOM, for `diagnose`
    alloctune.step(units=1)               in your own script: mark a step (a no-op outside an alloctune trial)
    alloctune.AlloctuneError              what each of them raises for a wrong argument or input, in one line

Each takes a path or the object another returns (a results folder, a trace).
"""
from importlib import import_module

__version__ = "0.1.0"

_API = {
    "sweep": "api.sweep", "SweepOptions": "api.sweep", "SweepCallbacks": "api.sweep", "SweepNotice": "api.sweep",
    "SweepOutcome": "api.sweep",
    "analyze": "api.analyze", "AnalyzeOptions": "api.analyze", "Analysis": "api.analyze",
    "export_results": "api.export", "export": "api.export", "ExportOptions": "api.export", "Exported": "api.export",
    "compare": "api.compare", "CompareOptions": "api.compare", "Compared": "api.compare",
    "record": "api.record", "RecordOptions": "api.record", "Recording": "api.record",
    "calibrate": "api.calibrate", "CalibrateOptions": "api.calibrate", "Calibrated": "api.calibrate",
    "replay": "api.replay", "ReplayOptions": "api.replay", "ReplayResult": "api.replay",
    "search": "api.search", "SearchOptions": "api.search", "SearchResult": "api.search",
    "fit": "api.fit", "FitOptions": "api.fit", "FitResult": "api.fit",
    "fleet": "api.fleet", "FleetOptions": "api.fleet", "FleetResult": "api.fleet",
    "diagnose": "api.diagnose", "DiagnoseOptions": "api.diagnose",
    "load_workload": "workload.loader", "load_trace": "sim.trace",
    "dump_on_oom": "runtime.oomdump", "step": "runtime.steps", "AlloctuneError": "errors",
}


def __getattr__(name: str):
    if name in _API:
        return getattr(import_module(f"{__name__}.{_API[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted(list(globals()) + list(_API))
