"""Allocator settings: every key, declared once (`keys`), their syntax (`conf`), what each torch version accepts
and reads (`versions`), the known problems of settings and versions (`known`), what the allocator reports back
(`readback`), which pairs one process can switch between while it runs (`switching`), who judges a setting for a
target torch (`validation`), the grid (`grid`)."""
