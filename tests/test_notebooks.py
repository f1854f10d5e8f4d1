"""The notebooks run headless (nbclient) on a small demo lake, with the venv's Python as kernel.

A kernelspec pointing at ``sys.executable`` is written to a temporary Jupyter data dir
(``JUPYTER_PATH`` is searched first), so the kernel is this venv's Python whatever other
kernelspecs the machine has (the venv's own ``python3`` spec runs ``python`` from PATH).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

from pipeline.demo.archive import write_demo_archive
from tests.helpers.lake import REPO, ingest_paths

NOTEBOOKS = ("usage_analytics", "policy_evaluation")
KERNEL = "ctxlake-test-python"


@pytest.fixture(scope="module")
def demo_lake(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("nb")
    write_demo_archive(tmp / "archive", size_bytes=600_000, seed=3)
    lake, _ = ingest_paths(tmp, tmp / "archive")
    return lake.root


@pytest.fixture
def kernel_env(tmp_path, monkeypatch, demo_lake):
    spec = tmp_path / "jupyter" / "kernels" / KERNEL
    spec.mkdir(parents=True)
    (spec / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "ctxlake test (venv)", "language": "python"}))
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path / "jupyter"))
    monkeypatch.setenv("JUPYTER_PLATFORM_DIRS", "1")
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(tmp_path / "runtime"))
    monkeypatch.setenv("IPYTHONDIR", str(tmp_path / "ipython"))
    monkeypatch.delenv("MPLBACKEND", raising=False)   # the kernel picks the inline backend
    monkeypatch.setenv("CTXLAKE_HOME", str(demo_lake))
    return demo_lake


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_notebooks_are_committed_without_outputs(name):
    nb = nbformat.read(REPO / "notebooks" / f"{name}.ipynb", as_version=4)
    nbformat.validate(nb)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert code
    assert all(c.outputs == [] and c.execution_count is None for c in code)


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_notebooks_run_headless_on_a_demo_lake(name, kernel_env):
    nb = nbformat.read(REPO / "notebooks" / f"{name}.ipynb", as_version=4)
    client = NotebookClient(nb, kernel_name=KERNEL, timeout=600,
                            resources={"metadata": {"path": str(REPO)}})
    client.execute()          # raises CellExecutionError on any error
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    # the notebook read the demo lake given by CTXLAKE_HOME
    assert str(kernel_env) in "".join(o.get("text", "") for o in outputs if o.output_type == "stream")
    # every chart came out (pyplot figures and the report's Figure objects)
    images = [o for o in outputs if "image/png" in o.get("data", {})]
    assert len(images) >= (3 if name == "usage_analytics" else 4)
