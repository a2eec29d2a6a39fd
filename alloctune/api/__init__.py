"""The use cases, one library function each, between the command line (cli/) and the parts they join: each takes
typed options (a frozen dataclass, checked as a whole when made: a bad field is an OptionError naming it), returns a
typed result, and is what both the CLI and the Python API (the root package's names) call. None prints; what they
return, the next takes.

    replay     traces replayed under settings, ranked; the maximum over ranks (ReplayOptions -> ReplayResult)
    search     the settings space searched by replay, its Pareto front (SearchOptions -> SearchResult)
    fleet      one setting for many jobs (FleetOptions -> FleetResult)
    fit        the largest value of a parameter each setting allows per card or budget (FitOptions -> FitResult)
    diagnose   an OOM's cause and the next step (DiagnoseOptions -> diagnosis.Diagnosis)

and what they share: options (options given as an object or as keywords, the checks many share, the progress
callback) and inputs (a trace given as a path or a Trace; the device a replay runs on, and its warnings).
"""
