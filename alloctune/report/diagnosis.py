"""What `alloctune diagnose` prints: the diagnosis (diagnosis/: its verdict, figures, picture, replay and next
steps, each said in diagnosis/words.py) as lines of a given width (report/layout.py's rule: breaks between words and
items only), the replayed settings in a table that names them by the one rule of every table (tables.numbered)."""
from __future__ import annotations

from typing import TYPE_CHECKING

from ..sim.target import simulated_with
from ..units import format_bytes as fb
from . import layout
from .tables import numbered

if TYPE_CHECKING:
    from ..diagnosis import Diagnosis
    from ..diagnosis.window import WindowReplay


def diagnosis_lines(d: Diagnosis, width: int) -> list[str]:
    """The diagnosis in `width` columns."""
    from ..diagnosis.words import heading, oom_heading, several

    def wrap(text: str, prefix: str) -> list[str]:
        return layout.wrap(text, width, prefix)

    out = _items("source: ", d.sources, width)
    if d.message:
        out += wrap(f"message: {d.message.format}", "")
    out += [line for w in d.warnings for line in wrap(w, "warning: ")]
    v, f = d.verdict, d.facts
    rank = d.message.rank if d.message else None
    if len(d.ooms) > 1 and f:
        head, *each = several([(o.rank, o.facts, o.verdict.cause, o.facts is f) for o in d.ooms],
                              of_snapshot=d.snapshot is not None)
        out += ["", *wrap(head, "")] + [line for e in each for line in wrap(e, "  - ")]
    if v and f:
        out += ["", *wrap(oom_heading(rank, f), ""),
                *wrap(f"{heading(v.cause, v.sure)}: {v.summary}", "")]
        out += [line for r in v.reasons for line in wrap(r, "  - ")]
        out += [line for n in v.notes for line in wrap(n, "  note: ")]
        out += _items("  figures: ", [f"{k.replace('_', ' ')} {fb(n)}" for k, n in v.numbers.items()
                                       if n is not None], width)
    picture = d.picture()
    if picture:
        indents = ["  " + p[:len(p) - len(p.lstrip())] for p in picture]
        out += ["", "Fragmentation picture (snapshot):"]
        out += [line for p, ind in zip(picture, indents) for line in layout.wrap(p.lstrip(), width, ind, ind + "  ")]
    if d.replay:
        # 'The trace replayed with torch 2.11's allocator': the phrase every replay states its torch in
        followed = next((f"The trace {simulated_with(o.torch_version)}" for o in d.replay.outcomes if o.torch_version),
                        "Replay of the trace")
        out += ["", *wrap(f"{followed} (confidence {d.replay.confidence}):", "")]
        out += wrap(d.replay.confidence_reason, "  ") + _replay_table(d.replay, width)
    if v:
        out += ["", "Next steps:"]
        for i, step in enumerate(d.next_steps, 1):
            out += wrap(step, f"  {i}. ")
    return out


def _replay_table(r: WindowReplay, width: int) -> list[str]:
    """The replayed settings, one a line; where the longest do not fit the line, numbered and given whole below."""
    figures = f" {'fits':>4} {'peak reserved':>13} {'retries':>7}"
    labels, below = numbered([o.conf + (" (recorded)" if o.conf == r.recorded_conf else "") for o in r.outcomes],
                             lambda labels: 2 + max(map(len, labels + ["setting"])) + len(figures) <= width)
    column = max(map(len, labels + ["setting"]))
    out = [f"  {'setting':<{column}}{figures}"]
    for label, o in zip(labels, r.outcomes):
        res = o.result
        if res is None:
            out.append(f"  {label:<{column}} {'-':>4} {'not simulated':>13}")
        else:
            out.append(f"  {label:<{column}} {'yes' if o.fits else 'no':>4} "
                       f"{fb(res.peak_reserved_bytes):>13} {res.num_alloc_retries:>7}")
    return out + below


def _items(prefix: str, items: list[str], width: int) -> list[str]:
    """Items joined by commas, wrapped at `width` columns between items only."""
    lines, line = [], prefix
    for i, item in enumerate(items):
        piece = item + ("," if i < len(items) - 1 else "")
        if len(line) + len(piece) > width and line.strip():
            lines.append(line.rstrip())
            line = " " * len(prefix)
        line += piece + " "
    return lines + [line.rstrip()]
