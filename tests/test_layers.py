"""The package's layers (plasticlab/__init__.py's docstring): no module imports from a layer
above its own, so each layer can be read, tested and replaced on top of the ones below."""

from __future__ import annotations

import ast
from pathlib import Path

import plasticlab

PACKAGE = Path(plasticlab.__file__).parent

LAYERS = [
    # ``fast`` (its switch and the fast paths that read tensors alone) is called by nets and
    # problems, so it sits at the bottom; its modules that read higher layers sit above them
    {"params", "rng", "device", "run_config", "checkpoint", "fisher", "fast", "loggers"},
    {"data"},
    {"problems"},
    {"nets"},
    {"metrics", "regularizers", "perturb", "optim"},
    {"fast.folded_permutation"},
    {"methods", "measure"},
    {"step"},
    {"engine"},
    {"monitor", "dropin_field", "member_independence"},
    {"experiments"},
    {"report", "integrations"},
    {"cli", "demo"},
]
LEVEL = {name: i for i, names in enumerate(LAYERS) for name in names}
"""A top-level module's layer, or a submodule's (``package.module``) where it has its own."""


def _layer_name(parts: list[str] | tuple[str, ...]) -> str:
    """The name in :data:`LEVEL` of the module ``parts`` (inside plasticlab): its own
    ``package.module`` entry if it has one, else its top-level module's."""
    dotted = ".".join(parts[:2])
    return dotted if dotted in LEVEL else parts[0]


def _imports(path: Path) -> set[str]:
    """The plasticlab modules that ``path`` imports (relative or absolute), named as in
    :data:`LEVEL`."""
    parts = path.relative_to(PACKAGE).with_suffix("").parts
    package = parts[:-1]  # the package the module lives in
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = list(package[:len(package) - node.level + 1])
                target = base + (node.module.split(".") if node.module else [])
            elif node.module and node.module.split(".")[0] == "plasticlab":
                target = node.module.split(".")[1:]
            else:
                continue
            if target:  # from .fast import x: x may be a module with a layer of its own
                out.update(_layer_name(target + [a.name]) for a in node.names)
            else:  # from . import x (at the top level)
                out.update(a.name for a in node.names)
        elif isinstance(node, ast.Import):
            out.update(_layer_name(a.name.split(".")[1:]) for a in node.names
                       if a.name.startswith("plasticlab.") and "." in a.name)
    return out


def test_every_top_level_module_has_a_layer():
    names = {p.stem if p.is_file() else p.name for p in PACKAGE.iterdir()
             if (p.suffix == ".py" and p.stem != "__init__") or (p / "__init__.py").is_file()}
    assert names == {name for name in LEVEL if "." not in name}
    submodules = {name for name in LEVEL if "." in name}
    assert all((PACKAGE / name.replace(".", "/")).with_suffix(".py").is_file() for name in submodules)


def test_no_module_imports_from_a_layer_above_its_own():
    upward = []
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE).with_suffix("").parts
        if parts == ("__init__",):
            continue
        own = _layer_name(parts)
        for name in _imports(path):
            if name in LEVEL and LEVEL[name] > LEVEL[own]:
                upward.append(f"{path.relative_to(PACKAGE)} imports {name}")
    assert not upward, upward


def test_the_layer_rule_sees_imports_of_a_submodule_with_a_layer_of_its_own():
    # nets importing fast's tensor-only kernels is allowed; nets importing fast.folded_permutation is not
    assert "fast" in _imports(PACKAGE / "nets" / "layers.py")
    assert _layer_name(("fast", "folded_permutation")) == "fast.folded_permutation"
    assert _layer_name(("fast", "max_pool")) == "fast"
    assert "fast.folded_permutation" in _imports(PACKAGE / "measure.py")
