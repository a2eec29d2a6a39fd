"""One trial in a fresh process, the parent's side (alloctune's own process): the task and its environment
(`task`), running it (`launch`: the trial child of `child/`; `command`: a user's command, with the start-up hook of
`runtime/hook/`), probing interpreters (`probe`, its child side `child/probe.py`), recording a trace
(`recording`)."""
