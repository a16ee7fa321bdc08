"""Test modules stand alone: no file under tests/ imports a `test_*` module or a conftest.py.
Shared fixtures live in conftest.py files (or the fixture plugins tests/conftest.py loads) and
shared helpers in tests/helpers/. A test module that imports another runs that module's import
side effects, turns its fixtures into new ones per importer and, where it imports a test
function, makes pytest run that test twice."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TESTS = ROOT / "tests"


def module_name(path: Path, root: Path) -> list[str]:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return parts[:-1] if parts[-1] == "__init__" else parts


def is_module(name: str, root: Path) -> bool:
    where = root.joinpath(*name.split("."))
    return where.with_suffix(".py").is_file() or (where / "__init__.py").is_file()


def is_test_module(name: str) -> bool:
    last = name.rsplit(".", 1)[-1]
    return last.startswith("test_") or last == "conftest"


def imported_test_modules(path: Path, root: Path) -> list[str]:
    """`line: module` for each test module or conftest the file at `path` imports: `import x`,
    `from x import y` (y a name in x, or a module x.y), relative imports, importlib.import_module
    and __import__ of a literal name, and the names in pytest_plugins."""
    tree = ast.parse(path.read_text(), filename=str(path))
    package = module_name(path, root)
    if path.name != "__init__.py":
        package = package[:-1]
    found: list[str] = []
    for node in ast.walk(tree):
        modules: list[str] = []
        if isinstance(node, ast.Import):
            modules = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[:len(package) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            modules = [module] + [f"{module}.{alias.name}" for alias in node.names
                                  if is_module(f"{module}.{alias.name}", root)]
        elif isinstance(node, ast.Call) and (ast.unparse(node.func).rsplit(".", 1)[-1] in {"import_module", "__import__"}):
            modules = [arg.value for arg in node.args[:1] if isinstance(arg, ast.Constant) and isinstance(arg.value, str)]
        elif isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "pytest_plugins" for t in node.targets):
            modules = [n.value for n in ast.walk(node.value) if isinstance(n, ast.Constant) and isinstance(n.value, str)]
        for module in modules:
            if (module.split(".")[0] == "tests" or module == "conftest") and is_test_module(module):
                found.append(f"{path.relative_to(root)}:{node.lineno}: {module}")
    return found


def test_no_file_under_tests_imports_a_test_module_or_a_conftest() -> None:
    found = [hit for path in sorted(TESTS.rglob("*.py")) for hit in imported_test_modules(path, ROOT)]
    assert found == [], "move what these share into tests/helpers/ (fixtures: a conftest.py):\n" + "\n".join(found)


@pytest.mark.parametrize(("source", "found"), [
    ("from tests.a.test_b import helper\n", ["tests.a.test_b"]),
    ("import tests.a.test_b\n", ["tests.a.test_b"]),
    ("from tests.a.conftest import Helper\n", ["tests.a.conftest"]),
    ("from tests.a import test_b\n", ["tests.a.test_b"]),
    ("from .test_b import helper\n", ["tests.a.test_b"]),
    ("from . import conftest\n", ["tests.a.conftest"]),
    ("def f():\n    from tests.a.test_b import helper\n", ["tests.a.test_b"]),
    ("import importlib\nimportlib.import_module('tests.a.test_b')\n", ["tests.a.test_b"]),
    ("pytest_plugins = ['tests.a.conftest']\n", ["tests.a.conftest"]),
    ("from tests.helpers.b import helper\nfrom tests.a import helpers\nimport pytest\n", []),
], ids=["from-a-test-module", "import-a-test-module", "from-a-conftest", "a-test-module-from-its-package", "relative",
        "relative-conftest", "inside-a-function", "importlib", "pytest_plugins", "helpers-are-fine"])
def test_the_check_sees_every_way_to_import_a_test_module(tmp_path: Path, source: str, found: list[str]) -> None:
    package = tmp_path / "tests" / "a"
    package.mkdir(parents=True)
    for name in ("__init__.py", "test_b.py", "conftest.py", "helpers.py", "test_c.py"):
        (package / name).write_text("")
    (tmp_path / "tests" / "__init__.py").write_text("")
    (package / "test_c.py").write_text(source)
    assert [hit.split(": ", 1)[1] for hit in imported_test_modules(package / "test_c.py", tmp_path)] == found
