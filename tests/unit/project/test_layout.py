"""The tests mirror the package: a unit test file is named after what it tests and sits under
that package's folder (``tests/unit/service/test_pipeline.py`` tests
``stream_rater/service/pipeline.py``); project-wide checks (gates, docs, deploy files) live in
``tests/unit/project/``. Test code is a package, so shared code is imported by its full name
(``from tests.helpers import duel``), never through the folder pytest puts on ``sys.path``."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
TESTS = ROOT / "tests"
UNIT = TESTS / "unit"
PACKAGE = ROOT / "stream_rater"
#: Unit test folders that mirror no package: checks of the project as a whole, and the
#: processor's golden outputs and instruction budget (issue #46: processor, rating and store).
NOT_MIRRORED = {"project", "perf"}
#: Unit test files of several modules with no clean seam between them, and why.
SPANNING = {
    "rating/test_elo_family.py": "Elo, duelling Elo, Plackett-Luce, Thurstonian: the Elo family's common properties",
}
#: A shared module of the test tree imported by its bare name, the way pytest's sys.path allows.
BARE_IMPORT = re.compile(
    r"^\s*(?:from|import)\s+(?:helpers|e2e_support|streams|openapi_hooks|conftest|test_\w+)\b", re.M
)
#: An import from another test module: what tests share belongs in a module of its own.
TEST_MODULE_IMPORT = re.compile(r"^\s*(?:from|import)\s+tests(?:\.\w+)*\.test_\w+", re.M)


def named_after(test_file: Path) -> list[Path]:
    """What `test_file` (tests/unit/<pkg>/test_<name>.py) may be named after: the module
    <name>.py, its private form _<name>.py, the package <name>/ or a resource folder <name>/."""
    folder = PACKAGE / test_file.parent.relative_to(UNIT)
    name = test_file.stem.removeprefix("test_")
    return [folder / f"{name}.py", folder / f"_{name}.py", folder / name]


def unit_test_files() -> list[Path]:
    return sorted(
        path
        for path in UNIT.rglob("test_*.py")
        if path.relative_to(UNIT).parts[0] not in NOT_MIRRORED
        and path.parent.name != "golden"
        and path.relative_to(UNIT).as_posix() not in SPANNING
    )


def test_every_unit_test_file_is_named_after_a_module_of_the_package_it_sits_under():
    assert unit_test_files()
    strays = [
        str(path.relative_to(ROOT))
        for path in unit_test_files()
        if not any(p.exists() for p in named_after(path))
    ]
    assert not strays, f"name each after the module it tests, under its package's folder: {strays}"


def test_the_files_spanning_several_modules_exist():
    """An entry outlives its file only by mistake (a split file must leave the list)."""
    assert [name for name in SPANNING if not (UNIT / name).exists()] == []


def test_every_test_folder_is_a_package():
    """So two test files of the same name in different folders are different modules."""
    folders = {path.parent for path in TESTS.rglob("*.py") if path.parent.name != "golden"}
    assert not [str(f.relative_to(ROOT)) for f in sorted(folders) if not (f / "__init__.py").exists()]


def test_the_tests_package_is_this_trees():
    """Not a top-level `tests` an installed distribution ships (glicko2's does)."""
    import tests

    assert Path(tests.__file__).resolve() == TESTS / "__init__.py"


def test_shared_test_code_is_imported_by_its_full_name():
    bare = [
        f"{path.relative_to(ROOT)}: {match.group(0).strip()}"
        for path in sorted(TESTS.rglob("*.py"))
        for match in BARE_IMPORT.finditer(path.read_text())
    ]
    assert not bare, f"import shared test code as `from tests.<module> import ...`: {bare}"


def test_no_test_module_imports_another():
    shared = [
        f"{path.relative_to(ROOT)}: {match.group(0).strip()}"
        for path in sorted(TESTS.rglob("*.py"))
        for match in TEST_MODULE_IMPORT.finditer(path.read_text())
    ]
    assert not shared, f"move what test files share into a module that is not a test file: {shared}"
