"""`alloctune fit`'s words on what its answers rest on: where the context each process holds came from, the
recordings made to answer from replays (how many, of at most how many, and why not where none was made or one
failed), and where a curve still decides, its margin and where that came from (its leave-one-out error, and the value
it missed most), or why it has none."""
from __future__ import annotations

from ..results.fits import UNTESTED, FitFile, NotExact, OverheadFrom, SettingFit
from ..settings.conf import conf_label
from ..units import plural

OVERHEAD_WORDS = {
    OverheadFrom.MEASURED: "as the recordings measured it",
    OverheadFrom.TABLE: "the card's, from the dry run's table",
    OverheadFrom.GIVEN: "as given",
    OverheadFrom.ASSUMED: "assumed: the recordings do not say",
}

_NOT_RUN = {
    NotExact.TRACES: "fitted to traces recorded before: no command to record at the answers",
    NotExact.NO_GPU: "no GPU seen by the command's interpreter to record at the answers",
    NotExact.NONE: "no recording past the values given was allowed (--extra-recordings 0)",
}


def exact_lines(fit: FitFile) -> list[str]:
    """How many answers are exact and what was recorded to make them so, or why nothing was."""
    answers = [a for limit in fit.limits for a in limit.answers]
    inexact = sum(not a.exact for a in answers)
    record = fit.exact
    if record is None or not answers:
        return []
    if record.not_run is not None:
        return [f"Answers at values not recorded are the curve's ({_NOT_RUN[record.not_run]})."]
    verb = "recorded" if fit.dry_run is None else "traced"
    made = (f"{verb} {plural(len(record.values), 'more value')} ({', '.join(map(str, sorted(record.values)))}) of "
            f"at most {record.most}" if record.values else f"{verb} no more value (at most {record.most})")
    lines = [f"To answer from replays, {made}: {len(answers) - inexact} of {len(answers)} answers are exact."]
    for failed in sorted(record.failed, key=lambda f: f.value):   # by value, as every list of values is said
        lines.append(f"  {fit.param}={failed.value}: not recorded: {failed.why}")
    if record.beyond:
        gpu = "the recording GPU" if fit.dry_run is None else f"the {fit.dry_run.card}"
        lines.append(f"  {fit.param} {', '.join(map(str, record.beyond))}: beyond what {gpu} holds, not recorded.")
    if inexact and len(record.values) + len(record.failed) >= record.most:
        lines.append(f"  The other answers rest on the curve: the {record.most} recordings allowed were made "
                     f"(--extra-recordings).")
    return lines


def margin_lines(fit: FitFile) -> list[str]:
    """Per setting with an answer the curve decided, the margin it carried and where that came from."""
    curved = {a.conf for limit in fit.limits for a in limit.answers if not a.exact}
    lines = [_margin(s, fit) for s in fit.settings if s.conf in curved and s.reserved is not None]
    if not lines:
        return []
    return ["Where the curve decides, a value must fit with the curve's margin on top:", *lines]


def _margin(s: SettingFit, fit: FitFile) -> str:
    curve = s.reserved
    assert curve is not None
    values = ", ".join(map(str, [p.value for p in s.points]))
    shape = {0: "constant", 1: "line", 2: "parabola"}[len(curve.coefficients) - 1]
    if curve.loo_error is None:
        return f"  {conf_label(s.conf)}: none, its {shape} meets {fit.param} {values} ({UNTESTED})"
    worst = f"; {fit.param} {curve.loo_worst} missed most" if curve.loo_worst is not None else ""
    return (f"  {conf_label(s.conf)}: +{100 * curve.margin:.1f}%, the leave-one-out error of its {shape} through "
            f"{fit.param} {values} (each predicted from the others{worst})")
