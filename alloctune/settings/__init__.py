"""Allocator settings: every key, declared once (`keys`), their syntax (`conf`), what each torch version accepts
and reads (`versions`), the known problems of settings and versions (`known`), what the allocator reports back
(`readback`), who judges a setting for a target torch (`validation`), the grid (`grid`)."""
