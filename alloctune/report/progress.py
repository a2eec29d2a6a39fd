"""What the terminal shows during long work: each phase by name as it starts (a spinner, gone when done), and a
bar with a count and an ETA once a phase knows how many steps it has, and a note beside the name (a sweep's trial
estimate) kept current. Nothing is drawn before the first phase, so an error in the user's input (found before any
work starts) prints alone. When the output is not a terminal (a log, a pipe, CI) nothing is drawn: the lines given
to `print`, wrapped to the width (report/layout.py), and one short line as each counted phase ends,
'{name}: {done}/{total}'. A replay's progress (`Bars`) is quieter: in a log, nothing at all. A search's, which
counts for seconds in rounds, is a line in a log at its first count and at each quarter passed (`Logged`)."""
from __future__ import annotations

from typing import Callable

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.status import Status
from rich.text import Text

from .layout import say


# A phase's name in its bar: plain text, never rich markup (it may hold a user's path such as '[red]x.xz').
_NAME = TextColumn("{task.description}", style="bold", markup=False)


def estimate_text(trials: int, seconds: float | None = None, left: bool = False) -> str:
    """'about 8 trials', or with a time 'about 8 trials, ~3 min' ('~3 min left' for what remains)."""
    text = f"about {trials} trial{'s' if trials != 1 else ''}"
    if seconds is None:
        return text
    minutes = round(seconds / 60)
    return f"{text}, {'<1 min' if minutes < 1 else f'~{minutes} min'}{' left' if left else ''}"


class Phases:
    def __init__(self, console: Console):
        self.console = console
        self._status: Status | None = None
        self._bar: tuple[Progress, TaskID] | None = None
        self._name = "working"
        self._note = ""
        self._count: tuple[int, int] | None = None   # not a terminal: the counted phase's last count, said at its end

    def _described(self) -> str:
        return f"{self._name} ({self._note})" if self._note else self._name

    def note(self, text: str) -> None:
        """A note beside the phase's name, until the next phase ('' removes it)."""
        self._note = text
        if self._bar is not None:
            self._bar[0].update(self._bar[1], description=self._described())
        elif self._status is not None:
            self._status.update(Text(self._described()))

    def phase(self, name: str, count: tuple[int, int] | None = None) -> None:
        """A new phase: a spinner with its name, or, with (done, total), a bar counting from done to total."""
        if name != self._name:
            self._note = ""
        if not self.console.is_terminal:   # a log gets no spinner or bar: the count, once, at the phase's end
            if count is None or (self._count is not None and count[0] < self._count[0]):   # a new phase
                self._said()
            self._name, self._count = name, count or self._count
            return
        self._name = name
        if count is None:
            if self._bar is not None:   # the counted phase is over: its bar stays as it ended
                self._bar[0].stop()
                self._bar = None
            if self._status is None:
                self._status = self.console.status(Text(self._described()))
                self._status.start()
            else:
                self._status.update(Text(self._described()))
            return
        self._stop_status()
        done, total = count
        if self._bar is None:
            bar = Progress(SpinnerColumn(), _NAME, BarColumn(), MofNCompleteColumn(),
                           TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn(), console=self.console)
            bar.start()
            self._bar = (bar, bar.add_task(self._described(), total=total, completed=done))
        else:
            self._bar[0].update(self._bar[1], description=self._described(), total=total, completed=done)

    def advance(self, done: int, total: int) -> None:
        """A step done; a phase that could not count up front gets its bar now, under its own name."""
        if not self.console.is_terminal:
            self._count = (done, total)
            return
        if self._bar is None:
            self.phase(self._name, (done, total))
        else:
            self._bar[0].update(self._bar[1], completed=done, total=total)

    def print(self, text: str | Text) -> None:
        """A line above the live display (plain, or a rich Text for styles), wrapped to the width."""
        say(self.console, text)

    def _said(self) -> None:
        if self._count is not None:
            say(self.console, f"{self._name}: {self._count[0]}/{self._count[1]}")
            self._count = None

    def _stop_status(self) -> None:
        if self._status is not None:
            self._status.stop()
            self._status = None

    def close(self) -> None:
        self._said()
        self._stop_status()
        if self._bar is not None:
            self._bar[0].stop()
            self._bar = None

    def __enter__(self) -> "Phases":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


LOG_STEPS = 4   # a search's progress lines in a log: at its first count, then as each quarter is passed


class Logged:
    """A count in a log (not a terminal), the same lines on every run: 'replays: {done}/{total}' and a note, at the
    first count and at each count that passes another of LOG_STEPS equal parts of the total, and the last count at
    `close` where it was not yet said. At most LOG_STEPS + 2 lines."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.last: tuple[int, int, str] | None = None   # the latest count, and its note
        self.said: tuple[int, int, str] | None = None

    def count(self, done: int, total: int, note: str = "") -> None:
        self.last = (done, total, note)
        if self.said is None or done * LOG_STEPS // max(total, 1) > self.said[0] * LOG_STEPS // max(total, 1):
            self._say()

    def _say(self) -> None:
        if self.last is not None and self.last != self.said:
            done, total, note = self.last
            say(self.console, f"replays: {done}/{total}" + (f", {note}" if note else ""))
            self.said = self.last

    def close(self) -> None:
        self._say()


class Bars:
    """A replay's progress (api.options.Progress: a phase by name, with (done, total) where it counts): a spinner
    while a trace loads, then a bar per counted phase until the next trace, gone when done (nothing where the console
    is not a terminal); `notice` (the slow simulator core's) once, as the first counted phase starts. `named` says a
    phase's name as the caller's user reads it."""

    def __init__(self, console: Console, named: Callable[[str], str] = str, notice: str | None = None) -> None:
        self.console, self.named, self.notice = console, named, notice
        self.loading: Phases | None = None
        self.bar: Progress | None = None
        self.tasks: dict[str, TaskID] = {}

    def __call__(self, name: str, count: tuple[int, int] | None) -> None:
        name = self.named(name)
        if count is None:
            self._stop_bar()
            self.loading = self.loading or Phases(self.console)
            self.loading.phase(name)
            return
        if self.loading is not None:
            self.loading.close()
            self.loading = None
        if self.notice:
            self.console.print(Text.assemble(("notice:", "yellow"), " ", self.notice))
            self.notice = None
        if self.bar is None:
            self.bar = Progress(_NAME, BarColumn(), MofNCompleteColumn(),
                                TimeElapsedColumn(), console=self.console, transient=True,
                                disable=not self.console.is_terminal)
            self.bar.start()
        if name not in self.tasks:
            self.tasks[name] = self.bar.add_task(name, total=count[1])
        self.bar.update(self.tasks[name], completed=count[0], total=count[1])

    def _stop_bar(self) -> None:
        if self.bar is not None:
            self.bar.stop()
            self.bar, self.tasks = None, {}

    def __enter__(self) -> "Bars":
        return self

    def __exit__(self, *exc) -> None:
        self._stop_bar()
        if self.loading is not None:
            self.loading.close()
            self.loading = None
