"""Issue 39, item 5: a pointer to a README section (README, "<heading>") in the Makefile, pyproject.toml or a config
names a section that exists."""

import re

from conftest import ROOT


README_POINTER = re.compile(r"README,? \"([^\"]+)\"")


def test_readme_section_pointers_name_sections_that_exist():
    headings = [line.lstrip("#").strip() for line in (ROOT / "README.md").read_text().splitlines()
                if line.startswith("#")]
    files = [ROOT / "Makefile", ROOT / "pyproject.toml", *sorted((ROOT / "conf").rglob("*.yaml"))]
    stale = [f"{path.relative_to(ROOT)}: {name}" for path in files for name in README_POINTER.findall(path.read_text())
             if not any(h.startswith(name) for h in headings)]
    assert not stale
