"""The README's accuracy table is the one benchmarks/accuracy_report.py generated (docs/accuracy/readme_table.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_the_readme_holds_the_generated_table_between_its_markers(benchmark_module):
    rep = benchmark_module("accuracy_report")
    text = (ROOT / "README.md").read_text()
    block = text.split(rep.README_BEGIN, 1)[1].split(rep.README_END, 1)[0]
    assert block.strip() == (ROOT / "docs" / "accuracy" / "readme_table.md").read_text().strip()


def test_update_readme_replaces_only_the_block(tmp_path, benchmark_module):
    rep = benchmark_module("accuracy_report")
    p = tmp_path / "README.md"
    p.write_text(f"# t\n\nbefore\n{rep.README_BEGIN}\nold | table\n{rep.README_END}\nafter\n")
    rep.update_readme(p, "| new | table |\n")
    assert p.read_text() == f"# t\n\nbefore\n{rep.README_BEGIN}\n| new | table |\n{rep.README_END}\nafter\n"


def test_update_readme_without_markers_is_one_clear_error(tmp_path, benchmark_module):
    rep = benchmark_module("accuracy_report")
    p = tmp_path / "README.md"
    p.write_text("# no markers\n")
    with pytest.raises(SystemExit, match="needs one line"):
        rep.update_readme(p, "| t |")
    assert p.read_text() == "# no markers\n"
