"""The package's layers (plasticlab/__init__.py's docstring): no module imports from a layer
above its own, and no modules import one another in a circle, so each layer can be read,
tested and replaced on top of the ones below. A module is in its top-level module's layer; there
are no exceptions (each fast path lives on the floor of the code it speeds up)."""

from __future__ import annotations

import ast
from pathlib import Path

import plasticlab

PACKAGE = Path(plasticlab.__file__).parent

LAYERS = [
    {"params", "rng", "philox", "device", "run_config", "checkpoint", "fisher", "fast", "loggers",
     "state", "registry"},
    {"data"},
    {"problems"},
    {"nets"},
    {"metrics", "regularizers", "rank_order", "foreach_penalty", "perturb", "optim"},
    {"methods", "measure"},
    {"step"},
    {"engine"},
    {"monitor", "dropin_field", "member_independence"},
    {"experiments"},
    {"report", "integrations"},
    {"cli", "demo", "__main__"},
]
LEVEL = {name: i for i, names in enumerate(LAYERS) for name in names}
"""A top-level module's layer."""


def _modules() -> dict[str, Path]:
    """Every module of the package by dotted name inside it (a package by its own name, the
    package's ``__init__`` as ``""``)."""
    out = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


MODULES = _modules()


def _resolve(name: str) -> str:
    """The module that ``name`` (a module, or a name inside one) lives in."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name


def imports(name: str) -> set[str]:
    """The modules of the package that module ``name`` imports (relative or absolute; ``from
    package import x`` is an import of submodule ``x`` where there is one, else of the
    package)."""
    path = MODULES[name]
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    package = [p for p in package if p]
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[:len(package) - node.level + 1]
                target = base + (node.module.split(".") if node.module else [])
            elif node.module and node.module.split(".")[0] == "plasticlab":
                target = node.module.split(".")[1:]
            else:
                continue
            for alias in node.names:
                out.add(_resolve(".".join(target + [alias.name])))
        elif isinstance(node, ast.Import):
            out.update(_resolve(".".join(a.name.split(".")[1:])) for a in node.names
                       if a.name.split(".")[0] == "plasticlab")
    out.discard(name)
    return out


def layer(name: str) -> int | None:
    """Module ``name``'s layer (its top-level module's); None for the package's ``__init__``."""
    return LEVEL[name.split(".")[0]] if name else None


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in graph:
        if v not in index:
            visit(v)
    return found


def test_every_top_level_module_has_a_layer():
    names = {p.stem if p.is_file() else p.name for p in PACKAGE.iterdir()
             if (p.suffix == ".py" and p.stem != "__init__") or (p / "__init__.py").is_file()}
    assert names == set(LEVEL)


def test_no_module_imports_from_a_layer_above_its_own():
    upward = [f"{name} imports {other}" for name in MODULES if name
              for other in imports(name) if other and layer(other) > layer(name)]
    assert not upward, upward


def test_no_modules_import_one_another_in_a_circle():
    graph = {name: {m for m in imports(name) if m} for name in MODULES if name}
    assert circles(graph) == []


def test_the_rules_see_what_they_are_meant_to_see():
    # a submodule imported by name, a name imported from a package, an absolute import
    assert "problems.task_examples" in imports("problems.base")
    assert "fast" in imports("nets.linear_backward")
    assert "step.mlp_backprop" in imports("step.compiled")
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert circles({"a": {"b"}, "b": set()}) == []
