"""Every file alloctune writes for the user is written whole or not at all (files.write_file): a write that fails
for real (the kernel's file-size limit, which fails a write as a full disk does; text that cannot be encoded)
leaves the user's existing file as it was, and no temporary file beside it. Every write in alloctune/ goes through
it, but for the few that are no whole file (`NOT_WHOLE`, each with why). A stream at the target (a link to
/dev/null, to a process's open file, a FIFO) is written into, never replaced, by every -o; a FIFO no process reads,
a socket, are refused in one line."""
import ast
import os
import socket
import stat
import threading
import pickle
import resource
import signal
import subprocess
import sys

import pytest
from clirun import ROOT, in_process
from folders import choice, make_folder, repeats

from alloctune.files import copy_whole, write_file
from alloctune.results.calibration import read_calibration, write_calibration

OLD = "PYTORCH_CUDA_ALLOC_CONF=the user's own, kept\n"


def _small_files(limit: int = 16):
    """In the child: any write past `limit` bytes of a file fails with EFBIG (SIGXFSZ ignored, as a full disk's
    ENOSPC is an error, not a signal)."""
    def setup():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    return setup


def _python(code: str, *args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code, *map(str, args)], capture_output=True, text=True, cwd=ROOT,
                          env=dict(os.environ, PYTHONPATH=str(ROOT), PYTHONDONTWRITEBYTECODE="1"),
                          preexec_fn=_small_files(), timeout=120)


def _only(folder, name):
    assert sorted(os.listdir(folder)) == [name], "a temporary file was left behind"


def test_export_to_a_file_that_cannot_be_written_whole_keeps_the_old_one(tmp_path):
    folder = make_folder(tmp_path / "r", repeats("") + repeats("expandable_segments:True"),
                         [choice("expandable_segments:True")])
    out = tmp_path / "out"
    out.mkdir()
    target = out / "alloc.env"
    target.write_text(OLD)
    run = _python("import sys; from alloctune.cli.main import main; sys.exit(main(sys.argv[1:]))",
                  "export", folder.path, "-o", target)
    assert run.returncode == 2, run.stderr
    assert run.stderr.strip().splitlines() == [f"alloctune: error: File too large: {target}"]
    assert target.read_text() == OLD
    _only(out, "alloc.env")


def test_export_to_a_file_writes_it_whole(tmp_path):
    folder = make_folder(tmp_path / "r", repeats("") + repeats("expandable_segments:True"),
                         [choice("expandable_segments:True")])
    target = tmp_path / "alloc.env"
    target.write_text(OLD)
    run = in_process("export", folder.path, "-o", target)
    assert run.returncode == 0, run.stderr
    assert "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True" in target.read_text()
    assert sorted(os.listdir(tmp_path)) == ["alloc.env", "r"]


def test_a_folder_that_is_not_there_is_said_of_the_path_given_not_of_the_temporary_file(tmp_path):
    folder = make_folder(tmp_path / "r", repeats(""), [choice("")])
    target = tmp_path / "no" / "such" / "alloc.env"
    run = in_process("export", folder.path, "-o", target)
    assert run.returncode == 2 and run.stderr == f"alloctune: error: No such file or directory: {target}\n"
    with pytest.raises(FileNotFoundError) as info:
        write_file(target, OLD)
    assert info.value.filename == str(target)


def test_text_that_cannot_be_encoded_leaves_the_file_as_it_was(tmp_path):
    target = tmp_path / "summary.md"
    target.write_text(OLD)
    with pytest.raises(UnicodeEncodeError):
        write_file(target, "a lone surrogate \ud800 is no UTF-8")
    assert target.read_text() == OLD
    _only(tmp_path, "summary.md")


def test_a_path_that_is_not_utf8_keeps_its_bytes(tmp_path):
    name = os.fsdecode(b"caf\xe9")   # Latin-1 bytes, as the file system has them
    target = tmp_path / "best.env"
    write_file(target, f"# from {name}\n")
    assert target.read_bytes() == b"# from caf\xe9\n"


def test_a_function_that_fails_midway_leaves_the_file_as_it_was(tmp_path):
    target = tmp_path / "plot.png"
    target.write_text(OLD)

    def half(f):
        f.write(b"half a plot")
        raise RuntimeError("the plot failed")

    with pytest.raises(RuntimeError):
        write_file(target, half)
    assert target.read_text() == OLD
    _only(tmp_path, "plot.png")


def test_a_trace_copied_to_the_user_is_whole_or_not_there(tmp_path):
    """What `record -o x.pickle` and a hybrid sweep's trace.xz go through (copy_whole), past the size limit."""
    source = tmp_path / "snapshot.pickle"
    source.write_bytes(pickle.dumps({"segments": [], "device_traces": [[]]}) * 10)
    out = tmp_path / "out"
    out.mkdir()
    target = out / "trace.pickle"
    target.write_text(OLD)
    run = _python("import sys; from alloctune.files import copy_whole; copy_whole(sys.argv[1], sys.argv[2])",
                  source, target)
    assert run.returncode != 0 and "File too large" in run.stderr
    assert target.read_text() == OLD
    _only(out, "trace.pickle")
    copy_whole(source, target)
    assert target.read_bytes() == source.read_bytes()


# What opens a file for writing other than files.write_file, each with why it is not a whole file; any other write
# in alloctune/ (an open for writing, write_text, json.dump or pickle.dump to an open file) fails the test below.
NOT_WHOLE = {
    ("files.py", "fdopen"): "the one whole write itself",
    ("files.py", "os.open"): "a stream the user named (a device, a FIFO, /dev/stdout): written into, never replaced",
    ("results/trials.py", "os.open"): "the trials file, appended a line at a time",
    ("results/folder.py", "os.open"): "the folder's writer lock, which holds its holder's pid",
    ("cli/main.py", "os.open"): "the null device",
    ("trial/launch.py", "open"): "the trial child's stderr, which it streams",
    ("trial/command.py", "open"): "the command's output, which it streams",
    ("runtime/stopping.py", "open"): "the automatic window's step: linked into place, so the first proposal wins",
}
_WRITE_FLAGS = {"O_WRONLY", "O_RDWR", "O_CREAT", "O_APPEND"}


def _writes(tree) -> list[tuple[str, int]]:
    """(what, line) of each call in `tree` that writes a file other than through a function given to write_file."""
    in_lambda = {id(n) for lam in ast.walk(tree) if isinstance(lam, ast.Lambda) for n in ast.walk(lam.body)}
    out = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
        if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id == "os" \
                and name == "open":
            name = "os.open"
            writes = any(isinstance(n, ast.Attribute) and n.attr in _WRITE_FLAGS for n in ast.walk(node.args[1]))
        elif name in ("open", "fdopen"):
            mode = node.args[1] if len(node.args) > 1 else next((k.value for k in node.keywords if k.arg == "mode"),
                                                                None)
            writes = isinstance(mode, ast.Constant) and any(c in str(mode.value) for c in "wax+")
        elif name in ("dump", "savefig"):
            writes = id(node) not in in_lambda   # into an open file, not the one write_file hands its function
        else:
            writes = name in ("write_text", "write_bytes")
        if writes:
            out.append((name, node.lineno))
    return out


def test_every_file_is_written_through_the_one_whole_write():
    package = ROOT / "alloctune"
    found = {(str(path.relative_to(package)), name, line) for path in package.rglob("*.py")
             for name, line in _writes(ast.parse(path.read_text()))}
    assert {(path, name) for path, name, _ in found} == set(NOT_WHOLE), sorted(found)


CALIBRATION = ROOT / "tests" / "fixtures" / "calibration" / "h200-torch2.11.json"


def test_every_o_writes_into_a_stream_never_replacing_it(tmp_path):
    folder = make_folder(tmp_path / "r", repeats("") + repeats("expandable_segments:True", reserved=10.0),
                         [choice("expandable_segments:True")])
    read, write = os.pipe()
    (tmp_path / "null").symlink_to(os.devnull)
    (tmp_path / "stdout").symlink_to(f"/proc/self/fd/{write}")   # this process's pipe: main() runs in it
    os.mkfifo(tmp_path / "fifo")
    heard: list[bytes] = []
    reader = threading.Thread(target=lambda: heard.append((tmp_path / "fifo").read_bytes()), daemon=True)
    reader.start()
    for name in ("null", "stdout", "fifo"):
        run = in_process("export", folder.path, "-o", tmp_path / name)
        assert run.returncode == 0, run.stderr
    write_calibration(tmp_path / "stdout", read_calibration(CALIBRATION))   # calibrate -o's write
    os.close(write)
    reader.join(30)
    said = os.read(read, 1 << 20).decode()
    assert said.count("PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True") == 1 and '"device_alloc"' in said
    assert heard and b"PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True" in heard[0]
    assert (tmp_path / "null").is_symlink() and (tmp_path / "stdout").is_symlink()
    assert stat.S_ISCHR(os.stat(os.devnull).st_mode) and stat.S_ISFIFO(os.stat(tmp_path / "fifo").st_mode)


def test_a_fifo_no_one_reads_and_a_socket_are_refused_in_one_line(tmp_path):
    folder = make_folder(tmp_path / "r", repeats(""), [choice("")])
    os.mkfifo(tmp_path / "fifo")
    listening = socket.socket(socket.AF_UNIX)
    listening.bind(str(tmp_path / "sock"))
    says = {"fifo": "is a FIFO (named pipe) that no process reads: start its reader first, or give a file",
            "sock": "is a socket, not a regular file: alloctune writes a file, a character device or a FIFO"}
    for name, said in says.items():
        run = in_process("export", folder.path, "-o", tmp_path / name)
        assert run.returncode == 2 and run.stderr == f"alloctune: error: {tmp_path / name} {said}\n", run.stderr
    assert stat.S_ISFIFO(os.stat(tmp_path / "fifo").st_mode) and stat.S_ISSOCK(os.stat(tmp_path / "sock").st_mode)
    listening.close()
