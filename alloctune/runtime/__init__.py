"""What runs inside the user's own job: `alloctune.step()` (`steps`), `alloctune.dump_on_oom()` (`oomdump`), what
counts as an out-of-memory error (`oom`, also used by the trial child, the start-up hook and command trials), and a
process's rank and whole-file writes (`process`, shared with the start-up hook). Standard library and torch only."""
