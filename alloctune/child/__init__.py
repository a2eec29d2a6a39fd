"""The trial child: a fresh process alloctune starts to run one workload under one setting and measure it
(`main`, run as `python -m alloctune.child.main SPEC.json`; its task and result, `exchange`; the measured pass,
`timing`; the environment it ran in, `provenance`), the probe's child side (`probe`, run as `python -m
alloctune.child.probe probe|serve`), the calibration's (`calibration`, run as `python -m
alloctune.child.calibration`) and a ballast holding a GPU's memory but a given amount (`ballast`, run as `python -m
alloctune.child.ballast LEAVE`, for fit's copies at once). All run under other interpreters than alloctune's and
are light: the standard library, torch, and alloctune's light modules (tests/test_layers.py's `LIGHT`)."""
