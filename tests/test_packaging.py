"""An installed (non-editable) ctxlake finds its sql/ folder: the wheel carries it."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

from pipeline.core import sqlfiles

REPO = Path(__file__).resolve().parent.parent


def test_the_wheel_carries_every_sql_file_under_pipeline_sql(tmp_path):
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                    "-q", "-w", str(tmp_path), str(REPO)], check=True, capture_output=True)
    wheel, = tmp_path.glob("ctxlake-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    expected = {f"pipeline/sql/{p.relative_to(REPO / 'sql').as_posix()}"
                for p in (REPO / "sql").rglob("*.sql")}
    assert len(expected) > 10
    assert expected <= names


def test_every_sql_file_has_a_purpose_comment_on_line_one_and_one_statement():
    for path in sorted(sqlfiles.sql_dir().rglob("*.sql")):
        text = path.read_text(encoding="utf-8")
        assert text.startswith("-- "), f"{path.name}: line 1 must be a purpose comment"
        body = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("--"))
        assert body.strip().rstrip(";").count(";") == 0, f"{path.name}: more than one statement"
