"""Allocation traces, the caching-allocator simulator, replay and capacity planning (which torch a replay follows,
one rule for every command: `target`), replays across traces (`points`: one job at several values of a parameter, a
fleet)."""
