"""Known problems of allocator settings: which setting, under which feature of the job, on which torch versions,
how bad, and the public record it rests on. The one table the grid, the search, the choice, `diagnose` and
`export` consult, plus the variables each torch reads the setting from.

A problem applies when the setting matches (`Setting`), the target torch lies in its range (`Versions`) and the
job used every feature in `when` (`Feature`, observed in each trial by `runtime/features.py`); an empty `when`
means always, whatever the job does. Ranges say what could be established from the sources: `first` is the
earliest release known to be affected, `fixed` the first release known to be free of it; where the record gives
no release the bound is None, and `evidence` says what is known instead.

Imports only the standard library and the light settings modules: trial children load it.
"""
from __future__ import annotations

from dataclasses import dataclass, fields
from enum import Enum
from typing import Iterable, Mapping

from .conf import AllocConf
from .keys import names
from .versions import Version, _fmt, parse_version


class Feature(str, Enum):
    """What a job does that an allocator setting can break or be undone by (observed per trial)."""

    CUDA_GRAPHS = "cuda_graphs"                          # captured CUDA graphs (torch.cuda.graph, CUDAGraph)
    GRAPH_SHARED_POOL = "graph_shared_pool"              # captures shared a pool (pool=, graph_pool_handle)
    COMPILE_CUDAGRAPHS = "compile_cudagraphs"            # torch.compile asked for CUDA graphs
    CUDA_IPC = "cuda_ipc"                                # CUDA tensors sent to or received from other processes
    MEM_POOL = "mem_pool"                                # torch.cuda.MemPool / use_mem_pool
    MEM_POOL_CUSTOM_ALLOCATOR = "mem_pool_custom_allocator"  # a MemPool given its own allocator
    NCCL = "nccl"                                        # an NCCL process group
    NCCL_GRAPH_REGISTRATION = "nccl_graph_registration"  # an NCCL group with NCCL_GRAPH_REGISTER not 0
    NCCL_USER_BUFFERS = "nccl_user_buffers"              # NCCL user-buffer registration (allocator hook, mem pool)
    RUNTIME_ALLOCATOR_CHANGE = "runtime_allocator_change"  # allocator settings changed at run time
    UNREAD_VARIABLE = "unread_variable"                  # an allocator variable set that this torch did not use
    VLLM = "vllm"                                        # the job imported vllm
    TORCH_MEMORY_SAVER = "torch_memory_saver"            # the job imported torch_memory_saver


class Severity(str, Enum):
    """How a problem shows, worst first."""

    BROKEN = "broken"            # crash, hang, illegal memory access
    WASTEFUL = "wasteful"        # runs, but holds memory it does not need
    INEFFECTIVE = "ineffective"  # the setting, or part of it, does not take effect


_WORST_FIRST = tuple(Severity)
ALWAYS: frozenset[Feature] = frozenset()

# The table's own words, which report/ (a choice's reasons, summary.md) and diagnosis/ (diagnose's next steps) say
# its problems with: what a job did, as the start-up hook saw it ("the job <words>"), and what a problem of each
# severity can do to it ("it can <words>").
FEATURE_WORDS = {
    Feature.CUDA_GRAPHS: "captured CUDA graphs",
    Feature.GRAPH_SHARED_POOL: "shared a memory pool between CUDA graph captures",
    Feature.COMPILE_CUDAGRAPHS: "asked torch.compile for CUDA graphs",
    Feature.CUDA_IPC: "sent or received CUDA tensors between processes",
    Feature.MEM_POOL: "used torch.cuda.MemPool",
    Feature.MEM_POOL_CUSTOM_ALLOCATOR: "gave a MemPool its own allocator",
    Feature.NCCL: "ran an NCCL process group",
    Feature.NCCL_GRAPH_REGISTRATION: "left NCCL_GRAPH_REGISTER on, NCCL's default",
    Feature.NCCL_USER_BUFFERS: "registered NCCL user buffers",
    Feature.RUNTIME_ALLOCATOR_CHANGE: "changed allocator settings at run time",
    Feature.UNREAD_VARIABLE: "set an allocator variable its torch did not read",
    Feature.VLLM: "imported vllm",
    Feature.TORCH_MEMORY_SAVER: "imported torch_memory_saver",
}
SEVERITY_WORDS = {Severity.BROKEN: "break the job", Severity.WASTEFUL: "waste memory",
                  Severity.INEFFECTIVE: "take no effect (in part or whole)"}


def features_phrase(features: Iterable[Feature]) -> str:
    """'captured CUDA graphs and ran an NCCL process group'."""
    said = [FEATURE_WORDS[f] for f in features]
    return ", ".join(said[:-1]) + " and " + said[-1] if len(said) > 1 else "".join(said)

# Keys only the native allocator reads (backend:cudaMallocAsync's driver pool has no blocks to split, round,
# collect or map into segments).
NATIVE_ONLY_KEYS = names(lambda key: key.native_only)
# Those a run-time parse puts back to their defaults unless it gives them.
RESET_AT_RUN_TIME = names(lambda key: key.resets)
# Every name a setting is read from by some torch build (HIP: ROCm builds, which this table does not cover): a
# trial removes them all and sets its own.
ALLOC_CONF_VARS = ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF", "PYTORCH_HIP_ALLOC_CONF")

KeyValue = bool | str | None   # None: the key given with any value


@dataclass(frozen=True)
class Setting:
    """The part of a setting a problem concerns: every key of `all_of` given with that value (None: any
    value), and, when `any_of` is not empty, at least one of its keys given. With both empty: any setting
    but the default."""

    all_of: tuple[tuple[str, KeyValue], ...] = ()
    any_of: tuple[str, ...] = ()

    def matches(self, conf: AllocConf) -> bool:
        if conf.is_default:
            return False
        given = _values(conf)
        for key, want in self.all_of:
            if key not in given or (want is not None and given[key] != want):
                return False
        return not self.any_of or any(key in given for key in self.any_of)

    def __str__(self) -> str:
        parts = [key if want is None else f"{key}:{_show(want)}" for key, want in self.all_of]
        if self.any_of:
            parts.append(" or ".join(self.any_of))
        return " with ".join(parts) or "any setting"


@dataclass(frozen=True)
class Versions:
    """Releases affected: from `first` (None: none known before the fix, so every torch from 2.1, the oldest
    alloctune supports) up to, not including, `fixed` (None: no fix known)."""

    first: Version | None = None
    fixed: Version | None = None

    def __contains__(self, version: Version) -> bool:
        return (self.first is None or version >= self.first) and (self.fixed is None or version < self.fixed)

    def overlaps(self, other: "Versions") -> bool:
        """Some release lies in both ranges."""
        first = max((v for v in (self.first, other.first) if v is not None), default=None)
        fixed = min((v for v in (self.fixed, other.fixed) if v is not None), default=None)
        return first is None or fixed is None or first < fixed

    def __str__(self) -> str:
        if self.first and self.fixed:
            return f"{_fmt(self.first)} to before {_fmt(self.fixed)}"
        if self.first:
            return f"from {_fmt(self.first)}"
        if self.fixed:
            return f"before {_fmt(self.fixed)}"
        return "every version"


@dataclass(frozen=True)
class Problem:
    id: str
    setting: Setting
    when: frozenset[Feature]   # the job used all of these; empty (ALWAYS): whatever it does
    versions: Versions
    severity: Severity
    summary: str               # one line, plain words
    source: str                # the public record (URL) this entry rests on
    evidence: str              # what the sources establish about the versions
    also: tuple[str, ...] = ()  # further public records, read for this entry

    @property
    def reason(self) -> str:
        """What a user reads: the summary, the versions, the source."""
        return f"{self.summary} (torch {self.versions}; {self.source})"


@dataclass(frozen=True)
class Variable:
    """An environment variable the CUDA allocator reads its setting from."""

    name: str
    read: Versions                 # the versions whose CUDA allocator reads it
    warns: Versions | None      # the versions that print a deprecation warning when it is set
    source: str
    evidence: str


_ISSUES = "https://github.com/pytorch/pytorch/issues/"
_PULLS = "https://github.com/pytorch/pytorch/pull/"
# The shared parser: TORCH_WARN for cudaMallocAsync with native keys, parseArgs' resets (read at this commit).
_ALLOCATOR_CONFIG = ("https://github.com/pytorch/pytorch/blob/065861fba7598880aa3216822742a1172d0a197c/"
                     "c10/core/AllocatorConfig.cpp")
_EXPANDABLE: tuple[tuple[str, KeyValue], ...] = (("expandable_segments", True),)
_EXPANDABLE_MAX_SPLIT = Setting(_EXPANDABLE + (("max_split_size_mb", None),))

# Table order: within a severity, the order summaries list them.
PROBLEMS: tuple[Problem, ...] = (
    Problem(
        "expandable-max-split-assert", _EXPANDABLE_MAX_SPLIT, ALWAYS, Versions(fixed=(2, 3, 0)), Severity.BROKEN,
        "expandable segments with max_split_size_mb can fail an internal assert (!block->expandable_segment_)",
        _ISSUES + "119452",
        "reported 2024-02; fixed by PR #120022 (merged 2024-02-16), so from 2.3 by its merge date",
        also=(_PULLS + "120022",)),
    Problem(
        "expandable-near-oom-assert", Setting(_EXPANDABLE, ("max_split_size_mb", "garbage_collection_threshold")),
        ALWAYS, Versions(fixed=(2, 5, 0)), Severity.BROKEN,
        "with expandable segments, max_split_size_mb or garbage_collection_threshold could fail allocator "
        "asserts near out-of-memory (their release paths tried to free expandable segments)",
        _PULLS + "134338",
        "fixed by PR #134338 (merged 2024-08-29), so from 2.5 by its merge date"),
    Problem(
        "expandable-max-split-growth", _EXPANDABLE_MAX_SPLIT, ALWAYS, Versions(first=(2, 12, 0)), Severity.WASTEFUL,
        "expandable segments with max_split_size_mb: reserved memory can grow without bound while allocated "
        "stays small (the oversize rule keeps free blocks inside expandable segments from being reused)",
        _ISSUES + "123548",
        "reproduced on 2.12.0, 2.12.1, 2.13.0 and a 2.14 nightly, not on 2.9.1 (ROCm builds, in the thread of "
        "PR #193400); 2.10 and 2.11 not measured; the fix (PR #193400) is not merged",
        also=(_PULLS + "193400",)),
    Problem(
        "expandable-ignores-max-split", _EXPANDABLE_MAX_SPLIT, ALWAYS, Versions(first=(2, 3, 0)),
        Severity.INEFFECTIVE,
        "expandable segments ignore max_split_size_mb when splitting blocks: the key only matters to "
        "non-expandable segments",
        _PULLS + "120022",
        "PR #120022 (merged 2024-02-16, so from 2.3 by its merge date) made expandable segments ignore it",
        also=(_ISSUES + "119452",)),
    Problem(
        "expandable-ignores-gc", Setting(_EXPANDABLE + (("garbage_collection_threshold", None),)), ALWAYS,
        Versions(first=(2, 5, 0)), Severity.INEFFECTIVE,
        "garbage collection skips expandable segments: with them on, garbage_collection_threshold frees nothing "
        "they hold",
        _PULLS + "134338",
        "PR #134338 (merged 2024-08-29, so from 2.5 by its merge date)"),
    Problem(
        "async-ignores-native-keys", Setting((("backend", "cudaMallocAsync"),), NATIVE_ONLY_KEYS), ALWAYS,
        Versions(), Severity.INEFFECTIVE,
        "backend:cudaMallocAsync ignores the native allocator's keys: the trial would repeat plain cudaMallocAsync",
        _ALLOCATOR_CONFIG,
        "the parser warns so for max_split_size_mb, roundup_power2_divisions and garbage_collection_threshold "
        "and marks expandable_segments and max_non_split_rounding_mb native-only too; large_segment_size_mb "
        "(2.11) sizes native segments, which the driver's pool does not have"),
    Problem(
        "expandable-cuda-ipc-pidfd", Setting(_EXPANDABLE), frozenset({Feature.CUDA_IPC}), Versions(),
        Severity.BROKEN,
        "CUDA tensors shared between processes fail with 'pidfd_getfd: Operation not permitted' where ptrace is "
        "restricted (containers): expandable segments pass their memory as file descriptors taken with "
        "pidfd_getfd",
        _ISSUES + "165685",
        "reported on 2.9.0 (open), and on an NGC 26.03 container as 'Bad file descriptor' (#179220); the "
        "pidfd path came with IPC for expandable segments (PR #130890), whose thread reports it on 2.6 nightlies",
        also=(_ISSUES + "179220", _PULLS + "130890")),
    Problem(
        "expandable-nccl-graph-register", Setting(_EXPANDABLE),
        frozenset({Feature.CUDA_GRAPHS, Feature.NCCL_GRAPH_REGISTRATION}), Versions(), Severity.BROKEN,
        "NCCL collectives captured in CUDA graphs register their buffers with NCCL (NCCL_GRAPH_REGISTER, on by "
        "default), which expandable segments break: illegal memory access or a hang; NCCL_GRAPH_REGISTER=0 "
        "avoids it",
        "https://github.com/NVIDIA/Megatron-LM/pull/2572",
        "Megatron-LM asserts NCCL_GRAPH_REGISTER=0 for Transformer Engine CUDA graphs with expandable segments "
        "(its local graphs trained with them, PR #2572); NeMo drops the allocator setting when CUDA graphs are "
        "on; torchtitan PR #2050 cites pytorch#158029, which was not in the record this table was checked "
        "against; NCCL cannot register buffers spanning several segments (pytorch#165419); no torch or NCCL "
        "version range known",
        also=("https://github.com/pytorch/torchtitan/pull/2050", "https://github.com/NVIDIA-NeMo/Speech/pull/14739",
              "https://github.com/NVIDIA-NeMo/Megatron-Bridge/pull/3845", _ISSUES + "165419")),
    Problem(
        "expandable-cudagraph-nccl-hang", Setting(_EXPANDABLE), frozenset({Feature.CUDA_GRAPHS, Feature.NCCL}),
        Versions(), Severity.BROKEN,
        "context parallelism with CUDA graphs hangs until the NCCL watchdog fires with expandable segments on "
        "(alloctune cannot tell context parallelism from other NCCL use: this covers any NCCL job that "
        "captures graphs)",
        "https://github.com/pytorch/torchtitan/issues/3306",
        "torchtitan's graph trainer, 2026-05; the issue is closed without a cause in the record"),
    Problem(
        "expandable-vllm-custom-allreduce", Setting(_EXPANDABLE), frozenset({Feature.VLLM}), Versions(),
        Severity.BROKEN,
        "vLLM's custom all-reduce exports CUDA-graph buffers with cudaIpcGetMemHandle, which rejects "
        "expandable-segment memory: workers die with 'invalid argument' under tensor parallelism "
        "(--disable-custom-all-reduce avoids it)",
        "https://github.com/vllm-project/vllm/issues/42609",
        "vLLM 0.20.2 on 4 H200 and 0.22.0 (open); a vLLM bug, whatever the torch version",
        also=("https://github.com/vllm-project/vllm/pull/56193",)),
    Problem(
        "expandable-torch-memory-saver", Setting(_EXPANDABLE), frozenset({Feature.TORCH_MEMORY_SAVER}), Versions(),
        Severity.BROKEN,
        "torch_memory_saver refuses expandable segments (RuntimeError); before it did, pause() freed nothing",
        "https://github.com/fzyzcjy/torch_memory_saver/issues/24",
        "the refusal came with its PR #25 (2025-07); whatever the torch version",
        also=("https://github.com/fzyzcjy/torch_memory_saver/pull/25",)),
    Problem(
        "expandable-vllm-sleep-mode", Setting(_EXPANDABLE), frozenset({Feature.VLLM}), Versions(),
        Severity.INEFFECTIVE,
        "vLLM's sleep mode keeps expandable segments out of its memory pool: older vLLM refuses the setting, "
        "newer vLLM turns it off while its pool is in use",
        "https://github.com/vllm-project/vllm/pull/14189",
        "refused from PR #14189 (2025-03), switched off around the pool from PR #40812 (2026-04); whatever the "
        "torch version (pytorch#147851)",
        also=("https://github.com/vllm-project/vllm/pull/40812", _ISSUES + "147851")),
    Problem(
        "expandable-mempool-custom-allocator", Setting(_EXPANDABLE), frozenset({Feature.MEM_POOL_CUSTOM_ALLOCATOR}),
        Versions(), Severity.INEFFECTIVE,
        "a memory pool with its own allocator does not use expandable segments (a plain MemPool does)",
        _PULLS + "185818",
        "the allocator code quoted in PR #185818 (2026-06); earlier, PR #148378 (2025-03) made any MemPool with "
        "expandable segments an error; the releases of each are not established",
        also=(_ISSUES + "147851", _PULLS + "148378")),
    Problem(
        "runtime-change-resets-keys", Setting(any_of=RESET_AT_RUN_TIME),
        frozenset({Feature.RUNTIME_ALLOCATOR_CHANGE}), Versions(), Severity.INEFFECTIVE,
        "the job changes allocator settings at run time, which puts max_split_size_mb, roundup_power2_divisions "
        "and garbage_collection_threshold back to their defaults unless the change gives them",
        _ALLOCATOR_CONFIG,
        "parseArgs resets the three first in every version read (CUDAAllocatorConfig.cpp before the shared "
        "parser, AllocatorConfig.cpp after)"),
    Problem(
        "alloc-conf-unread-2.9", Setting(), frozenset({Feature.UNREAD_VARIABLE}), Versions((2, 9, 0), (2, 10, 0)),
        Severity.INEFFECTIVE,
        "torch 2.9's CUDA allocator does not read PYTORCH_ALLOC_CONF, although 2.9 calls PYTORCH_CUDA_ALLOC_CONF "
        "deprecated: a setting given only there takes no effect",
        _ISSUES + "183387",
        "reported on 2.9.1; from 2.10 PYTORCH_ALLOC_CONF is read after PYTORCH_CUDA_ALLOC_CONF "
        "(docs/ALLOCATOR.md, seen on 2.11)"),
)

# Lookup order: the first one set is used, whole.
VARIABLES: tuple[Variable, ...] = (
    Variable("PYTORCH_CUDA_ALLOC_CONF", Versions(), Versions((2, 9, 0), (2, 13, 0)), _ISSUES + "183387",
             "every torch reads it first; 2.9.1 prints 'PYTORCH_CUDA_ALLOC_CONF is deprecated, use "
             "PYTORCH_ALLOC_CONF instead' (#183387); the 2.13.0 and 2.14.1 binaries hold no such message "
             "(checked); 2.10 to 2.12 not checked, so taken to print it"),
    Variable("PYTORCH_ALLOC_CONF", Versions(first=(2, 10, 0)), None, _ISSUES + "183387",
             "2.9 has the name but its CUDA allocator ignores it (#183387); read second from 2.10 "
             "(docs/ALLOCATOR.md, seen on 2.11)"),
)


@dataclass(frozen=True)
class ExportVariable:
    name: str
    warning: str | None   # why this torch may print a deprecation warning for it, or None


def problems(conf: AllocConf, torch_version: str | None,
             features: Iterable[Feature] = ()) -> list[Problem]:
    """The known problems of `conf` on `torch_version` (None: the version is unknown, so every range) for a job
    that used `features`, worst first. Without features: only those that always apply."""
    used = frozenset(features)
    version = parse_version(torch_version) if torch_version is not None else None
    found = [p for p in PROBLEMS
             if p.setting.matches(conf) and p.when <= used and (version is None or version in p.versions)]
    return sorted(found, key=lambda p: _WORST_FIRST.index(p.severity))


def forbidden_combination(conf: AllocConf, torch_version: str | None) -> Problem | None:
    """The worst problem `conf` has on `torch_version` whatever the job does, or None: the grid and the search
    leave such settings out."""
    return next(iter(problems(conf, torch_version)), None)


def env_vars_read(torch_version: str) -> tuple[str, ...]:
    """The variables this torch's CUDA allocator reads, in lookup order."""
    version = parse_version(torch_version)
    return tuple(v.name for v in VARIABLES if version in v.read)


def variable_read(environ: Mapping[str, str], torch_version: str) -> str | None:
    """The variable this torch took its setting from in `environ` (the first set in lookup order), or None."""
    return next((name for name in env_vars_read(torch_version) if name in environ), None)


def unread_variables(environ: Mapping[str, str], torch_version: str) -> tuple[str, ...]:
    """The allocator variables set in `environ` that this torch did not use: unknown to its CUDA allocator, or
    shadowed by one read before them."""
    used = variable_read(environ, torch_version)
    return tuple(name for name in ALLOC_CONF_VARS if name in environ and name != used)


def export_variable(torch_version: str | None) -> ExportVariable:
    """The variable to write for this torch: the first it reads, which nothing in the job's environment can
    shadow (a later name would lose to an inherited PYTORCH_CUDA_ALLOC_CONF), with the deprecation warning it
    may print there. Every known version reads PYTORCH_CUDA_ALLOC_CONF first; none reads a name without the
    warning where that one prints it, so the warning is said, not avoided. None (the torch is unknown): the
    first variable every version reads, with no warning to say."""
    if torch_version is None:
        return ExportVariable(next(v for v in VARIABLES if v.read == Versions()).name, None)
    version = parse_version(torch_version)
    first = next(v for v in VARIABLES if version in v.read)
    warning = None
    if first.warns is not None and version in first.warns:
        warning = (f"torch {_fmt(version)} may print a deprecation warning for {first.name}: harmless, it is "
                   f"the name this torch reads first ({first.source})")
    return ExportVariable(first.name, warning)


def _values(conf: AllocConf) -> dict[str, object]:
    given: dict[str, object] = {f.name: getattr(conf, f.name) for f in fields(conf)
                                if f.name != "extra" and getattr(conf, f.name) is not None}
    given.update(conf.extra)
    return given


def _show(value: KeyValue) -> str:
    return ("True" if value else "False") if isinstance(value, bool) else str(value)
