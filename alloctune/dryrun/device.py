"""torch.cuda as the program sees it in a dry run: one device, the card the dry run stands for (`cards.Card`), its
streams and events (no work runs, so they only name the stream each allocation is made on), and memory figures from
what the tracer saw. The allocator's reserved memory is not known without a replay: memory_reserved and the
reserved_bytes statistics give the allocated bytes. Replaces the functions of torch.cuda and torch.cuda.memory by
name, as the program and torch itself look them up there.
"""
from __future__ import annotations

import contextlib
import itertools
import pickle
from types import SimpleNamespace
from typing import Any, Iterator

from ..files import write_file
from .cards import Card
from .tracer import Tracer


class Stream:
    """A CUDA stream of the dry run: an id for the trace (0 is the default stream)."""

    _ids = itertools.count(1)

    def __init__(self, device: Any = None, priority: int = 0, stream_id: int | None = None, **_: Any):
        import torch

        self.cuda_stream = next(self._ids) if stream_id is None else stream_id
        self.device, self.priority = torch.device("cuda", 0), priority
        self.stream_id, self.device_index, self.device_type = self.cuda_stream, 0, 1

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Stream) and other.cuda_stream == self.cuda_stream

    def __hash__(self) -> int:
        return hash(("stream", self.cuda_stream))

    def wait_stream(self, stream: Any) -> None: ...
    def wait_event(self, event: Any) -> None: ...
    def synchronize(self) -> None: ...

    def query(self) -> bool:
        return True

    def record_event(self, event: Any = None) -> Event:
        return event or Event()


class Event:
    def __init__(self, *args: Any, **kwargs: Any): ...
    def record(self, stream: Any = None) -> None: ...
    def wait(self, stream: Any = None) -> None: ...
    def synchronize(self) -> None: ...

    def query(self) -> bool:
        return True

    def elapsed_time(self, other: Any) -> float:
        return 0.0


class Device:
    """torch.cuda.device(i): the one device."""

    def __init__(self, device: Any = None): ...
    def __enter__(self) -> Device: return self
    def __exit__(self, *exc: Any) -> None: ...


def _memory(tracer: Tracer, card: Card) -> dict[str, Any]:
    def stats(device: Any = None) -> dict[str, int]:
        out = {}
        for name, current, peak in (("allocated_bytes", tracer.allocated, tracer.peak_allocated),
                                    ("reserved_bytes", tracer.allocated, tracer.peak_allocated),
                                    ("active_bytes", tracer.allocated, tracer.peak_allocated),
                                    ("requested_bytes", tracer.allocated, tracer.peak_allocated)):
            out[f"{name}.all.current"], out[f"{name}.all.peak"] = current, peak
        return {**out, "num_alloc_retries": 0, "num_ooms": 0}

    def reset_peak(device: Any = None) -> None:
        tracer.peak_allocated = tracer.allocated

    def dump(filename: str = "dump_snapshot.pickle") -> None:
        write_file(filename, pickle.dumps(tracer.snapshot()))

    allocated = lambda device=None: tracer.allocated   # noqa: E731
    peak = lambda device=None: tracer.peak_allocated   # noqa: E731
    return {"memory_stats": stats, "memory_allocated": allocated, "max_memory_allocated": peak,
            "memory_reserved": allocated, "max_memory_reserved": peak, "reset_peak_memory_stats": reset_peak,
            "reset_max_memory_allocated": reset_peak, "reset_max_memory_cached": reset_peak,
            "reset_accumulated_memory_stats": lambda device=None: None, "empty_cache": tracer.empty_cache,
            "mem_get_info": lambda device=None: (card.total_memory - tracer.allocated, card.total_memory),
            "memory_summary": lambda device=None, abbreviated=False: "alloctune dry run: no allocator to summarise",
            "get_allocator_backend": lambda: "native", "_record_memory_history": lambda *a, **k: None,
            "_snapshot": lambda device=None, *a, **k: tracer.snapshot(), "_dump_snapshot": dump,
            "set_per_process_memory_fraction": lambda fraction, device=None: None,
            "get_per_process_memory_fraction": lambda device=None: 1.0}


def _device(card: Card) -> dict[str, Any]:
    properties = SimpleNamespace(name=card.name, total_memory=card.total_memory, major=card.capability[0],
                                 minor=card.capability[1], multi_processor_count=card.multi_processor_count,
                                 is_integrated=False, is_multi_gpu_board=False, L2_cache_size=50 * 2**20,
                                 uuid="dry-run", warp_size=32, gcnArchName="")
    nothing = lambda *a, **k: None   # noqa: E731
    return {"is_available": lambda: True, "device_count": lambda: 1, "current_device": lambda: 0,
            "set_device": nothing, "device": Device, "device_of": Device, "_lazy_init": nothing, "init": nothing,
            "is_initialized": lambda: True, "is_current_stream_capturing": lambda: False,
            "get_device_name": lambda device=None: card.name,
            "get_device_capability": lambda device=None: card.capability,
            "get_device_properties": lambda device=None: properties,
            "get_arch_list": lambda: [f"sm_{card.capability[0]}{card.capability[1]}"],
            "is_bf16_supported": lambda including_emulation=True: card.capability >= (8, 0),
            "synchronize": nothing, "ipc_collect": nothing, "manual_seed": nothing, "manual_seed_all": nothing,
            "seed": nothing, "seed_all": nothing, "initial_seed": lambda: 0, "set_rng_state": nothing,
            "set_rng_state_all": nothing}


def _streams(tracer: Tracer) -> dict[str, Any]:
    default = Stream(stream_id=0)

    def current_stream(device: Any = None) -> Stream:
        return streams.get(tracer.stream, default)

    def set_stream(stream: Stream | None) -> None:
        if stream is not None:
            streams[stream.cuda_stream] = stream
            tracer.stream = stream.cuda_stream

    @contextlib.contextmanager
    def stream(stream: Stream | None) -> Iterator[None]:
        before = current_stream()
        set_stream(stream)
        try:
            yield
        finally:
            set_stream(before)

    streams = {0: default}
    return {"Stream": Stream, "ExternalStream": Stream, "Event": Event, "current_stream": current_stream,
            "default_stream": lambda device=None: default, "set_stream": set_stream, "stream": stream}


def install(torch: Any, card: Card, tracer: Tracer) -> None:
    """Replace torch.cuda's device, stream and memory functions with the dry run's (`torch` with torch.cuda.memory
    and torch.cuda.nvtx loaded)."""
    memory = _memory(tracer, card)
    for name, value in {**_device(card), **_streams(tracer), **memory}.items():
        setattr(torch.cuda, name, value)
    for name, value in memory.items():
        setattr(torch.cuda.memory, name, value)
    for name in ("range_push", "range_pop", "mark", "range_start", "range_end"):
        setattr(torch.cuda.nvtx, name, lambda *a, **k: 0)
    torch.cuda.nvtx.range = lambda *a, **k: contextlib.nullcontext()
    torch.cuda.get_rng_state = lambda device="cuda": torch.zeros(16, dtype=torch.uint8)
    torch.cuda.get_rng_state_all = lambda: [torch.cuda.get_rng_state()]
