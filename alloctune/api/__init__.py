"""The use cases, one library function each, between the command line and the parts each joins: what both
`alloctune COMMAND` (cli/) and the Python API (the root package) call. Each takes typed options (a frozen
dataclass, checked when made; or its fields as keyword arguments) and returns a typed result; none prints.

    options.py    keyword arguments into a use case's options, one way for every function (split, build)
    checks.py     the checks fields of several use cases share (sizes, counts, settings, paths), and Progress
    inputs.py     a trace given as a path or a Trace; the device a replay runs on, and the warnings about it
    sweep.py      sweep(): a workload's or a command's settings measured or replayed, chosen, written -> SweepOutcome
    analyze.py    analyze(): decide again from a folder's trials (`alloctune report`) -> Analysis
    export.py     export_results() (export): a folder's choice as env / shell / json / docker / k8s -> Exported
    compare.py    compare(): folders and environments side by side, compare.md and compare.png -> Compared
    record.py     record(): a workload's or a command's allocation trace, on the GPU -> Recording
    calibrate.py  calibrate(): the GPU's driver-call costs, kept for sweeps -> Calibrated
    replay.py     replay(): traces replayed under settings, ranked; the maximum over ranks -> ReplayResult
    search.py     search(): the settings space searched by replay, its Pareto front -> SearchResult
    fleet.py      fleet(): one setting for many jobs, by what each gives up -> FleetResult
    fit.py        fit(): the largest value of a parameter each setting allows per card or budget -> FitResult
    fitchecks.py  the checks of a fit's options that are a fit's alone (values, cards, the command's marks)
    diagnose.py   diagnose(): an OOM's cause and the next step -> diagnosis.Diagnosis

What one returns, the next takes: a Recording's `paths` go to replay, search, fit and fleet; a SweepOutcome's
`folder` (or a path) to analyze, export_results and compare; a Diagnosis's `recommended_conf` to replay and sweep
as a setting.
"""
