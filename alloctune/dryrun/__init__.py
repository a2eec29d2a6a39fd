"""A dry run: the user's own program run without a GPU, fake tensors standing for CUDA tensors, traced as the
requests the caching allocator would receive (`alloctune record --dry-run -- CMD`; docs/dry-run.md). It runs inside
the user's process, started by the start-up hook (`start`): CUDA made to answer without a device (`native`, which
builds `fakecuda.cpp`; `device`, torch.cuda; `kernels`, the CUDA build's dispatch on a CPU-only one), the tracer
over torch's FakeTensorMode (`tracer`), what it makes up where the program reads the GPU's data (`values`), what the
card's kernels add: attention by the backend the card would choose and its kernels' temporaries (`attention`),
operators a GPU runs as a composite (`composites`), reductions' global buffers (`reductions`), the figures per torch
version and architecture (`cards`); the calls answered above the operators (`functions`), and what it refuses in one
line (`refusal`).
A light package (tests/test_layers.py's `LIGHT`): the standard library, torch and light alloctune modules only."""
