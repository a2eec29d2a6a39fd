"""`compare()`: results side by side across folders and environments (torch versions, GPUs, interpreters), judged
against the first, with compare.md and compare.png written where asked; what `alloctune compare` runs. Reads the
folders only; folders of different workloads are refused unless forced (`one_workload`).

Grouping is by two explicit key functions: a row is a workload and a setting (`row_key`), a column is one
environment of one results folder (`column_key`). The first column is the baseline; every other cell is judged
against the baseline cell of its row by `decide/regression.judge`; report/compare.py says what qualifies each mark,
report/compare_output.py shows the comparison.
"""
from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from ..decide.regression import DEFAULT_FACTOR, Delta, Mark, budget_of, cell_of, judge
from ..decide.summary import counted
from ..errors import AlloctuneError, OptionError, OptionText, ResultsError, shown
from ..report.compare import Column, Comparison, Row, note, why_missing
from ..report.compare_output import plot_comparison, write_compare_md
from ..results.folder import ResultsFolder, SweepInfo, find_results
from ..results.records import SIM_PREFIX, Backend, TrialRecord
from ..units import plural
from .checks import path, set_field
from .options import options_of

MARKDOWN_FILE, PLOT_FILE = "compare.md", "compare.png"


@dataclass(frozen=True)
class CompareOptions:
    factor: float = DEFAULT_FACTOR            # relative change beyond which memory or throughput counts as changed
    output: str | os.PathLike | None = None   # the folder of compare.md and compare.png (None: write neither)
    force: bool = False                       # compare folders of different workloads (their rows never meet)

    def __post_init__(self) -> None:
        factor = self.factor
        if isinstance(factor, bool) or not isinstance(factor, (int, float)) or not 0 < factor < 1:   # NaN fails
            raise OptionError("factor", "{factor} must be a fraction in (0, 1) such as {default}, got {got!r}",
                              default=DEFAULT_FACTOR, got=factor)
        if self.output is not None:
            set_field(self, "output", path(self.output, "output"))
        if not isinstance(self.force, bool):
            raise OptionError("force", "{force}: expected True or False, got {got}", got=shown(self.force))


@dataclass(frozen=True)
class Compared:
    comparison: Comparison
    markdown: Path | None   # compare.md, where it was written
    plot: Path | None       # compare.png


def compare(folders: Sequence[str | os.PathLike | ResultsFolder] | str | os.PathLike | ResultsFolder,
            options: CompareOptions | None = None, **fields: Any) -> Compared:
    """Every (workload, setting) of `folders` (results folders, as `sweep()` returns them, or paths, or folders
    of them) across their environments, the first one the baseline; compare.md and compare.png written into
    `output` where given. `options` (a CompareOptions) or its fields as keywords: `compare([a, b], factor=0.05)`."""
    options = options_of("compare", CompareOptions, options, fields)
    given = [folders] if isinstance(folders, (str, os.PathLike, ResultsFolder)) else (
        list(folders) if isinstance(folders, Iterable) and not isinstance(folders, bytes) else [])
    if not given:
        raise AlloctuneError(f"compare: expected results folders (paths or ResultsFolders; the first is the "
                             f"baseline), got {shown(folders)}")
    if options.output is not None and os.path.exists(options.output) and not os.path.isdir(options.output):
        raise OptionError("output", "{output}: {got} is a file; give a folder for compare.md and compare.png",
                          got=shown(options.output))
    found = [folder for path in given for folder in find_results(path)]
    if not options.force:
        one_workload(found)
    comparison = compare_folders(found, options.factor)
    if options.output is None:
        return Compared(comparison, None, None)
    out = Path(options.output)
    out.mkdir(parents=True, exist_ok=True)
    return Compared(comparison, write_compare_md(comparison, out / MARKDOWN_FILE),
                    plot_comparison(comparison, out / PLOT_FILE))


def one_workload(folders: list[ResultsFolder]) -> None:
    """Folders of one workload, as its definition hashes it (its parameters and preset): another workload's rows
    never meet the baseline's, so such a comparison says nothing but 'incomparable'; refused unless forced."""
    infos = [folder.info() for folder in folders]
    other = next((i for i, info in enumerate(infos) if info.workload_hash != infos[0].workload_hash), None)
    if other is not None:
        def named(i: int) -> str:
            return f"{folders[i].path} ({infos[i].workload_label}, definition {infos[i].workload_hash[:12]})"

        raise ResultsError(OptionText("{first} and {second} are sweeps of different workloads, whose settings "
                                      "compare nothing; {force} compares them anyway", first=named(0),
                                      second=named(other)))


def row_key(record: TrialRecord) -> tuple[str, str]:
    """A row: workload name and canonical setting."""
    return record.workload, record.conf


def column_key(folder_index: int, record: TrialRecord) -> tuple[int, str, str]:
    """A column: one environment (and backend: a replay never compares with a measurement) of one folder."""
    return folder_index, record.env_id, record.backend


def compare_folders(folders: list[ResultsFolder], factor: float = DEFAULT_FACTOR) -> Comparison:
    """Every (workload, setting) row across every environment column of `folders`, judged against column 0 at
    `factor` (CompareOptions checks it)."""
    infos = [f.info() for f in folders]
    groups: dict[tuple, dict[tuple, list[TrialRecord]]] = {}
    for index, folder in enumerate(folders):
        for record in counted(folder.trials()):   # the trials its sweep's own figures rest on, as its report's
            groups.setdefault(column_key(index, record), {}).setdefault(row_key(record), []).append(record)
    if len(groups) < 2:
        raise ResultsError(f"nothing to compare: {', '.join(str(f.path) for f in folders)} "
                           f"{'holds' if len(folders) == 1 else 'hold'} {plural(len(groups), 'environment')} with "
                           f"trials; compare needs at least two")
    keys = list(groups)
    labels = _labels(keys, folders)
    columns = [_column(key, label, folders[key[0]], infos[key[0]], groups[key]) for key, label in zip(keys, labels)]
    # Settings of a grid that ran nowhere (e.g. skipped in every environment) still get a row saying why.
    row_keys = list(dict.fromkeys([rk for key in keys for rk in groups[key]]
                                  + [(info.workload_name, str(c)) for info in infos for c in info.settings]))
    rows = []
    for workload, conf in row_keys:
        cells = [cell_of(groups[key][(workload, conf)], infos[key[0]].budget_fraction)
                 if (workload, conf) in groups[key] else None for key in keys]
        missing = ["" if cell else why_missing(infos[key[0]], workload, conf, key[1])
                   for key, cell in zip(keys, cells)]
        row = Row(workload, conf, cells, missing)
        row.deltas = [Delta(Mark.BASELINE)] + [judge(cells[0], cells[j], factor) for j in range(1, len(keys))]
        row.notes = [note(row, j, columns) for j in range(len(keys))]
        rows.append(row)
    return Comparison(columns, rows, factor)


def _labels(keys: list[tuple], folders: list[ResultsFolder]) -> list[str]:
    """The env_id; the folder's name instead where two columns share an env_id (the same torch swept twice)."""
    plain = [env + (" (sim)" if backend == Backend.SIM and not env.startswith(SIM_PREFIX) else "")
             for _, env, backend in keys]
    per_folder = Counter(index for index, _, _ in keys)
    labels = []
    for (index, env, _), label in zip(keys, plain):
        if plain.count(label) > 1:
            name = folders[index].path.name
            label = f"{name}:{label}" if per_folder[index] > 1 else name
        labels.append(label)
    return [f"{i + 1}:{label}" if labels.count(label) > 1 else label for i, label in enumerate(labels)]


def _first(records: list[TrialRecord], name: str) -> str | None:
    return next((r.env[name] for r in records if r.env.get(name)), None)


def _column(key, label: str, folder: ResultsFolder, info: SweepInfo, rows: dict) -> Column:
    _, env_id, backend = key
    records = [r for rs in rows.values() for r in rs]
    # A replay's env describes the recording (its 'torch' is the trace's); 'simulated_as' names the torch whose
    # allocator the simulator followed, which is what this column stands for.
    simulated_as = _first(records, "simulated_as")
    torch_version = simulated_as or (info.envs.get(env_id) or {}).get("torch") or _first(records, "torch")
    facts = dict(key=key, label=label, folder=folder.path, env_id=env_id, backend=backend,
                 torch_version=torch_version, trace_torch=_first(records, "trace_torch") if simulated_as else None,
                 budget_bytes=budget_of(records, info.budget_fraction), budget_fraction=info.budget_fraction)
    if not folder.has_choice():
        return Column(**facts, best=None, best_note="no choice: sweep not finished")
    choices = folder.choices()  # damage in it is an error, not an unfinished sweep
    match = [c for c in choices if c.env_id == env_id and c.backend == backend]
    if not match:
        return Column(**facts, best=None, best_note="no choice for this environment")
    choice = match[0]
    if choice.setting is None:  # nothing fits: the decision says why
        return Column(**facts, best=None, best_note=choice.decision or "nothing fits")
    return Column(**facts, best=str(choice.setting), best_note=choice.decision)


