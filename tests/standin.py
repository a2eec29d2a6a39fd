"""The start of a stand-in GPU interpreter's script (a template for `str.format` with `torch` and `python`): asked
`-m alloctune.child.probe probe`, it answers as a machine with one GPU and judges no settings, so the sweep asks the
judge, which runs under the real interpreter (`python`) as every other probe call does; asked `-m
alloctune.child.calibration MODE`, it answers with the driver-call costs of the committed H200 calibration
(tests/fixtures/calibration/h200-torch2.11.json), as that GPU's child measured them, each mode its kinds, on this
host's CPU (as the real child names it). Needs json, os and sys imported before it."""
from pathlib import Path

CALIBRATION = Path(__file__).resolve().parent / "fixtures" / "calibration" / "h200-torch2.11.json"

PROBE_AS_ONE_GPU = """
if sys.argv[1:4] == ["-m", "alloctune.child.probe", "probe"]:
    sys.stdin.read()
    print("ALLOCTUNE-PROBE " + json.dumps(dict(
        python=sys.argv[0], python_version="3", torch_version={torch!r}, torch_git=None, cuda_version="12",
        cuda_available=True, device_count=1, devices=[dict(index=0, name="fake", total_memory=143 * 2**30)],
        driver="1", host="h", env_id="torch-gpu")))
    sys.exit(0)
if sys.argv[1:3] == ["-m", "alloctune.child.probe"]:
    os.execv({python!r}, [{python!r}, *sys.argv[1:]])
if sys.argv[1:3] == ["-m", "alloctune.child.calibration"]:
    from alloctune.child.provenance import host_cpu
    with open(""" + repr(str(CALIBRATION)) + """) as f:
        h200 = json.load(f)
    print("ALLOCTUNE-CALIBRATION " + json.dumps(dict(
        facts=dict(gpu="fake", driver="1", cuda="12", torch={torch!r}, host_cpu=host_cpu()),
        fits=dict((kind, h200[kind]) for kind in dict(native=("device_alloc", "device_free", "sync"),
                                                      expandable=("map", "unmap"))[sys.argv[3]]))))
    sys.exit(0)
"""
