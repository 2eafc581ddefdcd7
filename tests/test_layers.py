"""The code's layers: benchmarks -> experiments -> runners -> zoo -> envs, with
no import circle inside a package and no package importing another's private
modules (tests may). Checked by import-linter (`lint-imports`, its contracts in
pyproject.toml) and, for benchmarks/ (scripts, not a package), by
benchmarks/code_facts.py."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_import_linter_contracts_are_kept():
    lint = Path(sys.executable).parent / "lint-imports"
    out = subprocess.run(
        [str(lint), "--no-cache"], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]
    assert "Contracts: 3 kept, 0 broken." in out.stdout


def test_no_circles_and_no_private_imports_across_packages_or_from_benchmarks(
    code_facts,
):
    facts = code_facts
    assert facts.circles() == []
    assert facts.private_imports() == []
