"""Issue 30, point 3: the CLI imports what a command needs when it runs. ``--version`` and ``--help`` load no
command module, no database code, no driver; a SQLite read never loads psycopg or the service. (How long each
takes is measured by ``chat-ledger bench --only startup``, not here.)"""

from __future__ import annotations

import json
import subprocess
import sys

import click

from commands.cli.main import COMMANDS, main

HEAVY = ("psycopg", "litestar", "uvicorn", "projections", "ledger.store", "ledger.chat.events", "commands.cli.views",
         "commands.http")


def loaded_after(*args: str) -> set[str]:
    """The modules loaded by ``chat-ledger ARGS`` (run in a fresh interpreter), of those in ``HEAVY``."""
    code = ("import sys, runpy\nsys.argv = ['chat-ledger', *%r]\n"
            "try:\n    runpy.run_module('commands.cli.main', run_name='__main__')\nexcept SystemExit:\n    pass\n"
            "import json\nprint(json.dumps(sorted(m for m in sys.modules if m.startswith(%r))), file=sys.stderr)"
            % (list(args), HEAVY))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    return set(json.loads(out.stderr.strip().splitlines()[-1]))


def test_version_and_help_load_no_command_module_and_no_database_code():
    for args in (["--version"], ["--help"]):
        assert loaded_after(*args) == set(), args


def test_a_sqlite_read_loads_no_driver_and_no_service(tmp_path):
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    subprocess.run([sys.executable, "-m", "commands.cli.main", "--db", url, "init"], check=True, capture_output=True)
    loaded = loaded_after("--db", url, "status")
    assert "commands.cli.views" in loaded  # (the probe sees what the command loads)
    assert not {m for m in loaded if m.split(".")[0] in ("psycopg", "litestar", "uvicorn") or m.startswith("commands.http")}


def test_the_help_list_is_each_commands_own_short_help():
    ctx = click.Context(main)
    for name, (_, _, short) in COMMANDS.items():
        command = main.get_command(ctx, name)
        assert command is not None and command.name == name
        assert short == command.get_short_help_str(limit=1000), name
    assert set(COMMANDS) == set(main.list_commands(ctx))
