"""One trial in a fresh process, the parent's side (alloctune's own process): the task and its environment (`task`),
running it (`launch`: the trial child of `child/`, its task and result in `child/exchange.py`; `command`: a user's
command, with the start-up hook of `runtime/hook/`), what the hook left read back as one job (`job`: the processes'
reports, their measurement, their traces), the features they showed (`features`), where a command's throughput comes
from (`throughput`), probing interpreters (`probe`, its child side `child/probe.py`), recording a trace
(`recording`), the GPU's driver-call costs measured and kept (`calibration`, its child side `child/calibration.py`),
an in-process confirmation's blocks into its measurement (`inprocess`), a GPU made as small as a limit while
processes share it (`ballast`, its child side `child/ballast.py`)."""
