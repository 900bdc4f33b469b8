"""Every repository path named in code and docs exists: a docstring, README or notes file that
points at ``search/row_wise.py`` or ``studies/tools/build_pool.py`` sends the reader somewhere
real. Checked over every tracked text file but the studies' results (records of runs, written by
the drivers). A name is a path relative to the repository root, to ``shardlab/`` (the package's
own docstrings say ``costmodel/bundle.py``) or to the naming file's folder (markdown links); a
module attribute (``evaluate/sequential.task_budget``) names its module. What may be missing:

- a pattern (``results/set1-<UTC>.md``, ``datasets/<gpu>-events/``): its folder must exist;
- what a command writes (under :data:`OUTPUT_FOLDERS`, which the repository keeps for outputs);
- a file of another repository (:data:`EXTERNAL`: TorchRec's sources, upstream model configs);
- a record of how data were made: in a dataset's ``PROVENANCE.md`` or ``NOTES.md``, the commands
  as they were run (a ``Made by:`` line or an indented command line; the record gives the
  revision), and elsewhere a name followed by :data:`THEN` (the path it has now named beside it).
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TOP = ("shardlab", "studies", "scripts", "docs", "tests", "datasets", "notebooks", "reports")
#: Folders for what commands write (kept in the repository with a README or ignored).
OUTPUT_FOLDERS = ("reports/", "runs/", "build/")
#: Paths in other repositories that the provenance and docs cite.
EXTERNAL = ("torchrec/distributed/", "torchrec/datasets/", "docs/source/", "data/test/",
            "notebooks/news-example.ipynb", "datasets/iPinYou.py", "../../../datasets/Lookalike/")
#: What follows a path that a record names as it was when the data were made.
THEN = " when this was made"
SUFFIXES = (".py", ".md", ".sh", ".yaml", ".yml", ".toml", ".ipynb", ".cfg", ".txt")


def _files() -> list[str]:
    out = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    return [f for f in out if f.endswith(SUFFIXES) and not re.match(r"studies/[^/]+/results/", f)
            and f != "tests/test_paths_named.py"]


def _pattern() -> re.Pattern:
    sub = sorted(p.name for p in (ROOT / "shardlab").iterdir() if p.is_dir() and not p.name.startswith("_"))
    return re.compile(r"(?<![\w/.\-])((?:\.\./)*(?:%s)/[\w./\-]*[\w/])" % "|".join(TOP + tuple(sub)))


def _resolves(token: str, where: Path) -> bool:
    bases = (ROOT, ROOT / "shardlab", where.parent)
    for base in bases:
        p = base / token
        if p.exists():
            return True
        head, _, tail = token.rpartition("/")
        if "." in tail and (base / head / (tail.split(".")[0] + ".py")).exists():   # module.attribute
            return True
        if (base / (token + ".json")).exists():                                  # a cost-model bundle's name
            return True
        folder = base / head
        if tail and folder.is_dir() and any(c.name.startswith(tail) for c in folder.iterdir()):
            return True                                   # a file by its stem, or a run's name prefix
    return False


def missing_paths() -> dict[str, list[str]]:
    """Path named -> the files naming it, for every name that does not resolve (module docstring)."""
    pat, missing = _pattern(), {}
    for f in _files():
        text = (ROOT / f).read_text(errors="ignore")
        record = f.startswith("datasets/") and Path(f).name in ("PROVENANCE.md", "NOTES.md")
        for m in pat.finditer(text):
            token, after = m.group(1), text[m.end():m.end() + 40]
            if token.startswith(OUTPUT_FOLDERS) or token.startswith(EXTERNAL):
                continue
            line = text[text.rfind("\n", 0, m.start()) + 1: m.start()]
            if record and (line.startswith("    ") or line.lstrip().startswith("Made by")):
                continue
            if after[:1] in "<{*" or after[:2] in ("-<", "_<", "-*", "_*", "-{", "_{", ".*"):
                token = token.rsplit("/", 1)[0] if not token.endswith("/") else token
            elif after.lstrip("`").startswith(THEN):
                continue
            if not _resolves(token, ROOT / f):
                missing.setdefault(token, []).append(f)
    return missing


def test_every_path_named_in_code_and_docs_exists():
    missing = missing_paths()
    assert not missing, "\n".join(f"{p} (named in {', '.join(sorted(set(fs)))})" for p, fs in sorted(missing.items()))


def test_the_check_finds_a_missing_path_and_passes_a_pattern(tmp_path, monkeypatch):
    """The scan itself: a name that does not exist is reported, a pattern's folder is checked."""
    assert _resolves("search/row_wise.py", ROOT / "shardlab" / "x.py")
    assert _resolves("evaluate/sequential.task_budget", ROOT / "shardlab" / "x.py")
    assert not _resolves("search/no_such_module.py", ROOT / "shardlab" / "x.py")
    pat = _pattern()
    assert [m.group(1) for m in pat.finditer("see ``studies/statistics/`` and search/row_wise.py.")] == [
        "studies/statistics/", "search/row_wise.py"]
