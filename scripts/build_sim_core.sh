#!/usr/bin/env bash
# Build the simulator's compiled core in place, for a checkout used through PYTHONPATH=. (no pip install), e.g. on
# a machine whose Python differs from the one the core was built for. Never fails: without a compiler or
# setuptools, replays run on the pure-Python simulator and say so. Takes ~10-30 s.
cd "$(dirname "$0")/.." || exit 0
timeout 120 python3 setup.py -q build_ext --inplace >/dev/null 2>&1 || true
PYTHONPATH=. python3 -c 'from alloctune.sim.simulate import core_notice; print(core_notice() or "simulator: compiled core")'
