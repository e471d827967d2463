"""``python -m tensorplay info`` and ``python -m tensorplay demo`` as a user runs them.

Each command runs in a fresh interpreter (the accelerator is chosen at import), once on the
simulated accelerator and once host-only; both must exit 0 and print their key lines.
"""

import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TIMEOUT_S = 300


def run_cli(command, accelerator, devices="2"):
    env = dict(os.environ, TENSORPLAY_ACCELERATOR=accelerator, TENSORPLAY_SIM_DEVICES=devices)
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    result = subprocess.run([sys.executable, "-m", "tensorplay", command], cwd=ROOT, env=env,
                            capture_output=True, text=True, timeout=TIMEOUT_S)
    assert result.returncode == 0, (
        f"python -m tensorplay {command} (TENSORPLAY_ACCELERATOR={accelerator}) exited "
        f"{result.returncode}\nstdout:\n{result.stdout[-3000:]}\nstderr:\n{result.stderr[-3000:]}")
    return result.stdout


def lines_starting(output, prefix):
    return [line for line in output.splitlines() if line.strip().startswith(prefix)]


def test_info_on_sim():
    out = run_cli("info", "sim", devices="2")
    assert lines_starting(out, "tensorplay")
    assert lines_starting(out, "Python")
    assert lines_starting(out, "NumPy")
    accelerator = lines_starting(out, "accelerator")
    assert accelerator and "sim" in accelerator[0]
    assert lines_starting(out, "cpu:")
    assert lines_starting(out, "sim:0") and lines_starting(out, "sim:1")
    assert not lines_starting(out, "sim:2")
    dtypes = lines_starting(out, "dtypes:")
    assert len(dtypes) == 2 and "float32" in dtypes[0] and "bool" in dtypes[0]


def test_info_on_sim_with_one_device():
    out = run_cli("info", "sim", devices="1")
    assert lines_starting(out, "sim:0") and not lines_starting(out, "sim:1")


def test_info_host_only():
    out = run_cli("info", "none")
    accelerator = lines_starting(out, "accelerator")
    assert accelerator and "none" in accelerator[0] and "host-only" in accelerator[0]
    assert lines_starting(out, "cpu:")
    assert not lines_starting(out, "sim:") and not lines_starting(out, "cuda:")


def test_demo_on_sim():
    out = run_cli("demo", "sim")
    assert "== host tensors ==" in out
    assert "== capture and replay on sim:0 ==" in out
    replay_lines = lines_starting(out, "x = ")
    assert len(replay_lines) >= 3
    assert any("y = [1.0, 1.0, 1.0, 1.0]" in line for line in replay_lines)
    converged = lines_starting(out, "converged in")
    assert converged and "iterations" in converged[0]
    assert lines_starting(out, "memory: allocated")


def test_demo_host_only():
    out = run_cli("demo", "none")
    assert "== host tensors ==" in out
    assert "host tensors only" in out
    assert "capture and replay" not in out


@pytest.mark.parametrize("accelerator", ["bogus"])
def test_unknown_accelerator_is_reported(accelerator):
    env = dict(os.environ, TENSORPLAY_ACCELERATOR=accelerator)
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    result = subprocess.run([sys.executable, "-m", "tensorplay", "info"], cwd=ROOT, env=env,
                            capture_output=True, text=True, timeout=TIMEOUT_S)
    assert result.returncode != 0
    assert "TENSORPLAY_ACCELERATOR" in result.stderr and "bogus" in result.stderr
