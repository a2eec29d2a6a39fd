"""The chosen setting in the form each consumer reads: env file, shell, JSON, Dockerfile, Kubernetes (`render`);
which folder and choice are exported is `api/export.py`'s.

Formats:
  env     `KEY=value` lines, unquoted: `docker run --env-file` takes values literally (no quote processing), and
          systemd `EnvironmentFile` and python-dotenv read the same bytes as the same value, because values are
          restricted to characters none of them treats specially (no quotes, spaces, `#`, `$`, backslash).
          Not for `. file` in a shell (an unquoted '>' there is a redirection): that is what `shell` is for.
  shell   `export KEY='value'` for `. file` in sh/bash/zsh.
  json    an object: {"env": {KEY: value, ...}, "warning" (the comment on the variable, or null), "conf" (the
          setting's name, "default" for the default, as every command's --json names it), "is_default", "env_id",
          "backend", "simulated", "basis" (replayed or measured), for a replayed choice "simulated_torch" (the torch
          its replays followed, as every command's --json states it), "dry_run" (what every command's --json says
          of a dry run: the card it stood for, its table row, the values it made up; null where the figures rest on
          a GPU's), "torch_version", "budget_bytes", "reasons", "source"}; `jq .env` gives the variables.
  docker  Dockerfile `ENV KEY="value"` lines.
  k8s     a container's `env:` list (YAML) on its first line, ready to paste at a container's indentation under
          `containers[i]`; the comments after it.

Which variable: the one the target torch reads first, `known.export_variable(torch)`, for the torch the choice
was made for: the one that ran the trials, or for a replay the one whose allocator was simulated (choice.json's
`torch_version`), not the one the trace was recorded with. Every torch alloctune knows reads
PYTORCH_CUDA_ALLOC_CONF first, and the first one set is used whole: set, even to an empty value, it shadows a
PYTORCH_ALLOC_CONF the job inherits (seen on torch 2.13 with `torch._C._accelerator_getAllocatorSettings()`), so
it is the one name written. (Up to December 2026 export wrote PYTORCH_ALLOC_CONF beside it from 2.10: a second
copy torch never reads while the first is set, which also kept no warning away.) Where that torch may print a
deprecation warning for it (2.9 to 2.12, `known.VARIABLES`), a comment says so: no name avoids it there, since
PYTORCH_ALLOC_CONF alone would lose to an inherited PYTORCH_CUDA_ALLOC_CONF (and 2.9 ignores it). A choice that
does not name its torch gets the same name: every torch reads it.

When the default is best, the variables are exported with an EMPTY value and a comment saying so. PyTorch
treats a set-but-empty variable as "no options" (c10::utils::get_env returns "", parseArgs("") changes nothing),
so the job runs with the defaults, and unlike leaving the variable out this overrides a setting inherited from a
base image, a cluster default or the parent shell, which is what "the default is best" asks for.
"""
from __future__ import annotations

import json
from dataclasses import replace

from .. import __version__
from ..decide.standing import Refusal, hand_picked
from ..errors import AlloctuneError, OptionText, ResultsError, printable, shown
from ..results.choices import ChoiceRecord, how_far
from ..results.folder import ResultsFolder, SweepInfo
from ..results.provenance import Provenance, provenance as trace_provenance
from ..results.vocabulary import BASIS, SIMULATED_TORCH, Basis, setting_name
from ..settings.conf import AllocConf, conf_label
from ..settings.known import export_variable
from ..sim.target import simulated_torch, simulated_with
from ..units import format_bytes
from .provenance import origin
from .words import skipped_words

FORMATS = ("env", "shell", "json", "docker", "k8s")
DEFAULT_FORMAT = "env"

_EMPTY_VALUE = "the empty value makes PyTorch use its defaults and overrides any inherited setting"
DEFAULT_NOTE = f"the default allocator settings were best: {_EMPTY_VALUE}"


def render(choice: ChoiceRecord, fmt: str, provenance: str, instead_of: str | None = None) -> str:
    """The choice (a choice.json entry) as text in format `fmt`; `provenance` becomes the leading comment.
    `instead_of`: the setting the sweep chose, where `choice`'s was set by hand in its place (`with_conf`), as a
    comment says (never that the default was best, when the sweep chose another)."""
    check_format(fmt)
    value = _value(choice)
    variable = export_variable(choice.torch_version)
    name, warning = variable.name, variable.warning
    comments = [_one_line(provenance)] + ([] if instead_of is None else [set_by_hand(instead_of)])
    if value == "":
        comments.append(DEFAULT_NOTE if instead_of is None else f"the default allocator settings: {_EMPTY_VALUE}")
    comments += [warning] if warning else []
    if fmt == "json":
        return _json(choice, name, value, comments[0], warning)
    return _WRITERS[fmt](name, value, comments)


def check_format(fmt: object) -> None:
    """A format this module writes, else an AlloctuneError listing them."""
    if not isinstance(fmt, str) or fmt not in FORMATS:
        raise AlloctuneError(f"unknown export format {shown(fmt)}; expected one of {', '.join(FORMATS)}")


def _value(choice: ChoiceRecord) -> str:
    """The canonical setting string, which survives every format unchanged: parsing refuses any value a reader
    would change (`settings.conf.SAFE_VALUE`)."""
    if choice.setting is None:  # the choice writes conf None (and fits False) when no setting fitted
        raise ResultsError(f"no setting fits on {choice.env_id} ({choice.backend}): every trial "
                           f"failed there, so there is nothing to export")
    return str(choice.setting)


def _one_line(text: str) -> str:
    # A comment must stay one line in every format, whatever a workload name, GPU name or path holds, and hold no
    # control character: YAML refuses one even in a comment, and a terminal acts on it when the file is shown.
    return printable(" ".join(text.split()))


def _comments(comments: list[str]) -> str:
    return "".join(f"# {c}\n" for c in comments)


def _env(name: str, value: str, comments: list[str]) -> str:
    return _comments(comments) + f"{name}={value}\n"


def _shell(name: str, value: str, comments: list[str]) -> str:
    quoted = "'" + value.replace("'", "'\\''") + "'"  # no-op for a parsed setting; kept so quoting is never wrong
    return _comments(comments) + f"export {name}={quoted}\n"


def _docker(name: str, value: str, comments: list[str]) -> str:
    return _comments(comments) + f'ENV {name}="{value}"\n'


def _k8s(name: str, value: str, comments: list[str]) -> str:
    # The container's `env:` key on one line (a flow sequence), first: pasted where the cursor stands at a
    # container's indentation, it sits there whatever the manifest's indentation; the comments follow, as YAML
    # takes a comment at any indentation. json.dumps gives double-quoted scalars: always strings, never read as a
    # bool, number or null.
    return f"env: [{{name: {json.dumps(name)}, value: {json.dumps(value)}}}]\n" + _comments(comments)


def _json(choice: ChoiceRecord, name: str, value: str, source: str, warning: str | None) -> str:
    data = {
        "env": {name: value},
        "warning": warning,
        "conf": setting_name(value),   # as every command's --json names it; "env" holds the value to set
        "is_default": value == "",
        "env_id": choice.env_id, "backend": choice.backend, "simulated": choice.simulated,
        BASIS: Basis.of_trials(choice.simulated).value,
        **({SIMULATED_TORCH: simulated_torch(choice.simulated_as)} if choice.simulated else {}),
        "dry_run": None if (dry := _dry_run(choice)) is None else dry.to_json(),   # as every --json says a dry run
        "budget_bytes": choice.budget_bytes,
        "torch_version": choice.torch_version,
        "reasons": list(choice.reasons),
        "source": source,
    }
    return json.dumps(data, indent=2) + "\n"


_WRITERS = {"env": _env, "shell": _shell, "docker": _docker, "k8s": _k8s}


def provenance(folder: ResultsFolder, info: SweepInfo, choice: ChoiceRecord) -> str:
    """One line: where the numbers came from (workload, environment and GPU, torch, how, budget, date, folder)."""
    env_id = choice.env_id
    dry = _dry_run(choice)
    # a dry run's origin names its card: no GPU ran the job
    gpu = None if dry else choice.env.get("gpu") or (info.envs.get(env_id) or {}).get("gpu")
    # a replayed choice: the card, then the torch its replays followed (not a torch that never ran on that card)
    # beside the one that recorded the trace
    torch = None if choice.simulated else f"torch {choice.torch_version}"
    where = ", ".join(str(x) for x in (gpu, torch) if x)
    if not choice.simulated:
        how = f"measured ({choice.backend})"
    elif dry is not None:
        how = f"{simulated_with(choice.simulated_as)} from {origin(dry)}; nothing was measured"
    else:
        recorded = choice.env.get("trace_torch")
        how = f"{simulated_with(choice.simulated_as)} from a trace" + (f" recorded with torch {recorded}" if recorded
                                                                       else "")
    budget = choice.budget_bytes
    parts = [f"alloctune {__version__}: workload {info.workload_name!r} on {env_id}" + (f" ({where})" if where else ""),
             how]
    if budget:
        parts.append(f"budget {format_bytes(budget)}")
    if not choice.complete:
        parts.append(f"INCOMPLETE sweep ({how_far(choice.trials_recorded, choice.trials_planned)})")
    parts += [f"swept {info.created_at or 'at an unknown date'}", f"results {folder.path}"]
    return "; ".join(parts)


def _dry_run(choice: ChoiceRecord) -> Provenance | None:
    """The dry run whose trace a replayed choice comes from (its trials' environment says: results/provenance.py);
    None for a choice measured, or replayed from a recording."""
    if not choice.simulated:
        return None
    source = trace_provenance(choice.env, "choice.json's env 'dry_run'", ResultsError)
    return None if source.measured else source


def with_conf(folder: ResultsFolder, info: SweepInfo, choice: ChoiceRecord, conf: str) -> ChoiceRecord:
    """The choice with the user's setting instead, refused unless it ran and fitted in the chosen environment
    (`decide/standing.hand_picked`)."""
    pick = hand_picked(choice, str(AllocConf.parse(conf)), folder.trials(), info)
    label, env_id = conf_label(pick.conf), choice.env_id
    if pick.refusal is Refusal.SKIPPED:
        assert pick.skipped is not None
        raise ResultsError(OptionText("{path}: {conf} {label!r} was skipped for {env}: {reason}",
                                      path=folder.path, label=label, env=env_id, reason=skipped_words(pick.skipped)))
    if pick.refusal is Refusal.NOT_RUN:
        ran = sorted(conf_label(c) for c in pick.ran)
        raise ResultsError(OptionText("{path}: {conf} {label!r} was not run for {env} ({backend}); settings run: "
                                      "{ran}", path=folder.path, label=label, env=env_id, backend=choice.backend,
                                      ran=", ".join(ran) or "none"))
    if pick.refusal is Refusal.FAILED:
        raise ResultsError(OptionText("{path}: {conf} {label!r} did not fit on {env}: {state} in {failed} of "
                                      "{trials} trials", path=folder.path, label=label, env=env_id,
                                      state=pick.failed[0].state.value, failed=len(pick.failed), trials=pick.trials))
    assert pick.choice is not None
    return replace(pick.choice, reasons=(set_by_hand(choice.conf),))


def set_by_hand(chosen: str | None) -> str:
    """What a setting exported in place of the sweep's choice `chosen` says of itself."""
    return f"set by hand; the sweep chose {conf_label(chosen)}"
