"""The `make demo` outputs stay byte-identical to bench/demo_manifest.json (issue #16)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.slow
def test_the_demo_outputs_match_the_recorded_manifest_file_by_file(tmp_path):
    scratch = tmp_path / "demo"
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "demo_identical.py")],
                          env={"PATH": str(Path(sys.executable).parent), "CTXLAKE_DEMO_SCRATCH": str(scratch)},
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    recorded = json.loads((ROOT / "bench" / "demo_manifest.json").read_text(encoding="utf-8"))
    assert len(recorded) > 900
    assert done.stdout.startswith(f"identical: {len(recorded)} files match demo_manifest.json")
