"""The grid of allocator settings a sweep tries: the default grid, expansion of grid entries, and the rules that
drop invalid, pointless or known-broken settings before any trial, each with a reason the user sees. Grid policy
lives here; which settings have known problems on a torch is `known.py`'s table, consulted here."""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from pathlib import Path

import yaml

from ..errors import ConfError
from ..files import read_text, yaml_problem
from .conf import AllocConf
from .keys import KEYS
from .known import Problem, forbidden_combination
from .versions import check_conf, did_you_mean, parse_version

# '' (the default) first: it is the baseline every other setting is judged against. Each entry costs GPU trials.
DEFAULT_GRID: list[str] = [
    "",
    "expandable_segments:True",
    "max_split_size_mb:128",
    "max_split_size_mb:512",
    "garbage_collection_threshold:0.6",   # these two only run under a budget (they need a memory fraction < 1)
    "garbage_collection_threshold:0.8",
    "roundup_power2_divisions:4",
    "roundup_power2_divisions:[256:1,512:2,1024:4,>:8]",   # the example of PyTorch's documentation
    "backend:cudaMallocAsync",
]


@dataclass(frozen=True)
class Skip:
    setting: AllocConf
    reason: str
    rejected: bool = False   # the target torch refuses it (not merely pointless under the rules)
    problem: Problem | None = None   # the known problem it has on the target torch whatever the job does

    @property
    def conf(self) -> str:
        """The setting, canonical."""
        return str(self.setting)

    @property
    def said(self) -> str:
        """The skip in words, as every command says it (replay, fleet, fit)."""
        return f"skipped {self.setting.label}: {self.reason}"

    def to_json(self) -> dict:
        return {"conf": self.conf, "reason": self.reason}


# The settings a grid may expand to: ten times the most a search replays (400). Each is a trial on the GPU or a
# replay; a few keys with a few values each multiply to millions (eight keys of eight: 16.8 M in 1.6 KB), which
# are counted, not made.
MAX_GRID_SETTINGS = 4000


def expand(entries) -> list[AllocConf]:
    """Settings from grid entries: conf strings ('' or 'default' for the default, an `AllocConf`), and mappings of
    key -> list of values whose cartesian product is taken (a value of None leaves the key out). The default is
    always first; duplicates are removed, order kept. More than MAX_GRID_SETTINGS are refused before any is made."""
    if isinstance(entries, (str, dict, AllocConf)):
        entries = [entries]
    try:
        entries = list(entries)
    except TypeError:
        raise ConfError(f"a grid is a list of settings, got {entries!r}") from None
    listed = 0
    for entry in entries:
        listed += math.prod(len(v) if isinstance(v, (list, tuple)) else 1 for v in entry.values()) \
            if isinstance(entry, dict) else 1
        if listed > MAX_GRID_SETTINGS:
            raise ConfError(f"the grid lists more than {MAX_GRID_SETTINGS:,} settings (its mappings' products "
                            f"counted): each costs a trial or a replay; name fewer values")
    confs = [AllocConf()]
    for entry in entries:
        confs.extend(_expand_entry(entry))
    seen, unique = set(), []
    for conf in confs:
        if str(conf) not in seen:
            seen.add(str(conf))
            unique.append(conf)
    return unique


def _expand_entry(entry) -> list[AllocConf]:
    if entry is None:
        return [AllocConf()]
    if isinstance(entry, AllocConf):
        return [entry]
    if isinstance(entry, str):
        return [AllocConf.parse(entry)]
    if not isinstance(entry, dict):
        raise ConfError(f"a grid entry is a setting string or a mapping of key -> list of values, got {entry!r}")
    if not entry:
        raise ConfError("empty mapping in grid: give key -> list of values, e.g. {max_split_size_mb: [128, 512]}")
    keys, choices = [], []
    for key, values in entry.items():
        if not isinstance(key, str) or not key:
            raise ConfError(f"grid key must be a setting name such as 'max_split_size_mb', got {key!r}")
        values = values if isinstance(values, (list, tuple)) else [values]
        if not values:
            raise ConfError(f"grid key {key!r} has an empty list of values")
        keys.append(key)
        choices.append(values)
    return [AllocConf.parse(",".join(f"{k}:{_format(v)}" for k, v in zip(keys, combo) if v is not None))
            for combo in itertools.product(*choices)]


def _format(value) -> str:
    if isinstance(value, bool):   # YAML turns True into a bool; PyTorch wants exactly 'True' / 'False'
        return "True" if value else "False"
    if isinstance(value, (list, tuple)):
        raise ConfError(f"write a divisions list as a string such as '[256:1,>:4]', got {value!r}")
    return str(value)


def apply_rules(confs, torch_version: str | None, *, has_budget: bool,
                accepted: dict[str, str | None] | None = None) -> tuple[list[AllocConf], list[Skip]]:
    """Split `confs` into those worth a trial and those skipped, with every reason that applies.

    `accepted` holds the probed interpreter's verdicts (`probe.check_settings`): None = accepted, else why not;
    settings it has no verdict for are checked against the version table. A setting with a known problem on
    `torch_version` whatever the job does (`known.forbidden_combination`; None: on any torch) is skipped with the
    worst one's reason and source. The default is never dropped: it is the baseline.
    """
    if torch_version is not None:
        parse_version(torch_version)   # a malformed version fails here, once, not per setting
    kept, skipped = [], []
    for conf in confs:
        if conf.is_default:
            kept.append(conf)
            continue
        invalid = _invalid(conf, torch_version, accepted or {})
        problem = forbidden_combination(conf, torch_version)
        reasons = ([invalid] if invalid else []) + _reasons(conf, has_budget) + ([problem.reason] if problem else [])
        if reasons:
            skipped.append(Skip(conf, "; ".join(reasons), bool(invalid), problem))
        else:
            kept.append(conf)
    return kept, skipped


def refuse_rejected(skips: list[Skip], torch_version: str | None) -> None:
    """Settings the user named (--conf, --grid, a workload's grid:) that the target torch rejects stop the run:
    a typo silently dropped would make the default win. Only default-grid entries may be dropped quietly."""
    for skip in skips:
        if skip.rejected:
            hint = did_you_mean(skip.setting, torch_version) if torch_version else None
            raise ConfError(f"setting {skip.conf!r}: {skip.reason}{hint or ''}; fix or remove it")


def _invalid(conf: AllocConf, torch_version: str | None, accepted: dict[str, str | None]) -> str | None:
    """Why the target torch refuses `conf`, or None. The probed interpreter's verdict, where there is one, beats
    the static table (it is torch's own parser)."""
    if str(conf) in accepted:
        return accepted[str(conf)]
    return check_conf(conf, torch_version) if torch_version else None


def _reasons(conf: AllocConf, has_budget: bool) -> list[str]:
    """Why a setting torch accepts is still not worth a trial, by grid policy."""
    known = [KEYS[name] for name in conf.keys if name in KEYS]
    reasons = [f"{key.name} does not belong in a grid: use --budget, which puts every setting under the same "
               "limit so they compare fairly" for key in known if key.is_budget]
    if not has_budget:
        reasons += [f"{key.name} does nothing without a memory fraction below 1: give --budget to try it"
                    for key in known if key.needs_budget]
    return reasons


# A grid of every setting a search tries (400) takes some 20 KB; a file fifty times that is not a grid.
MAX_GRID_BYTES = 2**20


def ranked_settings(entries: list, torch_version: str | None, *,
                    has_budget: bool) -> tuple[list[AllocConf], list[Skip]]:
    """What a replay ranks (replay, fit, fleet): the settings named (--conf, --grid entries), else the default grid,
    under the sweep's rules; a named setting the target torch rejects stops the run (`refuse_rejected`)."""
    confs, skipped = apply_rules(expand(entries or DEFAULT_GRID), torch_version, has_budget=has_budget)
    if entries:
        refuse_rejected(skipped, torch_version)
    return confs, skipped


def load_grid_file(path) -> list:
    """Grid entries from a YAML list (a mapping with a 'grid' list also works) or a plain text file with one
    setting per line ('#' starts a comment); '-' reads stdin. Entries are checked here, so errors name the file."""
    path = Path(path)
    try:
        text = read_text(path, MAX_GRID_BYTES, "a grid file", ConfError)
    except OSError as exc:
        raise ConfError(f"cannot read grid file {path}: {exc.strerror or exc}") from None
    lines = [line.split("#", 1)[0].strip() for line in text.splitlines()]
    lines = [line for line in lines if line]
    if path.suffix in (".yaml", ".yml") or any(line.startswith(("-", "[", "{", "grid:")) for line in lines):
        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise ConfError(f"grid file {path} is not valid YAML: {yaml_problem(exc, text)}") from None
        if isinstance(data, dict) and set(data) == {"grid"}:
            data = data["grid"]
        if not isinstance(data, list) or not data:
            raise ConfError(f"grid file {path} must hold a non-empty YAML list of settings "
                            f"(or 'grid:' with one), got {type(data).__name__}")
        entries = data
    else:
        if not lines:
            raise ConfError(f"grid file {path} holds no settings")
        entries = lines
    try:
        expand(entries)
    except ConfError as exc:
        raise ConfError(f"grid file {path}: {exc}") from None
    return entries
