"""A results folder: what a sweep asked for (`sweep.json`), what it measured (`trials.jsonl`) and what it
decided (`choice.json`, written only once the sweep finished).

    results/<workload>-<YYYYmmdd-HHMMSS>/
        sweep.json  trials.jsonl  choice.json  summary.md  best.env  plot.png
"""
from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

from .conf import canonical
from .errors import ResultsError
from .records import TrialRecord
from .store import TRIALS_FILE, TrialStore

RESULTS_SCHEMA = 1
SWEEP_FILE = "sweep.json"
CHOICE_FILE = "choice.json"


@dataclass(frozen=True)
class Skipped:
    """A grid setting that was not run, and why (invalid for that torch, pointless, known upstream bug)."""

    conf: str
    reason: str
    env_id: str | None = None


@dataclass
class SweepInfo:
    """What a sweep asked for: the frozen spec, kept apart from the samples."""

    workload_name: str
    workload_hash: str
    workload: dict                    # WorkloadSpec.to_dict()
    grid: list[str]                   # canonical settings that were run ('' = default)
    skipped: list[Skipped] = field(default_factory=list)
    envs: dict = field(default_factory=dict)   # env_id -> probe facts (python, torch, cuda, driver, gpu, ...)
    repeats: int = 1                  # fixed repeats, or with auto_repeats the most rounds (--max-repeats)
    auto_repeats: bool = False        # --repeats auto: rounds until each answer is known (rounds.py)
    time_budget_s: float | None = None
    budget_bytes: int | None = None
    budget_fraction: float | None = None
    backend: str = "cuda"             # 'cuda', 'sim' or 'hybrid'
    trace: dict | None = None         # replayed trace: {path, sha256}; a different trace is a different sweep
    search: int | None = None         # --search: the most settings replayed per interpreter (else the grid)
    max_slowdown: float = 0.02
    command: str = ""
    created_at: str = ""
    alloctune_version: str = ""
    schema: int = RESULTS_SCHEMA

    def to_json(self) -> dict:
        return asdict(self)

    def skip_reason(self, conf: str, env_id: str) -> str | None:
        """Why this sweep did not run `conf` (canonical) for `env_id`, or None."""
        for skipped in self.skipped:
            if skipped.env_id in (None, env_id) and canonical(skipped.conf) == conf:
                return skipped.reason
        return None

    @classmethod
    def from_json(cls, data: dict) -> "SweepInfo":
        known = {f.name for f in fields(cls)}
        data = {k: v for k, v in data.items() if k in known}
        data["skipped"] = [Skipped(**s) for s in data.get("skipped", [])]
        return cls(**data)


def _write_json(path: Path, data: dict) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    os.replace(tmp, path)  # atomic: a reader never sees half a file


def _read_json(path: Path, what: str) -> dict:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ResultsError(f"{path}: no {what} here") from None
    except json.JSONDecodeError as exc:
        raise ResultsError(f"{path}: not valid JSON ({exc})") from None
    if not isinstance(data, dict) or data.get("schema") != RESULTS_SCHEMA:
        version = data.get("schema") if isinstance(data, dict) else None
        raise ResultsError(f"{path}: {what} schema version {version!r}; this alloctune reads {RESULTS_SCHEMA}")
    return data


class ResultsFolder:
    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        self.store = TrialStore(self.path / TRIALS_FILE)

    @classmethod
    def create(cls, path: str | os.PathLike, info: SweepInfo) -> "ResultsFolder":
        folder = cls(path)
        folder.path.mkdir(parents=True, exist_ok=True)
        folder.write_info(info)
        return folder

    def write_info(self, info: SweepInfo) -> None:
        _write_json(self.path / SWEEP_FILE, info.to_json())

    def info(self) -> SweepInfo:
        if not self.path.is_dir():
            raise ResultsError(f"{self.path}: not a results folder (no such directory)")
        return SweepInfo.from_json(_read_json(self.path / SWEEP_FILE, "sweep description (sweep.json)"))

    def trials(self) -> list[TrialRecord]:
        return self.store.load()

    def write_choice(self, choices: list[dict]) -> None:
        _write_json(self.path / CHOICE_FILE, {"schema": RESULTS_SCHEMA, "choices": choices})

    def choices(self) -> list[dict]:
        """The decisions (one per environment and backend); refuses a sweep that did not finish."""
        path = self.path / CHOICE_FILE
        if not path.exists():
            raise ResultsError(f"{self.path}: this sweep has not finished a choice (no {CHOICE_FILE}); "
                               f"run the sweep again to resume it")
        return _read_json(path, "choice")["choices"]


def find_results(path: str | os.PathLike) -> list[ResultsFolder]:
    """A results folder itself, or every results folder directly below `path` (sorted by name)."""
    path = Path(path)
    if (path / SWEEP_FILE).exists():
        return [ResultsFolder(path)]
    found = sorted(p for p in path.iterdir() if (p / SWEEP_FILE).exists()) if path.is_dir() else []
    if not found:
        raise ResultsError(f"{path}: no results folder here (expected {SWEEP_FILE})")
    return [ResultsFolder(p) for p in found]
