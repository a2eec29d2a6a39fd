"""Allocator settings: their syntax, what each torch version accepts and reads, the grid, and the known problems."""
