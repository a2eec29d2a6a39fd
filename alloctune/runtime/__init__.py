"""What runs inside a process that runs the workload: the user's own job (the start-up hook, `hook/`, and what it runs)
and, for what it shares, the trial child (`child/`). The user's API: `alloctune.step()` (`steps`),
`alloctune.dump_on_oom()` (`oomdump`). What counts as an out-of-memory error (`oom`, the rule of every part), the
process's rank (`process`), the settings in force as its allocator reports them (`allocator`), memory stats as
figures and the hook's per-process record (`peaks`), a recorded trace: the history switched on, where and how the
hook writes it (`traces`). The hook's: patches as modules load (`imports`), where it sees steps (`stepwatch`), step
counting and the --steps window (`counting`), the automatic window of a confirmation trial (`stopping`), an in-
process confirmation's switching (`alternate`), the process's own device memory, its sampler and budget per device
(`devices`), its allocator-sensitive features (`features`, recorded as an `observation`), the CUDA graph captures a
recording notes (`graphs`), its report filled in at exit (`report`). What alloctune's own process makes of the files
the hook writes is `trial/`'s (`job`, `features`). A light package (tests/test_layers.py's `LIGHT`): the standard
library, torch and light alloctune modules only."""
