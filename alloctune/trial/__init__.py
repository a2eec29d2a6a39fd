"""One trial in a fresh process: the task (`task`), running it (`launch`, `command`), the child that measures
(`child`, `timing`), memory stats as figures and the hook's per-process record (`peaks`), probing interpreters
(`probe`, `provenance`), recording a trace (`recording`), the start-up hook (`hook/`) and what it observes of the
job's allocator-sensitive features (`features`, `observation`)."""
