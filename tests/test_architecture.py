"""The shape of the code (ARCHITECTURE.md): no import circles, no module past 400
lines, no class stacked on two of the project's classes, no dialect importing
another. CI's import-linter contracts (pyproject.toml) hold the layers; this
checks the whole module graph on its own, imports inside functions included."""

from __future__ import annotations

from pathlib import Path

import grimp

PACKAGE = Path(__file__).resolve().parent.parent / "mq_cli"
MAX_LINES = 400
#: the drain's loop only passes messages between its parts (ARCHITECTURE.md)
MAX_LOOP_LINES = 250


def _cycles(graph: grimp.ImportGraph) -> list[list[str]]:
    """Strongly connected groups of more than one module (Tarjan)."""
    modules = sorted(graph.modules)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0

    def visit(module: str) -> None:
        nonlocal counter
        work = [(module, iter(sorted(graph.find_modules_directly_imported_by(module))))]
        index[module] = low[module] = counter
        counter += 1
        stack.append(module)
        on_stack.add(module)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append(
                        (child, iter(sorted(graph.find_modules_directly_imported_by(child))))
                    )
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                group = []
                while True:
                    top = stack.pop()
                    on_stack.discard(top)
                    group.append(top)
                    if top == node:
                        break
                if len(group) > 1:
                    found.append(sorted(group))

    for module in modules:
        if module not in index:
            visit(module)
    return found


def test_no_import_circles():
    graph = grimp.build_graph("mq_cli", exclude_type_checking_imports=False)
    # A package's __init__ importing its own modules is how a package re-exports:
    # count only imports between modules.
    for module in list(graph.modules):
        for child in graph.find_children(module):
            if graph.direct_import_exists(importer=module, imported=child):
                graph.remove_import(importer=module, imported=child)
    assert _cycles(graph) == []


def test_no_module_is_past_400_lines():
    counts = {
        str(path.relative_to(PACKAGE.parent)): len(path.read_text().splitlines())
        for path in PACKAGE.rglob("*.py")
    }
    long = {name: n for name, n in counts.items() if n > MAX_LINES}
    assert long == {}
    assert counts["mq_cli/drain/loop.py"] < MAX_LOOP_LINES


def test_no_class_stacks_two_project_classes():
    """Behaviour is composed of parts held as attributes, not stacked from mixins
    (ARCHITECTURE.md): a class of mq_cli has at most one base class of mq_cli
    (Protocols, ABCs and exceptions of the standard library do not count)."""
    import importlib
    import inspect

    stacked = []
    for path in sorted(PACKAGE.rglob("*.py")):
        name = ".".join(("mq_cli", *path.relative_to(PACKAGE).with_suffix("").parts))
        if name == "mq_cli.__main__":
            continue  # running it is the CLI
        module = importlib.import_module(name.removesuffix(".__init__"))
        for cls in vars(module).values():
            if not inspect.isclass(cls) or cls.__module__ != module.__name__:
                continue
            ours = [b.__qualname__ for b in cls.__bases__ if b.__module__.startswith("mq_cli.")]
            if len(ours) > 1:
                stacked.append(f"{cls.__module__}.{cls.__qualname__}({', '.join(ours)})")
    assert stacked == []


def test_a_fourth_dialect_is_one_package(tmp_path, monkeypatch):
    """ARCHITECTURE.md, "A fourth database": a dialect is one package (its module and
    its .sql file), found without an edit anywhere else. Here a copy of the SQLite
    dialect, named "toy" with its own toy:// scheme, in a folder of its own: registered,
    then `mq init`, `enqueue`, `drain`, `stats` and `check` run on it."""
    import json
    import sys

    from click.testing import CliRunner

    import mq_cli.backends
    from mq_cli.backends import dialects, sqlfiles
    from mq_cli.cli.main import cli
    from mq_cli.core import dburl

    folder = tmp_path / "more-dialects"
    (folder / "toy").mkdir(parents=True)
    (folder / "toy" / "toy.sql").write_text((PACKAGE / "backends/sqlite/sqlite.sql").read_text())
    (folder / "toy" / "__init__.py").write_text(
        (PACKAGE / "backends/sqlite/__init__.py").read_text().replace("sqlite", "toy")
    )
    for name, changes in [
        ("url.py", [
            ('"sqlite"', '"toy"'),
            ('"sqlite://"', '"toy://"'),
            ('f"sqlite:{', 'f"toy:{'),
            ("zero_config=", "# zero_config="),  # SQLite stays the zero-config database
        ]),
        ("dialect.py", [
            ('"sqlite"', '"toy"'),
            ("from mq_cli.backends.sqlite import url", "from mq_cli.backends.toy import url"),
            ('connection_modules=("sqlite3",)', 'connection_modules=("toy_driver",)'),
        ]),
    ]:  # fmt: skip
        module = (PACKAGE / "backends/sqlite" / name).read_text()
        for old, new in changes:
            assert old in module, old
            module = module.replace(old, new)
        (folder / "toy" / name).write_text(module)

    monkeypatch.setattr(sqlfiles, "FOLDERS", [*sqlfiles.FOLDERS, str(folder)])
    monkeypatch.setattr(mq_cli.backends, "__path__", list(mq_cli.backends.__path__))
    monkeypatch.setattr(dialects, "_DIALECTS", dict(dialects._DIALECTS))
    monkeypatch.setattr(dialects, "_DECLARED", dict(dialects._DECLARED))
    monkeypatch.setattr(dburl, "_FORMS", dict(dburl._FORMS))
    monkeypatch.setattr(dburl, "_SCHEMES", dict(dburl._SCHEMES))
    try:
        dialects.discover()
        # Declared by its package, loaded at its first use.
        assert "mq_cli.backends.toy.dialect" not in sys.modules
        assert dialects.get("toy").url.schemes == ("toy",)

        url = f"toy:///{tmp_path}/toy.db"
        log = tmp_path / "ran.jsonl"
        env = {"MQ_CONFIG": None, "MQ_DATABASE_URL": url, "MQ_TEST_LOG": str(log)}

        def mq(*args: str):
            result = CliRunner().invoke(cli, list(args), env=env, catch_exceptions=False)
            assert result.exit_code == 0, result.output
            return result.output

        mq("init")
        mq("enqueue", "-q", "jobs", '{"n": 1}', '{"n": 2}')
        assert json.loads(mq("stats", "--json"))["jobs"]["ready"] == 2
        mq("drain", "-q", "jobs", "--handler", "tests.jobs:record")
        ran = [json.loads(line)["payload"]["n"] for line in log.read_text().splitlines()]
        assert sorted(ran) == [1, 2]
        assert json.loads(mq("stats", "--json")).get("jobs", {"ready": 0})["ready"] == 0
        assert f"reachable: toy:{tmp_path}/toy.db" in mq("check")
    finally:
        for name in ("toy", "toy.url", "toy.dialect"):
            sys.modules.pop(f"mq_cli.backends.{name}", None)


def test_no_dialect_imports_another():
    """pyproject.toml's independence contract names every registered dialect's
    package, and no import chain joins two of them: each database's package can be
    read and changed alone."""
    import tomllib

    from mq_cli.backends import dialects

    packages = {d.backend.__module__.rsplit(".", 1)[0] for d in dialects.all_dialects()}
    config = tomllib.loads((PACKAGE.parent / "pyproject.toml").read_text())
    contracts = config["tool"]["importlinter"]["contracts"]
    independent = [set(c["modules"]) for c in contracts if c["type"] == "independence"]
    assert packages in independent
    graph = grimp.build_graph("mq_cli", exclude_type_checking_imports=False)
    joined = [
        (a, b)
        for a in sorted(packages)
        for b in sorted(packages - {a})
        if graph.chain_exists(importer=a, imported=b, as_packages=True)
    ]
    assert joined == []


def _dialect_modules() -> set[str]:
    """Every module of each registered dialect's package (backends/postgres/url.py,
    backends/sqlite/wal.py, ...): the places that may name a dialect."""
    from mq_cli.backends import dialects

    graph = grimp.build_graph("mq_cli", exclude_type_checking_imports=False)
    packages = {d.backend.__module__.rsplit(".", 1)[0] for d in dialects.all_dialects()}
    return {m for m in graph.modules if m in packages or m.rsplit(".", 1)[0] in packages}


def test_only_the_dialect_modules_test_a_dialects_name():
    """Elsewhere a behaviour that differs reads a capability (backend.caps) or asks
    the registry; a comparison with "sqlite", "postgres", "mysql://"... would mean
    a fourth dialect had to edit that module too."""
    import ast

    from mq_cli.backends import dialects

    names = {
        word
        for d in dialects.all_dialects()
        for word in (d.name, *d.url.schemes, *d.url.mapping_kinds, *d.url.shown)
    }
    allowed = _dialect_modules()
    assert "mq_cli.backends.postgres.url" in allowed  # a helper of the PostgreSQL dialect
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        where = str(path.relative_to(PACKAGE))
        module = ".".join(("mq_cli", *path.relative_to(PACKAGE).with_suffix("").parts))
        if module in allowed:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Compare):
                operands = [node.left, *node.comparators]
            elif isinstance(node, ast.Call) and getattr(node.func, "attr", "") in (
                "startswith", "endswith",
            ):  # fmt: skip
                operands = list(node.args)
            else:
                continue
            literals = [
                c.value
                for operand in operands
                for c in ast.walk(operand)
                if isinstance(c, ast.Constant) and isinstance(c.value, str)
            ]
            found += [f"{where}:{node.lineno}: {v!r}" for v in literals if v.lower() in names]
    assert found == []


def test_a_command_loads_only_its_own_databases_dialect(tmp_path):
    """Each dialect is declared at import (its URL form) and loaded at its first use:
    `mq enqueue` on SQLite runs without another module of MariaDB's or PostgreSQL's,
    and `mq check` on a MariaDB URL it cannot reach without SQLite's or PostgreSQL's."""
    import os
    import subprocess
    import sys

    script = (
        "import sys\n"
        "from click.testing import CliRunner\n"
        "from mq_cli.cli.main import cli\n"
        "result = CliRunner().invoke(cli, sys.argv[1:])\n"
        "loaded = sorted({m.split('.')[2] for m in sys.modules  # beyond its URL form\n"
        "                 if m.startswith('mq_cli.backends.') and m.count('.') == 3\n"
        "                 and not m.endswith('.url')})\n"
        "print(result.exit_code, ' '.join(loaded))\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("MQ_")}
    env.update(XDG_DATA_HOME=str(tmp_path / "data"), XDG_CONFIG_HOME=str(tmp_path / "config"))

    def loaded(*args: str) -> str:
        done = subprocess.run(
            [sys.executable, "-c", script, *args],
            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        return done.stdout.strip()

    assert loaded("enqueue", "-q", "jobs", '{"n": 1}') == "0 sqlite"
    unreachable = "mysql://mq@127.0.0.1:1/none?connect_timeout=1"
    code, dialects = loaded("--database", unreachable, "check").split(" ", 1)
    assert code != "0" and dialects == "mysql"
