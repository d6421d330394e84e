"""Issue 16 point 5: chat-ledger installs like a package, every document reference resolves, and the
README's tour and sample output are what the CLI does."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DOCS = sorted([REPO / "README.md", REPO / "BENCHMARKS.md", *(REPO / "docs").glob("*.md"),
               *(REPO / "examples").rglob("README.md")])
TOP = ("ledger/", "projections/", "commands/", "docs/", "examples/", "tests/", ".ci/")
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
CODE = re.compile(r"`([^`\s]+)`")
CLI = Path(sys.executable).with_name("chat-ledger")


def slug(heading: str) -> str:
    """GitHub's anchor of a heading."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower().replace("`", ""))
    return text.replace(" ", "-")


def anchors(doc: Path) -> set[str]:
    return {slug(m.group(1)) for m in re.finditer(r"^#+\s+(.*)$", doc.read_text(encoding="utf-8"), re.M)}


def references(doc: Path) -> list[tuple[str, str]]:
    """(kind, target) of every link and every path named in code spans."""
    text = doc.read_text(encoding="utf-8")
    out = [("link", m.group(1)) for m in LINK.finditer(text)]
    for m in CODE.finditer(text):
        token = m.group(1).rstrip(".,;:")
        if any(ch in token for ch in "<>*…{}$=") or "://" in token:
            continue
        if token.startswith(TOP) or re.fullmatch(r"[\w.-]+\.md", token) or token.startswith("spec/"):
            out.append(("path", token.split(" ")[0].split(":")[0]))
    return out


@pytest.mark.parametrize("doc", DOCS, ids=[str(d.relative_to(REPO)) for d in DOCS])
def test_every_document_reference_resolves(doc: Path) -> None:
    missing = []
    for kind, target in references(doc):
        if kind == "link" and re.match(r"[a-z]+:", target):
            continue  # a web address
        path, _, anchor = target.partition("#")
        if kind == "path":
            where = [REPO / path, REPO / path.split("(")[0]]
        else:
            where = [doc.parent / path] if path else [doc]
        found = next((w for w in where if w.exists()), None)
        if found is None:
            missing.append(target)
        elif anchor and found.suffix == ".md" and anchor not in anchors(found):
            missing.append(f"{target} (no such heading)")
    assert not missing, f"{doc.relative_to(REPO)} names what is not in the repository: {missing}"


def test_the_checker_finds_a_missing_reference(tmp_path: Path) -> None:
    doc = tmp_path / "x.md"
    doc.write_text("See `CONTRACT.md`, `spec/chatd-reference.md`, [this](#nowhere) and `ledger/store.py`.\n")
    assert references(doc) == [("link", "#nowhere"), ("path", "CONTRACT.md"), ("path", "spec/chatd-reference.md"),
                               ("path", "ledger/store.py")]
    assert "nowhere" not in anchors(doc)


# -- the README's tour -------------------------------------------------------------------------------------------

def readme_blocks() -> list[str]:
    return re.findall(r"```bash\n(.*?)```", (REPO / "README.md").read_text(encoding="utf-8"), re.S)


def run_tour(script: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "CHAT_LEDGER_DB": f"sqlite:///{cwd / 'tour.db'}"}
    script = script.replace(".venv/bin/chat-ledger", str(CLI)).replace("examples/", str(REPO / "examples") + "/")
    return subprocess.run(["bash", "-c", "set -e -o pipefail\n" + script], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=300)


def test_readme_apply_sample_is_exact(tmp_path: Path) -> None:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    (apply_block,) = [b for b in readme_blocks() if b.strip().startswith(".venv/bin/chat-ledger apply")]
    done = run_tour(apply_block.replace("chat-ledger apply", "chat-ledger apply"), tmp_path)
    assert done.returncode == 1, done.stderr  # "1 when any was refused": the scenario refuses line 13
    lines = {o["line"]: o for o in map(json.loads, done.stdout.splitlines())}
    for m in re.finditer(r'\{"line": (\d+), "ok": (true|false), (?:\.\.\., )?"type": "(\w+)"', readme):
        line = lines[int(m.group(1))]
        assert (line["ok"], line["type"]) == (m.group(2) == "true", m.group(3)), m.group(0)
    quoted = re.search(r'\{"line": (\d+), "ok": false, \.\.\., "error": (\{"code": .*?\}\})', readme, re.S)
    assert quoted is not None
    assert lines[int(quoted.group(1))]["error"] == json.loads(quoted.group(2).replace("\n", " ")[:-1])


@pytest.mark.slow
def test_readme_tour_runs_as_written(tmp_path: Path) -> None:
    (tour,) = [b for b in readme_blocks() if "ORG=" in b]
    done = run_tour(tour, tmp_path)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    out = done.stdout
    assert "queue=1" in out  # "queued: the chat is running"
    assert "v2 built" in out or "switched" in out  # the blue/green rebuild switched
    assert "tool policy: execute" in out  # the promoted prompt's policy narrowed the chat's


# -- installs like a package ----------------------------------------------------------------------------------------

@pytest.mark.slow
def test_pip_install_non_editable_then_demo(tmp_path: Path) -> None:
    """``pip install .`` (not editable) into a fresh venv, then ``chat-ledger demo`` from another folder.
    No network: the dependencies come from this venv (a path entry, not its .pth files, so this checkout's
    editable install is not seen), and the build uses this venv's setuptools."""
    src = tmp_path / "src"
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=REPO, capture_output=True,
                           text=True, check=True).stdout.split()
    for f in files:
        if (REPO / f).is_file():
            (src / f).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / f, src / f)
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    purelib = Path(subprocess.run([str(venv / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                  capture_output=True, text=True, check=True).stdout.strip())
    (purelib / "deps-from-test-venv.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    pip = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--no-deps",
                          "--no-build-isolation", "--no-index", str(src)], capture_output=True, text=True, timeout=300)
    assert pip.returncode == 0, pip.stdout + pip.stderr
    where = subprocess.run([str(venv / "bin" / "python"), "-c", "import commands.tools.demo as d; print(d.__file__)"],
                           capture_output=True, text=True, check=True, cwd=tmp_path).stdout.strip()
    assert where.startswith(str(purelib)), where  # the installed copy, not this checkout
    run = tmp_path / "elsewhere"
    run.mkdir()
    demo = subprocess.run([str(venv / "bin" / "chat-ledger"), "demo", "--sim-chats", "2"], cwd=run,
                          capture_output=True, text=True, timeout=300, env={k: v for k, v in os.environ.items() if k != "CHAT_LEDGER_DB"})
    assert demo.returncode == 0, demo.stdout + demo.stderr
    assert "Recording 8 scenarios" in demo.stdout and "UNEXPECTED" not in demo.stdout
    assert (run / "chat-ledger.db").exists()


# -- citations: every section a doc or a comment cites is in the repository -------------------------------------

#: documents this project does not hold (its source documents lived beside it): never cited
FOREIGN = re.compile(r"CONTRACT|ARCHITECTURE|spec/|\b[Rr]eference §|chatd-reference|queue-editing\.md")
CITATION = re.compile(r"\b(?:docs/)?(\w+)\.md §(\d+(?:\.\d+)?)")


def numbered_sections(doc: Path) -> set[str]:
    """The numbers of a document's numbered headings (``## 6. Model configs`` -> "6", ``### 6.1 …`` -> "6.1")."""
    return {m.group(1) for m in re.finditer(r"^#+\s+(\d+(?:\.\d+)?)\.?\s", doc.read_text(encoding="utf-8"), re.M)}


def citations_in_repository() -> list[tuple[str, int, str]]:
    out = []
    for path in sorted(REPO.rglob("*")):
        rel = path.relative_to(REPO)
        if (path.suffix not in (".py", ".md", ".html", ".toml") or rel.parts[0].startswith(".")
                or rel == Path("tests/cli/test_docs.py") or "node_modules" in rel.parts):
            continue
        for number, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
            out.append((str(rel), number, line))
    return out


def test_every_citation_resolves_in_the_repository() -> None:
    """Issue 30, point 7: no doc or comment cites a document the repository does not hold (``CONTRACT §4``,
    ``spec/…``, "reference §6"); a ``docs/X.md §N`` citation names a numbered heading of that document."""
    bad = []
    for rel, number, line in citations_in_repository():
        if FOREIGN.search(line):
            bad.append(f"{rel}:{number}: {line.strip()[:100]}")
        for name, section in CITATION.findall(line):
            doc = REPO / "docs" / f"{name}.md"
            if not doc.exists() or section not in numbered_sections(doc):
                bad.append(f"{rel}:{number}: no section {section} in docs/{name}.md")
    assert not bad, "citations that do not resolve:\n" + "\n".join(bad)


def test_the_citation_check_finds_a_foreign_citation(tmp_path: Path) -> None:
    assert FOREIGN.search("the result (CONTRACT §4)") and FOREIGN.search("see reference §6.1")
    assert CITATION.findall("see docs/chatd.md §6.1 and codex.md §3") == [("chatd", "6.1"), ("codex", "3")]
    assert "6.1" in numbered_sections(REPO / "docs" / "chatd.md") and "99" not in numbered_sections(REPO / "docs" / "chatd.md")
