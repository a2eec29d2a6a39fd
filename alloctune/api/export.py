"""`export_results()` (also `export`): which results folder and which of its choices to hand over, checked, and that
choice as the text of a format (report/export.py writes the formats). What `alloctune export` runs."""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from ..errors import OptionError, OptionText, ResultsError, shown
from ..decide.standing import standing
from ..report.export import DEFAULT_FORMAT, with_conf, check_format, provenance, render
from ..results.choices import ChoiceRecord, how_far
from ..results.folder import ResultsFolder, SweepInfo, find_results
from ..results.names import CHOICE_FILE
from ..settings.versions import NEWEST_KNOWN, check_conf
from ..units import format_bytes
from .options import options_of


@dataclass(frozen=True)
class ExportOptions:
    format: str = DEFAULT_FORMAT        # env, shell, json, docker or k8s (report/export.FORMATS)
    workload: str | None = None         # of a folder of results folders: the one of this workload
    conf: str | None = None             # this setting (one that ran and fitted there) instead of the choice
    env_id: str | None = None           # the choice of this environment, where the sweep had several
    allow_incomplete: bool = False      # a choice `alloctune report` took from an interrupted sweep

    def __post_init__(self) -> None:
        check_format(self.format)
        for name in ("workload", "conf", "env_id"):
            if (value := getattr(self, name)) is not None and not isinstance(value, str):
                raise OptionError(name, "{%s}: expected a str, got {got}" % name, got=shown(value))
        if not isinstance(self.allow_incomplete, bool):
            raise OptionError("allow_incomplete", "{allow_incomplete}: expected True or False, got {got}",
                              got=shown(self.allow_incomplete))


@dataclass(frozen=True)
class Exported:
    folder: ResultsFolder
    choice: ChoiceRecord   # the choice exported: with `conf`, that setting in the chosen one's place
    format: str
    text: str              # the choice in `format`, its provenance the leading comment
    # of a folder of results folders: those left out, holding no trials (results/folder.py's `NO_TRIALS`)
    skipped: tuple[ResultsFolder, ...] = ()


def export_results(folder: str | os.PathLike | ResultsFolder, format: str | None = None,
                   options: ExportOptions | None = None, **fields: Any) -> Exported:
    """The choice of a results folder (a ResultsFolder, as `sweep()` returns it, or a path; or the one selected
    from a folder of them) as text in `format` (default env): `export_results(folder, "json", env_id=...)`.

    `options` (an ExportOptions) or its fields as keywords: `workload` selects a folder by workload name, `env_id`
    a choice by environment; `conf` exports that setting instead of the chosen one, provided it ran and fitted in
    that environment. A choice taken from an interrupted sweep (`alloctune report` before it finished) is refused
    unless `allow_incomplete`. Of a folder of results folders, those that hold no trials (a sweep refused or stopped
    before its first trial) are left out, as `Exported.skipped` says."""
    options = options_of("export_results", ExportOptions, options,
                         fields if format is None else dict(fields, format=format))
    skipped: list[ResultsFolder] = []
    found, info = _select_folder(folder.path if isinstance(folder, ResultsFolder) else folder, options.workload,
                                 skipped)
    choice = _select_choice(found, options.env_id)
    _check_setting(found, choice)
    if not choice.complete and not options.allow_incomplete:
        raise ResultsError(OptionText("{path}: the sweep is incomplete ({how}); run it again to resume, or pass "
                                      "{allow_incomplete=True} to export this choice anyway", path=found.path,
                                      how=how_far(choice.trials_recorded, choice.trials_planned)))
    chosen = choice.conf
    if options.conf is not None:
        choice = with_conf(found, info, choice, options.conf)
    text = render(choice, options.format, provenance(found, info, choice),
                  instead_of=None if options.conf is None else chosen)
    return Exported(found, choice, options.format, text, tuple(skipped))


export = export_results


def _select_folder(path: str | os.PathLike, workload: str | None, empty: list[ResultsFolder]
                   ) -> tuple[ResultsFolder, SweepInfo]:
    """The results folder at `path`, or the one below it (of `workload`); those below it that hold no trials are
    left out, into `empty` (`find_results`)."""
    found = [(f, f.info()) for f in find_results(path, empty)]
    if workload is not None:
        names = sorted({i.workload_name for _, i in found})
        found = [(f, i) for f, i in found if i.workload_name == workload]
        if not found:
            raise ResultsError(f"{path}: no results for workload {workload!r}; workloads here: {', '.join(names)}")
    if len(found) > 1:
        # One folder a line: a path is copied whole, and a long list stays readable.
        options = "".join(f"\n  {f.path}" + ("" if workload else f" (workload {i.workload_name!r})")
                          for f, i in found)
        if workload is not None:
            raise ResultsError(OptionText("{path} holds {count} results folders of workload {name!r}; give the "
                                          "folder itself, one of:{options}", path=path, count=len(found),
                                          name=workload, options=options))
        raise ResultsError(OptionText("{path} holds {count} results folders; choose one with {workload} or give "
                                      "the folder itself, one of:{options}", path=path, count=len(found),
                                      options=options))
    return found[0]


def _select_choice(folder: ResultsFolder, env_id: str | None) -> ChoiceRecord:
    choices = folder.choices()
    if not choices:
        raise ResultsError(f"{folder.path}: {CHOICE_FILE} holds no choice")
    if env_id is not None:
        known = sorted({c.env_id for c in choices})
        choices = [c for c in choices if c.env_id == env_id]
        if not choices:
            raise ResultsError(f"{folder.path}: no choice for environment {env_id!r}; environments: "
                               f"{', '.join(known)}")
    choices = standing(choices)
    if len(choices) > 1:
        # one `{env_id} <id>` per choice, the ids as values (never read as placeholders)
        ids = {f"id{i}": c.env_id for i, c in enumerate(choices)}
        options = "; ".join(f"{{env_id}} {{id{i}}} (backend {c.backend}, budget {format_bytes(c.budget_bytes)})"
                            for i, c in enumerate(choices))
        raise ResultsError(OptionText("{path} holds {count} choices; choose one: " + options, path=folder.path,
                                      count=len(choices), **ids))
    return choices[0]


def _check_setting(folder: ResultsFolder, choice: ChoiceRecord) -> None:
    """A hand-edited choice.json may name any key: export only a setting the choice's torch accepts (the
    newest torch we know, for a choice that does not say)."""
    if choice.setting is None:
        return
    torch_version = choice.torch_version or ".".join(map(str, NEWEST_KNOWN))
    if problem := check_conf(choice.setting, torch_version):
        where = f"{folder.path / CHOICE_FILE}: field 'choices[{folder.choices().index(choice)}].conf'"
        raise ResultsError(f"{where}: {problem}")
