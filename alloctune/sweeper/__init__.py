"""The orchestrator: `sweep()` (`sweep`), hybrid planning by replay (`hybrid`), and where trials run (`executors/`)."""
