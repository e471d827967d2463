"""``tp.save`` to a path is atomic: the target holds the old file or the new one, whole, whatever
happens during a save (an exception, a process killed midway); temporary files never take the
target's name or suffix."""

import io
import os
import signal
import stat
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

import tensorplay as tp
from support import once_per_suite, to_numpy


def temporaries(folder, name: str) -> list[str]:
    """The temporary files that a save of ``folder/name`` has left behind."""
    return sorted(p.name for p in folder.iterdir()
                  if p.name.startswith(f".{name}.") and p.name.endswith(".tmp"))


def test_save_replaces_an_existing_file(tmp_path):
    path = tmp_path / "ckpt.safetensors"
    tp.save({"step": 1, "w": tp.zeros(3)}, path)
    tp.save({"step": 2, "w": tp.ones(3)}, path)
    loaded = tp.load(path)
    assert loaded["step"] == 2 and loaded["w"].tolist() == [1.0, 1.0, 1.0]
    assert [p.name for p in tmp_path.iterdir()] == ["ckpt.safetensors"]


@pytest.mark.parametrize("error", [OSError("disk full"), KeyboardInterrupt()],
                         ids=["OSError", "KeyboardInterrupt"])
@pytest.mark.parametrize("step", ["write", "fsync", "replace"])
def test_failed_save_keeps_the_old_file_and_removes_its_temporary(step, error, tmp_path,
                                                                  monkeypatch):
    path = tmp_path / "ckpt.safetensors"
    tp.save({"w": tp.zeros(3)}, path)
    before = path.read_bytes()

    def fail(*args, **kwargs):
        raise error
    if step == "write":
        class Failing(io.FileIO):
            def write(self, data):
                super().write(data[:len(data) // 2])   # half of it is on disk, then it fails
                raise error

        def fdopen(fd, mode):
            return Failing(fd, "wb")
        monkeypatch.setattr(tp.serialization.os, "fdopen", fdopen)
    else:
        monkeypatch.setattr(tp.serialization.os, step, fail)
    with pytest.raises(type(error)):
        tp.save({"w": tp.ones(1000)}, path)
    monkeypatch.undo()
    assert path.read_bytes() == before
    assert temporaries(tmp_path, path.name) == []
    assert tp.load(path)["w"].tolist() == [0.0, 0.0, 0.0]


def test_missing_folder_and_folder_target(tmp_path):
    with pytest.raises(FileNotFoundError, match="no such folder"):
        tp.save(tp.zeros(2), tmp_path / "missing" / "x.safetensors")
    (tmp_path / "d").mkdir()
    with pytest.raises(IsADirectoryError):
        tp.save(tp.zeros(2), tmp_path / "d")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d"]
    assert list((tmp_path / "d").iterdir()) == []


@pytest.mark.skipif(os.name != "posix", reason="POSIX permission bits")
def test_permissions(tmp_path):
    # a new file gets what open(path, "wb") would give it
    umask = os.umask(0o022)
    os.umask(umask)
    tp.save(tp.zeros(2), tmp_path / "new.safetensors")
    assert stat.S_IMODE((tmp_path / "new.safetensors").stat().st_mode) == 0o666 & ~umask
    # a replaced file keeps its bits
    (tmp_path / "new.safetensors").chmod(0o640)
    tp.save(tp.ones(2), tmp_path / "new.safetensors")
    assert stat.S_IMODE((tmp_path / "new.safetensors").stat().st_mode) == 0o640
    assert tp.load(tmp_path / "new.safetensors").tolist() == [1.0, 1.0]


@pytest.mark.skipif(not hasattr(os, "symlink") or os.name != "posix", reason="symbolic links")
def test_symbolic_link_is_kept(tmp_path):
    (tmp_path / "real").mkdir()
    target = tmp_path / "real" / "ckpt.safetensors"
    tp.save(tp.zeros(2), target)
    link = tmp_path / "latest.safetensors"
    link.symlink_to(target)
    tp.save(tp.ones(2), link)
    assert link.is_symlink() and os.readlink(link) == str(target)
    assert tp.load(target).tolist() == [1.0, 1.0]


def test_file_objects_are_written_directly(tmp_path):
    with open(tmp_path / "f.safetensors", "wb") as handle:
        handle.write(b"")
        tp.save({"a": [tp.arange(3)], "b": None}, handle)
    assert [p.name for p in tmp_path.iterdir()] == ["f.safetensors"]
    loaded = tp.load(tmp_path / "f.safetensors")
    assert loaded["a"][0].tolist() == [0, 1, 2] and loaded["b"] is None


# -- a save killed midway -------------------------------------------------------------------------
#: Saves a large optimizer-like state dict (12 tensors of 4 MiB) to argv[1] over and over, each
#: time with a new version number in it and in every value, until killed. argv[2] is created
#: once the first save has started.
SAVER = textwrap.dedent("""
    import pathlib, sys
    import numpy as np
    import tensorplay as tp
    path, ready = sys.argv[1], pathlib.Path(sys.argv[2])
    arrays = [np.empty((1024, 1024), np.float32) for _ in range(12)]
    version = 0
    while True:
        version += 1
        for array in arrays:
            array.fill(version)
        state = {"version": version,
                 "state": {i: {"step": tp.tensor(float(version)), "exp_avg": tp.from_numpy(a)}
                           for i, a in enumerate(arrays)},
                 "param_groups": [{"lr": 0.001, "betas": (0.9, 0.999), "params": list(range(12))}]}
        if version == 1:
            ready.touch()
        tp.save(state, path)
""")


def check_whole(path, versions_seen: set) -> None:
    """``path`` loads, and holds one version whole (old file: 0, the saver's: 1, 2, ...)."""
    loaded = tp.load(path)
    version = loaded["version"]
    size = 1024 * 1024 if version else 4
    assert sorted(loaded["state"]) == list(range(12))
    for entry in loaded["state"].values():
        values = to_numpy(entry["exp_avg"])
        assert values.size == size and np.all(values == version), f"version {version} is mixed"
        assert entry["step"].item() == float(version)
    assert loaded["param_groups"][0]["betas"] == (0.9, 0.999)
    versions_seen.add(version)


def freeze(saver) -> None:
    """Stop the saver and wait until it is stopped (a stopped process writes nothing more)."""
    saver.send_signal(signal.SIGSTOP)
    _, status = os.waitpid(saver.pid, os.WUNTRACED)
    if not os.WIFSTOPPED(status):
        saver.returncode = status   # reaped: Popen must not wait for it again
        raise AssertionError(f"the saver died: {saver.stderr.read().decode()}")


@once_per_suite
@pytest.mark.skipif(not hasattr(signal, "SIGSTOP"), reason="needs SIGSTOP and SIGKILL (POSIX)")
def test_save_killed_midway_leaves_a_whole_checkpoint(tmp_path):
    """A process saves a large checkpoint over and over; it is frozen (SIGSTOP) at many points
    and the file is loaded each time: a frozen process writes nothing more, so the file is then
    what a kill at that point would leave. After a while, the first time it is frozen while its
    temporary file exists (mid-save, by construction) it is killed (SIGKILL), and the file must
    still load whole, with the temporary left aside under a name no glob for the checkpoint
    matches.

    The assertions hold whatever the timing; timing only decides which points are sampled."""
    path = tmp_path / "ckpt.safetensors"
    ready = tmp_path / "ready"
    tp.save({"version": 0,
             "state": {i: {"step": tp.tensor(0.0), "exp_avg": tp.zeros(4)} for i in range(12)},
             "param_groups": [{"lr": 0.001, "betas": (0.9, 0.999), "params": list(range(12))}]},
            path)
    versions_seen: set = set()
    root = os.path.dirname(os.path.dirname(os.path.abspath(tp.__file__)))
    env = dict(os.environ, TENSORPLAY_ACCELERATOR="none",
               PYTHONPATH=os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")])))
    saver = subprocess.Popen([sys.executable, "-c", SAVER, str(path), str(ready)], env=env,
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 60   # a loaded 2-core machine can be slow to import
        while not ready.exists():
            assert saver.poll() is None, saver.stderr.read().decode()
            assert time.monotonic() < deadline, "the saver did not start"
            time.sleep(0.01)
        # pauses between freezes, spread over about one save's duration (0.1 to 0.3 s)
        delays = [0.004, 0.09, 0.031, 0.15, 0.012, 0.061, 0.2, 0.045, 0.007, 0.12, 0.023]
        started, samples, midway = time.monotonic(), 0, 0
        while True:
            time.sleep(delays[samples % len(delays)])
            freeze(saver)
            samples += 1
            check_whole(path, versions_seen)
            caught = bool(temporaries(tmp_path, path.name))
            midway += caught
            elapsed = time.monotonic() - started
            if (caught and elapsed > 2.0) or elapsed > 5.0:
                break
            saver.send_signal(signal.SIGCONT)
        saver.send_signal(signal.SIGKILL)   # frozen, and mid-save if caught
        saver.wait(timeout=30)
    finally:
        if saver.returncode is None:
            saver.kill()
            saver.wait(timeout=30)
        saver.stderr.close()
    check_whole(path, versions_seen)
    left = temporaries(tmp_path, path.name)
    print(f"samples={samples} midway={midway} caught={caught} versions={sorted(versions_seen)}")
    assert len(left) == (1 if caught else 0)   # a kill mid-save leaves its temporary
    assert sorted(p.name for p in tmp_path.glob("*.safetensors")) == ["ckpt.safetensors"]
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.startswith(".")) == [
        "ckpt.safetensors", "ready"]
    # the next save replaces the checkpoint as usual
    tp.save({"version": -1}, path)
    assert tp.load(path) == {"version": -1}
