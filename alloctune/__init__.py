"""alloctune: find, prove and export the best PyTorch CUDA caching-allocator configuration for a workload.

The Python API, loaded on first use (trial children import this package too, and must not pay for scipy,
matplotlib or rich):

    alloctune.sweep(workload, ...)        measure or replay a grid, choose, write a results folder
    alloctune.SweepOptions(...)           a sweep's options, checked (sweep() also takes them as keywords)
    alloctune.analyze(folder, ...)        choose again from a folder's recorded trials
    alloctune.load_workload(path, ...)    a validated workload file
    alloctune.load_trace(path)            a PyTorch snapshot or compact trace
    alloctune.replay(trace, confs, ...)   simulate traces under settings, ranked (ReplayOptions -> ReplayResult)
    alloctune.search(trace, ...)          search the settings space by replay (SearchOptions -> SearchResult)
    alloctune.fit(param, traces=...)      the largest batch each setting allows per card (FitOptions -> FitResult)
    alloctune.fleet(traces, ...)          one setting for many jobs (FleetOptions -> FleetResult)
    alloctune.export_results(path, ...)   the choice as env / shell / json / docker / k8s text
    alloctune.diagnose(source, ...)       the cause of a CUDA out-of-memory error and the next step
    alloctune.dump_on_oom(folder)         leave a memory snapshot at the next OOM, for `diagnose`
    alloctune.step(units=1)               in your own script: mark a step (a no-op outside an alloctune trial)
    alloctune.AlloctuneError              what each of them raises for a wrong argument or input, in one line

Each takes a path or the object another returns (a results folder, a trace).
"""
from importlib import import_module

__version__ = "0.1.0"

_API = {
    "sweep": "sweeper.sweep", "analyze": "sweeper.sweep", "load_workload": "workload.loader",
    "load_trace": "sim.trace", "export_results": "report.export",
    "replay": "api.replay", "ReplayOptions": "api.replay", "search": "api.search", "SearchOptions": "api.search",
    "fit": "api.fit", "FitOptions": "api.fit", "fleet": "api.fleet", "FleetOptions": "api.fleet",
    "diagnose": "api.diagnose", "DiagnoseOptions": "api.diagnose",
    "dump_on_oom": "runtime.oomdump", "step": "runtime.steps", "SweepOptions": "sweeper.options",
    "AlloctuneError": "errors",
}


def __getattr__(name: str):
    if name in _API:
        return getattr(import_module(f"{__name__}.{_API[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted(list(globals()) + list(_API))
