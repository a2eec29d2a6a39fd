"""One trial in a fresh process: the task (`task`), running it (`launch`, `command`), the child that measures
(`child`, `timing`), memory stats as figures and the hook's per-process record (`peaks`), probing interpreters
(`probe`, its child side `probe_child`, `provenance`), recording a trace (`recording`), the start-up hook (`hook/`)
and what it runs inside the job: patches as modules load (`imports`), where it sees steps (`stepwatch`), step
counting and the --steps window (`counting`), the process's own device memory, its sampler and budget per device
(`devices`), its allocator-sensitive features (`features`, `observation`)."""
