"""The layers of docs/architecture.md, checked: the import-linter contract in
pyproject.toml (every import, inside functions and under TYPE_CHECKING too), and
the imports the graph cannot see (a module named in a string, as optional parts
are imported by ``extras.require``) held to the same order."""

from __future__ import annotations

import ast
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def layers() -> list[str]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    [contract] = config["contracts"]
    return list(contract["layers"])


def layer_of(module: str, order: list[str]) -> int | None:
    for index, layer in enumerate(order):
        if module == layer or module.startswith(layer + "."):
            return index
    return None


def test_the_import_graph_keeps_the_layers() -> None:
    """Run in a process of its own: import-linter sets up logging for its output,
    which would change what later tests in this process capture."""
    lint = Path(sys.executable).parent / "lint-imports"
    done = subprocess.run(
        [str(lint), "--config", str(ROOT / "pyproject.toml"), "--no-cache"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert done.returncode == 0, f"a layer imports one above it:\n{done.stdout[-3000:]}"


def named_modules(tree: ast.AST) -> list[str]:
    """Modules named as strings to an import function: ``require("actorbus.x", ...)``,
    ``importlib.import_module("actorbus.x")``."""
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call) or not node.args:
            continue
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
        first = node.args[0]
        value = first.value if isinstance(first, ast.Constant) else None
        if name in ("require", "import_module") and str(value).startswith("actorbus."):
            found.append(str(value))
    return found


def test_modules_imported_by_name_keep_the_layers_too() -> None:
    order = layers()
    wrong = []
    seen = 0
    for path in (ROOT / "actorbus").rglob("*.py"):
        module = ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
        importer = layer_of(module, order)
        for target in named_modules(ast.parse(path.read_text())):
            seen += 1
            imported = layer_of(target, order)
            if importer is not None and imported is not None and imported < importer:
                wrong.append(f"{module} names {target}, a layer above it")
    assert not wrong, "\n".join(wrong)
    assert seen, "no module is imported by name: this test looks for nothing"


def environment_reads(tree: ast.AST) -> list[int]:
    """Lines that read one environment variable: ``os.environ.get(...)``,
    ``os.environ[...]``, ``os.getenv(...)`` (handing the whole environment to a
    child process is not reading it)."""
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            target, attr = node.func.value, node.func.attr
            if attr == "getenv" and isinstance(target, ast.Name) and target.id == "os":
                lines.append(node.lineno)
            if attr == "get" and ast.unparse(target) == "os.environ":
                lines.append(node.lineno)
        if isinstance(node, ast.Subscript) and ast.unparse(node.value) == "os.environ":
            lines.append(node.lineno)
    return lines


def test_only_the_environment_module_reads_the_environment() -> None:
    """Every variable actorbus decides by is in ``actorbus/environment.py``, where the
    configuration page's list comes from."""
    package = ROOT / "actorbus"
    readers = {}
    for path in sorted(package.rglob("*.py")):
        found = environment_reads(ast.parse(path.read_text()))
        if found and path != package / "environment.py":
            readers[str(path.relative_to(ROOT))] = found
    assert readers == {}


def test_the_configuration_page_lists_every_variable() -> None:
    from actorbus.environment import VARIABLES

    page = (ROOT / "docs" / "configuration.md").read_text()
    missing = [v.name for v in VARIABLES if f"`{v.name}" not in page]
    assert missing == []
