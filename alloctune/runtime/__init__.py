"""What runs inside the user's own job: `alloctune.step()` (`steps`) and `alloctune.dump_on_oom()` (`oomdump`). Standard library and torch only."""
