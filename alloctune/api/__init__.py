"""The use cases, one library function each, between the command line and the parts each joins: what both
`alloctune COMMAND` (cli/) and the Python API (the root package) call. Each takes typed options (a frozen
dataclass, checked when made; or its fields as keyword arguments) and returns a typed result; none prints.

    options.py    keyword arguments into a use case's options, one way for every function (split, build)
    checks.py     the checks fields of several use cases share (sizes, counts, settings, paths), and Progress
    inputs.py     a trace given as a path or a Trace; the device a replay runs on, and the warnings about it
    replay.py     replay(): traces replayed under settings, ranked; the maximum over ranks -> ReplayResult
    search.py     search(): the settings space searched by replay, its Pareto front -> SearchResult
    fleet.py      fleet(): one setting for many jobs, by what each gives up -> FleetResult
    fit.py        fit(): the largest value of a parameter each setting allows per card or budget -> FitResult
    diagnose.py   diagnose(): an OOM's cause and the next step -> diagnosis.Diagnosis

What one returns, the next takes: a Diagnosis's `recommended_conf` goes to replay (and sweep) as a setting.
"""
