"""Allocation traces, the caching-allocator simulator, replay and capacity planning, replays
across traces (`points`: one job at several values of a parameter, a fleet)."""
