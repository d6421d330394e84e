"""Issue 16 point 1: the layout docs/architecture.md draws holds in the code.

Imports point down only (``commands/cli -> commands -> projections -> ledger``; the tools and the HTTP service
beside the CLI, never imported by the service layer); inside the CLI every command module imports only the
shared context; module-level imports form no circle; no module is over about 500 lines.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("ledger", "projections", "commands")
MAX_LINES = 500


def _modules() -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


MODULES = _modules()


def _module_level(body: list[ast.stmt]) -> list[ast.stmt]:
    """The statements of a module's own scope: its body and, recursively, the bodies of its ``if``/``try``
    blocks (an ``if TYPE_CHECKING:`` import names a module the code depends on just the same), never a
    function's or a class's."""
    out: list[ast.stmt] = []
    for node in body:
        out.append(node)
        if isinstance(node, (ast.If, ast.Try)):
            for block in (node.body, node.orelse, getattr(node, "finalbody", []),
                          *(h.body for h in getattr(node, "handlers", []))):
                out.extend(_module_level(block))
    return out


def _imports(path: Path, top_level_only: bool) -> set[str]:
    """The project modules ``path`` imports (all of its imports, or only those of its module scope, including
    the ones under ``if TYPE_CHECKING:``)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    nodes = _module_level(tree.body) if top_level_only else list(ast.walk(tree))
    names: set[str] = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{a.name}" for a in node.names)
    return {n for n in names if n in MODULES}


def _role(module: str) -> str:
    parts = module.split(".")
    if parts[0] == "commands" and len(parts) > 1 and parts[1] in ("cli", "http", "tools"):
        return f"commands.{parts[1]}"
    return parts[0]


#: role -> the roles it may import (besides its own)
ALLOWED = {
    "ledger": set(),
    "projections": {"ledger"},
    "commands": {"projections", "ledger"},
    "commands.tools": {"commands", "projections", "ledger"},
    "commands.http": {"commands", "projections", "ledger"},
    "commands.cli": {"commands", "commands.tools", "commands.http", "projections", "ledger"},
}


@pytest.mark.parametrize("module", sorted(MODULES))
def test_imports_point_down(module: str) -> None:
    role = _role(module)
    wrong = sorted(m for m in _imports(MODULES[module], top_level_only=False)
                   if _role(m) != role and _role(m) not in ALLOWED[role])
    assert wrong == [], f"{module} ({role}) imports {wrong}"


def test_cli_modules_import_only_the_shared_context() -> None:
    offenders = {}
    for module, path in MODULES.items():
        if _role(module) == "commands.cli" and module not in ("commands.cli", "commands.cli.main"):
            cli = {m for m in _imports(path, top_level_only=False)
                   if _role(m) == "commands.cli" and m not in ("commands.cli", "commands.cli.context")}
            if cli:
                offenders[module] = sorted(cli)
    assert offenders == {}


def test_no_import_circle() -> None:
    graph = {m: _imports(p, top_level_only=True) - {m} for m, p in MODULES.items()}
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    circles: list[list[str]] = []

    def visit(m: str, path: list[str]) -> None:
        state[m] = 1
        for n in sorted(graph[m]):
            if state.get(n) == 1:
                circles.append(path[path.index(n):] + [n] if n in path else [m, n])
            elif n not in state:
                visit(n, [*path, n])
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m, [m])
    # a package importing its own submodules (``__init__`` re-exports) is not a circle of roles
    circles = [c for c in circles if not any(a.startswith(b + ".") or b.startswith(a + ".") for a, b in zip(c, c[1:]))]
    assert circles == []


def test_no_module_over_about_500_lines() -> None:
    long = {m: n for m, p in MODULES.items() if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_LINES}
    assert long == {}


def test_the_checks_see_a_wrong_import(tmp_path: Path) -> None:
    """The import reader finds imports at any depth, and a ledger module importing the service layer is wrong."""
    bad = tmp_path / "bad.py"
    bad.write_text("def f():\n    from commands.handler import execute\n", encoding="utf-8")
    assert _imports(bad, top_level_only=False) == {"commands.handler"}
    assert _imports(bad, top_level_only=True) == set()
    typed = tmp_path / "typed.py"
    typed.write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ledger.chat.state import ChatState\n",
                     encoding="utf-8")
    assert _imports(typed, top_level_only=True) == {"ledger.chat.state"}
    assert "commands" not in ALLOWED["ledger"]
