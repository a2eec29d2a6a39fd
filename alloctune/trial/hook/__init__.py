"""The start-up hook that alloctune puts into every Python process of a user's command (`sweep -- CMD`, `record --
CMD`): this folder goes first on PYTHONPATH, so Python imports `sitecustomize.py` from it at start-up.

What the hook does is driven by environment variables set by the parent (see `HookConfig` in `sitecustomize.py`);
it writes one JSON file per process that initialised CUDA (and, when recording, one snapshot pickle), which
`alloctune.trial.command` reads back.
"""
import os

HOOK_DIR = os.path.dirname(os.path.abspath(__file__))
