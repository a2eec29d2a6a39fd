"""Allocation traces, the caching-allocator simulator, replay and capacity planning."""
