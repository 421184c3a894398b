"""The package's layers (plasticlab/__init__.py's docstring): no module imports from a layer
above its own, so each layer can be read, tested and replaced on top of the ones below."""

from __future__ import annotations

import ast
from pathlib import Path

import plasticlab

PACKAGE = Path(plasticlab.__file__).parent

LAYERS = [
    {"params", "rng", "device", "run_config", "checkpoint", "fisher"},
    {"data"},
    {"problems"},
    {"nets"},
    {"metrics", "regularizers", "perturb", "optim"},
    {"fast"},
    {"methods", "measure"},
    {"engine"},
    {"monitor", "dropin_field", "member_independence"},
    {"experiments"},
    {"report", "integrations"},
    {"cli", "cli_sweep", "cli_reproduce", "demo"},
]
LEVEL = {name: i for i, names in enumerate(LAYERS) for name in names}


def _imports(path: Path) -> set[str]:
    """The top-level plasticlab modules that ``path`` imports (relative or absolute)."""
    parts = path.relative_to(PACKAGE).with_suffix("").parts
    package = parts[:-1]  # the package the module lives in
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = list(package[:len(package) - node.level + 1])
                target = base + (node.module.split(".") if node.module else [])
                out.add(target[0] if target else node.names[0].name)
                if not target:  # from . import x (at the top level)
                    out.update(a.name for a in node.names)
            elif node.module and node.module.split(".")[0] == "plasticlab":
                out.add(node.module.split(".")[1] if "." in node.module else node.names[0].name)
        elif isinstance(node, ast.Import):
            out.update(a.name.split(".")[1] for a in node.names
                       if a.name.startswith("plasticlab.") and "." in a.name)
    return out


def test_every_top_level_module_has_a_layer():
    names = {p.stem if p.is_file() else p.name for p in PACKAGE.iterdir()
             if (p.suffix == ".py" and p.stem != "__init__") or (p / "__init__.py").is_file()}
    assert names == set(LEVEL)


def test_no_module_imports_from_a_layer_above_its_own():
    upward = []
    for path in PACKAGE.rglob("*.py"):
        top = path.relative_to(PACKAGE).parts[0].removesuffix(".py")
        if top == "__init__":
            continue
        for name in _imports(path):
            if name in LEVEL and LEVEL[name] > LEVEL[top]:
                upward.append(f"{path.relative_to(PACKAGE)} imports {name}")
    assert not upward, upward
