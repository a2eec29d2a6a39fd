"""Allocator settings: their syntax (`conf`), what each torch version accepts and reads (`versions`), what the allocator reports back (`readback`), the grid (`grid`)."""
