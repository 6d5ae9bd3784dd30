"""A newcomer's first hour: the README's first lines are the three commands, `make lab` sets up
what the lessons need, and the JupyterLab settings it installs name real settings."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT


def test_readme_opens_with_demo_lab_and_test():
    first = ROOT.joinpath("README.md").read_text().split("```")[1]
    assert re.findall(r"^make (\w+)", first, re.MULTILINE) == ["demo", "lab", "test"]
    targets = re.findall(r"^([\w-]+):", ROOT.joinpath("Makefile").read_text(), re.MULTILINE)
    assert {"demo", "lab", "test", "test-fast"} <= set(targets)
    assert "make lab" in ROOT.joinpath("book", "intro.md").read_text()


def test_lab_installs_what_every_lesson_imports():
    """Lesson 16 imports transformers (a pipeline folder's text encoder): the `notebooks`
    extra must pull the `pipeline` extra in."""
    text = ROOT.joinpath("pyproject.toml").read_text()
    notebooks = re.search(r"^notebooks = \[(.*?)\]$", text, re.MULTILINE | re.DOTALL).group(1)
    assert "ppdit[pipeline]" in notebooks and "jupyterlab" in notebooks
    assert "scripts/bootstrap.sh notebooks" in ROOT.joinpath("scripts", "lab.sh").read_text()


def test_lab_settings_name_real_jupyterlab_settings():
    overrides = json.loads(ROOT.joinpath("scripts", "jupyterlab_overrides.json").read_text())
    schemas = Path(sys.prefix, "share", "jupyter", "lab", "schemas")
    if not schemas.is_dir():
        pytest.skip("JupyterLab is not installed here (make lab / make test install it)")
    for plugin, values in overrides.items():
        package, _, name = plugin.partition(":")
        schema = json.loads(schemas.joinpath(package, f"{name}.json").read_text())
        for key, value in values.items():
            spec = schema["properties"][key]
            if "oneOf" in spec:
                allowed = [o["const"] for o in spec["oneOf"]]
                assert value in allowed, (plugin, key, value, allowed)
            else:
                kinds = {"boolean": bool, "string": str, "number": (int, float)}
                assert isinstance(value, kinds[spec["type"]]), (plugin, key, value, spec)


def test_the_readme_and_the_book_quote_the_gpu_record():
    """What has run on GPUs is said from the committed run files, never as a bare sentence:
    the README's and the book's block equals ``gpu_runs.record`` (paste it after a new run)."""
    from ppdit.analysis.gpu_runs import load_runs, record

    said = record(load_runs(committed_only=True))
    for page in ("README.md", "book/intro.md"):
        text = ROOT.joinpath(page).read_text()
        block = re.search(r"<!-- gpu-record:[^>]*-->\n(.*?)\n<!-- /gpu-record -->", text, re.S)
        assert block is not None and block.group(1) == said, (page, said)
        assert "the same code uses CUDA" not in text and "runs on GPUs with NCCL" not in text


# A chapter's stated study time, in the words the lessons and labs use.
_WORDS = {"an hour and a quarter": 75, "an hour and a half": 90, "an hour": 60}


def _study_minutes(text: str) -> int:
    said = re.search(r"\*\*Study time:\*\* about ([^,.]+)", text)
    assert said, "no '**Study time:** about ...' line"
    words = said.group(1).strip()
    return _WORDS.get(words) or int(re.fullmatch(r"(\d+) minutes", words).group(1))


def _chapter_text(doc: str) -> str:
    path = ROOT / f"{doc}.ipynb" if doc.startswith("notebooks/") else ROOT / f"{doc}.md"
    if path.suffix == ".ipynb":
        return "".join(json.loads(path.read_text())["cells"][0]["source"])
    return path.read_text()


def test_the_core_path_adds_up_to_at_most_ten_hours():
    """The intro's core path: each item's minutes are what its chapter states, and the total
    line is their sum, at most 10 hours."""
    intro = (ROOT / "book" / "intro.md").read_text()
    block = intro.split("<!-- core-path:")[1].split("<!-- /core-path -->")[0]
    items = re.findall(r"\{doc\}`([^`]+)` — (\d+) min", block)
    assert len(items) >= 8
    for doc, minutes in items:
        assert _study_minutes(_chapter_text(doc)) == int(minutes), f"{doc}: {minutes} min"
    total = sum(int(m) for _, m in items)
    hours, minutes = re.search(r"In all: (\d+) h (\d+) min", block).groups()
    assert int(hours) * 60 + int(minutes) == total <= 600


def test_every_lesson_opens_with_the_same_four_headings():
    """What you will learn, what it needs, how long it runs, how long it takes to study: once
    each and in that order, so a reader finds them in the same place in every lesson."""
    for path in sorted(ROOT.joinpath("notebooks").glob("[0-9][0-9]_*.ipynb")):
        opening = _chapter_text(f"notebooks/{path.stem}")
        said = re.findall(r"\*\*(What you will learn|What it needs|Time|Study time)[.:]\*\*",
                          opening)
        assert said == ["What you will learn", "What it needs", "Time", "Study time"], path.stem


def test_the_series_totals_are_the_chapters_times_added_up():
    """The intro's totals for all the lessons and all the labs are the sums of what each one
    states, so a chapter that grows moves them."""
    said = re.search(r"(\d+) h (\d+) min of\s+lessons and (\d+) h (\d+) min of labs",
                     (ROOT / "book" / "intro.md").read_text())
    lessons_h, lessons_min, labs_h, labs_min = map(int, said.groups())
    lessons = [f"notebooks/{p.stem}" for p in ROOT.joinpath("notebooks").glob("[0-9][0-9]_*.ipynb")]
    labs = [f"labs/{p.parent.name}/README" for p in ROOT.joinpath("labs").glob("lab*/README.md")]
    assert sum(_study_minutes(_chapter_text(d)) for d in lessons) == lessons_h * 60 + lessons_min
    assert sum(_study_minutes(_chapter_text(d)) for d in labs) == labs_h * 60 + labs_min


def test_the_layout_page_shows_what_ppdit_plan_prints(capsys):
    """book/choosing_a_layout.md pastes `ppdit plan`'s output: each block must be what the
    command prints now (paste it again after the model changes)."""
    import shlex

    from ppdit.cli import main

    page = (ROOT / "book" / "choosing_a_layout.md").read_text()
    blocks = re.findall(r"<!-- plan: (.*?) -->\n```text\n(.*?)\n```\n<!-- /plan -->", page, re.S)
    assert len(blocks) >= 2
    for args, pasted in blocks:
        assert main(["plan", *shlex.split(args)]) == 0
        assert capsys.readouterr().out.rstrip("\n") == pasted, f"ppdit plan {args}"


def test_the_files_are_numbered_in_the_books_order():
    """JupyterLab lists the notebooks by file name: that must be the order the book teaches
    them, every lesson numbered once, with no gap, and every lesson's title opening with its
    number."""
    toc = ROOT.joinpath("book", "_toc.yml").read_text()
    in_book = re.findall(r"file: notebooks/(\d\d)_(\w+)", toc)
    on_disk = sorted(p.stem for p in ROOT.joinpath("notebooks").glob("[0-9][0-9]_*.ipynb"))
    assert [f"{n}_{name}" for n, name in in_book] == on_disk
    assert [int(n) for n, _ in in_book] == list(range(len(in_book)))
    for stem in on_disk:
        cells = json.loads(ROOT.joinpath("notebooks", f"{stem}.ipynb").read_text())["cells"]
        assert "".join(cells[0]["source"]).startswith(f"# {stem[:2]} ·"), stem
