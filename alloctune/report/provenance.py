"""A trace's provenance in words (results/provenance.py decides it): measured on a GPU, or a dry run for a card.
Every command that shows figures from traces says it from here: record's line, replay's and search's header and
table title, fleet's jobs, fit's (its traces, tables and plot) and sweep's reports; the --json `dry_run` field is
`Provenance.to_json` (a fit's: fit.json's `dry_run`)."""
from __future__ import annotations

from typing import Iterable, Mapping

from ..results.choices import ChoiceRecord
from ..results.provenance import Provenance, provenance
from ..results.vocabulary import Basis
from ..units import format_bytes, plural

MEASURED = "measured on a GPU"


def origin(p: Provenance) -> str:
    """What a trace is, in a few words: 'measured on a GPU', or 'a dry run for CARD (table row ...; made up N
    values the script read from the GPU: KIND n, ...)'."""
    d = p.dry_run
    return MEASURED if d is None else dry_run_words(d.card, d.table, d.made_up, d.invented)


def dry_run_words(card: str, table: str, made_up: int, by_kind: Mapping[str, int] | None = None) -> str:
    """'a dry run for CARD (table row ...; made up 4 values the script read from the GPU: item 3, shape 1)': a dry
    run's trace, a fit's traces or a choice replayed from one, in words no value of a fit's parameter can be taken
    for; without `by_kind` (a choice.json written before its reason kept them) the count alone."""
    kinds = ", ".join(f"{kind} {n}" for kind, n in sorted((by_kind or {}).items()))
    values = f"; made up {plural(made_up, 'value')} the script read from the GPU{f': {kinds}' if kinds else ''}" \
        if made_up else ""
    return f"a dry run for {card} (table row {table}{values})"


def origins(ps: Iterable[Provenance]) -> str:
    """What several traces are: one origin where they share it, else how many of each."""
    ps = list(ps)
    said = list(dict.fromkeys(origin(p) for p in ps))
    if len(said) == 1:
        return said[0]
    dry = sum(1 for p in ps if p.dry_run is not None)
    return f"{plural(dry, 'dry run')} and {plural(len(ps) - dry, 'recording')} made on a GPU"


def figures_kind(choice: ChoiceRecord) -> str:
    """How a group's table and plot are titled by where their figures come from: 'measured' on a GPU, 'replayed'
    from a recording, 'dry run' from a dry run's trace (its trials' environment says which)."""
    if not choice.simulated:
        return Basis.MEASURED.value
    return Basis.REPLAYED.value if provenance(choice.env).measured else "dry run"


def title(p: Provenance | Iterable[Provenance], text: str) -> str:
    """A table's title, prefixed with where its figures come from when any trace is a dry run."""
    ps = [p] if isinstance(p, Provenance) else list(p)
    return titled(sum(1 for x in ps if not x.measured), len(ps), text)


def titled(dry: int, traces: int, text: str) -> str:
    """A table's title from `traces` traces, `dry` of them dry runs' (`title`; a fit's, whose traces are one kind)."""
    if not dry:
        return text
    return f"{'Dry run (nothing measured)' if dry == traces else f'{dry} of {traces} traces from a dry run'}. {text}"


def workspace_warning(p: Provenance) -> str | None:
    """What a dry run could not size (cuDNN's convolution workspaces), and by how much that may leave its peak
    reserved short; None where there is nothing of the kind."""
    w = p.dry_run.workspaces if p.dry_run is not None else None
    if w is None or not w.convolutions:
        return None
    up_to = (f"reserved memory may be up to {format_bytes(w.reserved_up_to_bytes)} higher under the default "
             f"setting" if w.reserved_up_to_bytes is not None else "reserved memory may be higher")
    return (f"cuDNN workspaces unknown for {plural(w.convolutions, 'convolution')}: {up_to} (each workspace at "
            f"most {w.bound}; cuDNN picks it on the card)")
