"""The use cases, one library function each, between the command line and the parts each joins: what both
`alloctune COMMAND` (cli/) and the Python API (the root package) call. Each takes typed options (a frozen
dataclass, checked when made; or its fields as keyword arguments) and returns a typed result; none prints.

    options.py    keyword arguments into a use case's options, one way for every function (split, build)
    sweep.py      sweep(): a workload's settings measured or replayed, chosen, written -> SweepOutcome
    analyze.py    analyze(): decide again from a folder's trials (`alloctune report`) -> Analysis
    export.py     export_results() (export): a folder's choice as env / shell / json / docker / k8s -> Exported
    compare.py    compare(): folders and environments side by side, compare.md and compare.png -> Compared
    record.py     record(): a workload's or a command's allocation trace, on the GPU -> Recording
    calibrate.py  calibrate(): the GPU's driver-call costs, kept for sweeps -> Calibrated

What one returns, the next takes: a SweepOutcome's `folder` (or a path) goes to analyze, export_results and compare.
"""
