"""Allocation traces and the caching-allocator simulator: traces (`trace`; snapshots read without running code:
`pickles`; a snapshot's entries as events: `entries`; a snapshot taken at an OOM as every replay runs it: `rebuilt`;
a recording's CUDA graph captures placed among them: `captures`; our xz format: `compact`; how much a trace may hold
and what a replay assumes unless told: `limits`), the allocator in Python (`blocks`, `segments`, `allocator`; CUDA
graphs' private pools: `pools`; what a setting means to it: `config`) and in C++ (`_core.cpp`), one replay
(`simulate`), the steady steps and the driver work per step (`steady`), many settings and capacity (`replay`), which
torch a replay follows, one rule for every command (`target`), the settings space (`space`) and its search
(`search`), replays across traces (`points`: one job at several values of a parameter, a fleet's peaks)."""
