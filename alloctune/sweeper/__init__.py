"""A sweep's mechanics, in the order a sweep runs (api/sweep.py joins them):

    options.py  SweepOptions (what a sweep is asked, every check of it) and SweepCallbacks (what it reports)
    plan.py     what will run: the executor, the interpreters probed, the backend resolved, the settings each
                torch accepts, the trace to replay; the SweepInfo that identifies the sweep
    resume.py   the results folder: the one given, the same sweep's (resumed), or a new one; locked
    execute.py  the trials run and appended to the trials file; rounds for `repeats` 'auto'
    hybrid.py   planning by replay: recording the trace, searching (decide/finalists.py picks what the GPU measures)
    confirm.py  `repeats` 'confirm' (a hybrid's default): calibration, predictions, the plan, one confirmation
                pair, rounds only where asked
    sweep.py    the plan's trials run in order (`run_plan`) and the first estimate of the GPU trials; `sweep()`,
                the flow around it, is api/sweep.py's
    fitting.py  `alloctune fit` answered from traces at several values of a parameter (no GPU)
    fitrun.py   ... its recordings at each value and its confirmations, on the GPU
    fitexact.py ... the values that settle its answers recorded and replayed, so that answers come from replays
    fitcopies.py ... its copies at once run together on the GPU
    executors/  where trials run: local child processes, simulator replays, a Ray cluster
"""
