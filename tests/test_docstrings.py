"""The package's public API is documented: every public module-level function and class under
``src/plasticlab`` has a docstring (what it computes, in the paper's notation where there is one)."""

import ast
from pathlib import Path

import plasticlab

PACKAGE = Path(plasticlab.__file__).parent


def undocumented(source: str) -> list[str]:
    """The public module-level functions and classes of ``source`` without a docstring."""
    return [node.name for node in ast.parse(source).body
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
            and not node.name.startswith("_") and ast.get_docstring(node) is None]


def test_every_public_function_and_class_of_the_package_has_a_docstring():
    missing = [f"{path.relative_to(PACKAGE)}: {name}" for path in sorted(PACKAGE.rglob("*.py"))
               for name in undocumented(path.read_text())]
    assert not missing, "public functions and classes without a docstring:\n" + "\n".join(missing)


def test_an_undocumented_public_function_is_found_and_private_ones_are_not():
    source = ('def documented():\n    """Doc."""\n\ndef bare():\n    pass\n\n'
              'def _private():\n    pass\n\nclass Bare:\n    x = 1\n')
    assert undocumented(source) == ["bare", "Bare"]


def test_the_top_level_namespace_holds_the_public_api_and_the_subpackages_alone():
    # `plasticlab.version` once was importlib's function, imported to read the version
    import types

    public = {name for name in vars(plasticlab) if not name.startswith("_")}
    modules = {name for name in public if isinstance(getattr(plasticlab, name), types.ModuleType)}
    assert public - modules == set(plasticlab.__all__) - {"__version__"}
    assert all(getattr(plasticlab, name).__name__ == f"plasticlab.{name}" for name in modules)
