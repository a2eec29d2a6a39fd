"""The start-up hook that alloctune puts into every Python process of a user's command (`sweep -- CMD`, `record --
CMD`): this folder goes first on PYTHONPATH, so Python imports `sitecustomize.py` from it at start-up.

What the hook does is driven by environment variables that `alloctune.trial.command.hook_environment` sets (listed
in `sitecustomize.py`'s docstring); it writes one JSON file per process that initialised CUDA or marked or counted
steps (a `ProcessReport`, `alloctune/runtime/peaks.py`) and, when recording, one snapshot pickle, which
`alloctune.trial.job` reads back. Nothing else may go in this folder: being first on the command's PYTHONPATH,
any module here would shadow the user's own of that name.
"""
import os

HOOK_DIR = os.path.dirname(os.path.abspath(__file__))
