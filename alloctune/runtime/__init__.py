"""What runs inside the user's own job: `alloctune.step()` (`steps`), `alloctune.dump_on_oom()` (`oomdump`) and what
counts as an out-of-memory error (`oom`, also used by the trial child, the start-up hook and command trials).
Standard library and torch only."""
