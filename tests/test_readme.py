"""The README as a newcomer copies it: the tour's code runs as written, CI runs the README's test
command, and a build without an accelerator says how to get the simulated one."""

import os
import re
import shlex

import pytest

import tensorplay as tp

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _readme() -> str:
    with open(os.path.join(ROOT, "README.md")) as handle:
        return handle.read()


def _first_block_after(heading: str, language: str = "") -> str:
    text = _readme()
    start = text.index(heading)
    match = re.compile(rf"^```{language}\n(.*?)^```", re.DOTALL | re.MULTILINE).search(text, start)
    assert match, f"no ```{language} block after {heading!r} in README.md"
    return match.group(1)


def test_readme_tour_runs_as_written(capsys):
    code = _first_block_after("## A short tour", "python")
    namespace = {"__name__": "readme_tour"}
    if tp.accelerator.is_available():
        exec(compile(code, "README.md (tour)", "exec"), namespace)  # noqa: S102 - the README's
        printed = capsys.readouterr().out.splitlines()
        assert "10" in printed                      # the device-side while loop ran ten times
        assert len(namespace["results"]) == 3
        assert tuple(namespace["out"].shape) == (8,)
        assert namespace["loss"].item() < 0.9 * namespace["first"]   # the model learned
    else:
        # host-only: the host part runs, then the first accelerator call says how to get sim
        with pytest.raises(RuntimeError, match="TENSORPLAY_ACCELERATOR=sim"):
            exec(compile(code, "README.md (tour)", "exec"), namespace)  # noqa: S102
        assert namespace["x"].tolist() == [[0.0, -1.0, 2.0], [3.0, -1.0, 5.0]]
    assert tp.ones(2).sum().item() == 2.0


@pytest.mark.skipif(tp.accelerator.current_accelerator() is not None,
                    reason="the error of a build without an accelerator")
@pytest.mark.parametrize("spelling", ["sim:0", "cuda", 0])
def test_no_accelerator_device_error_names_sim(spelling):
    with pytest.raises(ValueError, match="TENSORPLAY_ACCELERATOR=sim"):
        tp.zeros(2, device=spelling)
    assert tp.zeros(2).sum().item() == 0.0


def test_ci_runs_the_readme_test_command():
    block = _first_block_after("Run the tests").strip()
    with open(os.path.join(ROOT, ".ci", "run")) as handle:
        commands = [line.strip() for line in handle
                    if line.strip() and not line.lstrip().startswith("#")]
    assert shlex.split(commands[-1]) == shlex.split(block)


def test_license_is_the_one_pyproject_declares():
    with open(os.path.join(ROOT, "pyproject.toml")) as handle:
        declared = re.search(r'license = \{text = "([^"]+)"\}', handle.read()).group(1)
    with open(os.path.join(ROOT, "LICENSE")) as handle:
        text = handle.read()
    assert declared == "BSD-3-Clause"
    assert text.startswith("BSD 3-Clause License\n\nCopyright (c) 2026 The tensorplay authors\n")
    assert "Neither the name of the copyright holder" in text


def test_docs_hold_no_internal_brief():
    assert not os.path.exists(os.path.join(ROOT, "docs", "HELPERS_COMMON.md"))
