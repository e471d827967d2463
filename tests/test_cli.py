"""``python -m tensorplay info`` and ``python -m tensorplay demo`` as a user runs them.

Each command runs in a fresh interpreter (the accelerator is chosen at import), once on the
simulated accelerator and once host-only; both must exit 0 and print their key lines.
"""

import json
import os
import re
import subprocess
import sys
import textwrap

import pytest
from support import once_per_suite
from tensorplay.bench.eager import DECODE_OPS

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TIMEOUT_S = 300


def run_cli(command, accelerator, devices="2"):
    env = dict(os.environ, TENSORPLAY_ACCELERATOR=accelerator, TENSORPLAY_SIM_DEVICES=devices)
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    result = subprocess.run([sys.executable, "-m", "tensorplay", command], cwd=ROOT, env=env,
                            capture_output=True, text=True, timeout=TIMEOUT_S, check=False)
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
    assert lines_starting(out, "memory: allocated")


def test_demo_prints_the_tolerance_beside_the_residual_and_only_claims_what_it_reached():
    out = run_cli("demo", "sim")
    outcome = lines_starting(out, "asked for a relative residual of")
    assert len(outcome) == 1, out
    match = re.match(r"asked for a relative residual of (\S+) in (\w+), reached (\S+) .* in "
                     r"(\d+) iterations: (.*)", outcome[0])
    assert match, outcome[0]
    tol, residual, verdict = float(match[1]), float(match[3]), match[5]
    assert verdict.startswith("converged") == (residual <= tol), outcome[0]
    assert verdict.startswith("converged")     # sim computes float64, which reaches 1e-6
    assert match[2] == "float64" and int(match[4]) > 0


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
                            capture_output=True, text=True, timeout=TIMEOUT_S, check=False)
    assert result.returncode != 0
    assert "TENSORPLAY_ACCELERATOR" in result.stderr and "bogus" in result.stderr


# -- a machine without CuPy or matplotlib, made on any machine: a folder on PYTHONPATH whose
# packages of those names fail to import, as an absent package does ------------------------------

def _without(tmp_path, *packages):
    for name in packages:
        package = tmp_path / "blocked" / name
        package.mkdir(parents=True)
        message = f"No module named {name!r}"
        (package / "__init__.py").write_text(
            f"raise ModuleNotFoundError({message!r}, name={name!r})\n")
    return str(tmp_path / "blocked")


def run_python(args, accelerator=None, blocked=None, cwd=ROOT):
    """Run ``python args`` with TENSORPLAY_ACCELERATOR set (or unset when None)."""
    env = dict(os.environ, TENSORPLAY_SIM_DEVICES="1")
    env.pop("TENSORPLAY_ACCELERATOR", None)
    if accelerator is not None:
        env["TENSORPLAY_ACCELERATOR"] = accelerator
    env["PYTHONPATH"] = os.pathsep.join(
        [p for p in (blocked, ROOT, env.get("PYTHONPATH")) if p])
    return subprocess.run([sys.executable, *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=TIMEOUT_S, check=False)


def test_info_says_why_a_requested_cuda_is_missing_instead_of_crashing(tmp_path):
    result = run_python(["-m", "tensorplay", "info"], "cuda", _without(tmp_path, "cupy"))
    assert "Traceback" not in result.stderr, result.stderr
    assert result.returncode == 1
    accelerator = lines_starting(result.stdout, "accelerator")
    assert accelerator and "TENSORPLAY_ACCELERATOR=cuda was set" in accelerator[0]
    assert "No module named 'cupy'" in accelerator[0]
    assert lines_starting(result.stdout, "cpu:")
    # the same process keeps working on the host; an accelerator device names the way out
    script = textwrap.dedent("""
        import tensorplay as tp
        print(tp.ones(3).sum().item())
        try:
            tp.zeros(1, device="cuda")
        except ValueError as error:
            print(error)
    """)
    result = run_python(["-c", script], "cuda", _without(tmp_path / "2", "cupy"))
    assert result.returncode == 0, result.stderr
    first, error = result.stdout.splitlines()
    assert first == "3.0"
    assert "TENSORPLAY_ACCELERATOR=cuda was set" in error
    assert "TENSORPLAY_ACCELERATOR=sim" in error


def test_bench_without_a_gpu_falls_back_to_sim_and_says_so(tmp_path):
    out_json = tmp_path / "run.json"
    result = run_python(["-m", "tensorplay", "bench", "--json", str(out_json),
                         "--eager-calls", "20"], None, _without(tmp_path, "cupy"))
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "no GPU found: running the benchmarks on the simulated accelerator" in result.stdout
    run = json.loads(out_json.read_text())
    assert run["simulated"] is True and run["device"] == "sim:0"
    assert {row["case"] for row in run["rows"]} >= {"20 small kernels", "CG Poisson 32x32"}
    assert [op["op"] for op in run["eager"]["ops"]] == EAGER_OPS
    # the MLP and the large products (small on sim): tensorplay's rows, no peer on sim
    mlp = [row for row in run["rows"] if row["case"] == "MLP 4x512, batch 8, GELU"]
    assert [row["impl"] for row in mlp] == ["tensorplay eager", "tensorplay compile (cudagraphs)"]
    for batch in (8, 256):   # the training step: eager, one Graph and tp.compile, no peer on sim
        training = [row for row in run["rows"]
                    if row["case"] == f"MLP 4x512 training step (AdamW, MSE), batch {batch}"]
        assert [row["impl"] for row in training] == [
            "tensorplay eager", "tensorplay whole step in one Graph",
            "tensorplay compile (cudagraphs)"], training
        assert all(row["us"] > 0 for row in training)
    products = [row for row in run["rows"] if row["case"].startswith("C = A @ B")]
    assert [row["case"] for row in products] == [
        "C = A @ B, 128x128, float32, precision 'highest'",
        "C = A @ B, 128x128, float32, precision 'high' (TF32)", "C = A @ B, 128x128, bfloat16"]
    for row in products:
        assert row["impl"] == "tensorplay" and row["n"] == 128 and row["us"] > 0, row
        assert row["tflops"] > 0 and row["rel_err"] < 1e-2, row
        line = next(line for line in result.stdout.splitlines() if line.startswith(row["case"]))
        assert f"TFLOP/s={row['tflops']:.4g}" in line and f"err={row['rel_err']:.1e}" in line


# -- the eager table: host cost per call of small ops, tensorplay beside CuPy, torch and NumPy --

EAGER_OPS = ["a + b", "a.exp()", "a.add_(1)", "a.sum()", "tp.where(m, a, b)", "gelu(a)",
             "a @ w", *DECODE_OPS]


def _check_eager_table(run, device):
    table = run["eager"]
    assert table["device"] == device and table["calls"] == 20 and table["unit"] == "us"
    assert [op["op"] for op in table["ops"]] == EAGER_OPS
    for op in table["ops"]:
        assert op["tensorplay"] > 0, op
        # no GPU peer on this device: CuPy and torch time a GPU only
        assert op["cupy"] is None and op["torch"] is None, op
        assert op["tp/cupy"] is None and op["tp/torch"] is None, op
        if op["numpy"] is not None:
            assert op["numpy"] > 0 and op["tp/numpy"] == op["tensorplay"] / op["numpy"], op
    # NumPy has the table's first ops, but neither GELU nor the decode step's
    assert all(op["numpy"] for op in table["ops"]
               if op["op"] != "gelu(a)" and op["op"] not in DECODE_OPS)


def _eager_lines(stdout):
    lines = stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("eager ops on "))
    return lines[start:start + 3 + len(EAGER_OPS)]


@pytest.mark.parametrize("accelerator, device", [("sim", "sim:0"), ("none", "cpu")])
def test_bench_eager_table_runs_on_the_current_backend_and_is_saved(tmp_path, accelerator,
                                                                    device):
    out_json = tmp_path / "eager.json"
    result = run_python(["-m", "tensorplay", "bench", "--eager-only", "--eager-calls", "20",
                         "--json", str(out_json)], accelerator)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    run = json.loads(out_json.read_text())
    assert run["device"] == device and run["rows"] == []
    _check_eager_table(run, device)
    title, header, _rule, *body = _eager_lines(result.stdout)
    assert f"eager ops on {device}" in title and "20 calls" in title
    assert header.split() == ["op", "tensorplay", "CuPy", "torch", "NumPy", "tp/CuPy",
                              "tp/torch", "tp/NumPy"]
    assert [line[:len(op)] for line, op in zip(body, EAGER_OPS)] == EAGER_OPS
    for line in body:   # CuPy, torch and their ratios
        cells = line.split()
        assert cells[-6:-4] == ["n/a", "n/a"] and cells[-3:-1] == ["n/a", "n/a"], line
    # the saved run prints the same table again
    again = run_python(["-m", "tensorplay", "bench", "--from-json", str(out_json)], "none")
    assert again.returncode == 0, again.stderr
    assert _eager_lines(again.stdout) == [title, header, _rule, *body]


def test_bench_eager_calls_must_be_positive_and_belongs_to_a_new_run(tmp_path):
    result = run_python(["-m", "tensorplay", "bench", "--eager-calls", "0"], "sim")
    assert result.returncode == 2 and "--eager-calls must be at least 1" in result.stderr
    result = run_python(["-m", "tensorplay", "bench", "--from-json", SAVED_RUN, "--eager-only"],
                        "sim")
    assert result.returncode == 2 and "--from-json reads a saved run" in result.stderr
    assert result.stdout == ""


def test_bench_without_an_accelerator_points_to_the_eager_table_on_the_host():
    result = run_python(["-m", "tensorplay", "bench"], "none")
    assert result.returncode == 2
    assert "bench needs an accelerator" in result.stderr and "--eager-only" in result.stderr


def test_plot_checks_for_matplotlib_before_running_anything(tmp_path):
    out_png = tmp_path / "plot.png"
    result = run_python(["-m", "tensorplay", "bench", "--plot", str(out_png)], "sim",
                        _without(tmp_path, "matplotlib"))
    assert result.returncode == 2
    assert "--plot needs matplotlib" in result.stderr and "tensorplay[bench]" in result.stderr
    assert result.stdout == "" and not out_png.exists()


def test_bench_options_are_checked_before_running(tmp_path):
    result = run_python(["-m", "tensorplay", "bench", "--json", str(tmp_path / "no" / "x.json")],
                        "sim")
    assert result.returncode == 2 and "does not exist" in result.stderr
    assert result.stdout == ""


SAVED_RUN = os.path.join(ROOT, "benchmarks", "results", "bench_h200.json")


def test_bench_from_json_reprints_a_saved_run_with_aligned_columns(tmp_path):
    result = run_python(["-m", "tensorplay", "bench", "--from-json", SAVED_RUN], "none")
    assert result.returncode == 0, result.stderr
    header, *table = result.stdout.splitlines()
    assert "NVIDIA H200" in header
    with open(SAVED_RUN) as handle:
        saved = json.load(handle)
    rows = saved["rows"]
    body = table[2:table.index("")] if "" in table else table[2:]
    assert len(body) == len(rows)
    if "eager" in saved:   # the eager table follows, one line per op
        eager = table[table.index("") + 1:]
        assert eager[0].startswith("eager ops on")
        for op in saved["eager"]["ops"]:
            assert any(line.startswith(op["op"]) for line in eager), op
    # every ratio ends in the same column, whatever the length of the implementation's name
    ends = {line.index("x", len(table[0]) - 3) for line in body}
    assert len(ends) == 1, table


def _text_problems(fig):
    """Texts of the figure that leave it or overlap another text (titles, labels, values)."""
    from matplotlib.text import Text

    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    texts = [t for t in (fig._suptitle, fig._supxlabel) if t is not None]
    for axis in fig.axes:
        low, high = axis.get_xlim()
        texts += [t for t in axis.get_children() if isinstance(t, Text)]
        texts += axis.get_yticklabels()
        texts += [t for t, x in zip(axis.get_xticklabels(), axis.get_xticks()) if low <= x <= high]
    boxes = [(t.get_text(), t.get_window_extent(renderer)) for t in texts
             if t.get_visible() and t.get_text()]
    page = fig.bbox
    problems = [("cut", text) for text, box in boxes
                if box.x0 < page.x0 - 1 or box.y0 < page.y0 - 1 or box.x1 > page.x1 + 1
                or box.y1 > page.y1 + 1]
    for i, (text, box) in enumerate(boxes):
        problems += [("overlap", text, other) for other, box2 in boxes[i + 1:]
                     if box.overlaps(box2)]
    return problems


def _synthetic_run(cases, peers, name_length, title_length):
    rows = [{"case": f"case {c} " + "with a long name " * (title_length // 17),
             "impl": ("tensorplay" if p == 0 else f"peer {p}") + " x" * (name_length // 2),
             "us": 0.5 * 10 ** (p % 6) * (c + 1)}
            for c in range(cases) for p in range(peers)]
    return {"date": "2026-01-01", "device": "sim:0", "device_name": "a device", "peers": {},
            "simulated": False, "rows": rows}


@once_per_suite
def test_bench_plot_draws_the_eager_table_one_panel_per_op():
    pytest.importorskip("matplotlib")
    from tensorplay.bench import plot as _bench_plot

    ops = [{"op": op, "tensorplay": 10.0 + i, "cupy": 5.0, "torch": None, "numpy": 1.5,
            "tp/cupy": (10.0 + i) / 5.0, "tp/torch": None, "tp/numpy": (10.0 + i) / 1.5}
           for i, op in enumerate(EAGER_OPS)]
    run = dict(_synthetic_run(2, 2, 10, 10), eager={"device": "sim:0", "calls": 20,
                                                    "repeats": 5, "unit": "us", "ops": ops})
    fig = _bench_plot.figure(run)
    assert len(fig.axes) == 2 + len(EAGER_OPS)
    assert _text_problems(fig) == []
    labels = [[t.get_text() for t in axis.get_yticklabels()] for axis in fig.axes[2:]]
    assert labels == [["tensorplay", "CuPy", "NumPy"]] * len(EAGER_OPS)


@once_per_suite
def test_bench_plot_leaves_out_rows_that_did_not_run():
    pytest.importorskip("matplotlib")
    from tensorplay.bench import plot as _bench_plot

    run = _synthetic_run(2, 3, 10, 10)
    run["rows"][1] = dict(run["rows"][1], us=None, note="skipped: torch.compile failed")
    run["rows"] += [{"case": "C = A @ B, 4096x4096, bfloat16", "impl": "torch", "us": None,
                     "note": "failed: RuntimeError"}]
    fig = _bench_plot.figure(run)
    assert len(fig.axes) == 2    # the case whose only row did not run has no panel
    assert _text_problems(fig) == []
    labels = [[t.get_text() for t in axis.get_yticklabels()] for axis in fig.axes]
    assert labels[0] == [run["rows"][0]["impl"], run["rows"][2]["impl"]]
    assert len(labels[1]) == 3


@once_per_suite
@pytest.mark.parametrize("shape", [(1, 1, 10, 10), (25, 9, 90, 150), (4, 2, 60, 400)])
def test_bench_plot_has_no_cut_or_overlapping_text(shape):
    pytest.importorskip("matplotlib")
    from tensorplay.bench import plot as _bench_plot

    with open(SAVED_RUN) as handle:
        saved = json.load(handle)
    for run in (saved, _synthetic_run(*shape)):
        fig = _bench_plot.figure(run)
        assert _text_problems(fig) == []
        title = fig._suptitle.get_text()
        assert title.count(run["device_name"]) <= 1 and title.count("tensorplay") <= 1


@once_per_suite
def test_run_suite_streams_everything_and_names_failing_configurations(tmp_path):
    test_file = tmp_path / "test_probe.py"
    test_file.write_text(textwrap.dedent("""
        import os

        def test_passes():
            pass

        def test_fails_on_one_device():
            print("FIRST-LINE-OF-A-LONG-REPORT")
            print("filler " * 2000)
            config = (os.environ["TENSORPLAY_ACCELERATOR"],
                      os.environ.get("TENSORPLAY_SIM_DEVICES"))
            assert config != ("sim", "1")
    """))
    env = dict(os.environ, TENSORPLAY_TEST_CUDA="0")
    result = subprocess.run([sys.executable, os.path.join(ROOT, "tests", "run_suite.py"),
                             str(test_file)], cwd=ROOT, env=env,
                            capture_output=True, text=True, timeout=TIMEOUT_S, check=False)
    assert result.returncode == 1
    out = result.stdout
    assert out.count("FIRST-LINE-OF-A-LONG-REPORT") >= 1       # nothing cut from the middle
    failing = out[out.index("configurations passed"):].splitlines()[1:]
    failing = [line.strip() for line in failing if line.startswith("  ")]
    assert len(failing) == 1, out[-2000:]
    assert failing[0].startswith("sim-1-device (TENSORPLAY_ACCELERATOR=sim "
                                 "TENSORPLAY_SIM_DEVICES=1): pytest exited 1 (")
    assert "1 failed" in failing[0] and "1 passed" in failing[0]
