"""Builds the simulator's compiled core (alloctune/sim/_core.cpp) as an optional extension.

`pip install -e .` runs this; so does `python3 setup.py build_ext --inplace` (a checkout used through PYTHONPATH).
Without a C++17 compiler the build of the extension fails, the installation goes on, and replays run on the
pure-Python simulator (alloctune says so when it replays).
"""
from setuptools import Extension, setup

setup(ext_modules=[Extension(
    "alloctune.sim._core", ["alloctune/sim/_core.cpp"], language="c++",
    extra_compile_args=["-std=c++17", "-O3", "-g"], optional=True)])
