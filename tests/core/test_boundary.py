"""The layers: the concepts in ``sharding_lab/`` and the class server (``sharding_lab/server/``) import without
Streamlit or Plotly installed; the server never imports the app's pages or helpers."""

import pkgutil
import subprocess
import sys
from pathlib import Path

import sharding_lab
from tests.support import ROOT


def core_modules() -> list[str]:
    names = []
    for info in pkgutil.walk_packages(sharding_lab.__path__, "sharding_lab."):
        if not info.name.startswith("sharding_lab.app") and not info.name.endswith("__main__"):
            names.append(info.name)
    return names


def test_core_modules_import_without_streamlit_or_plotly():
    modules = core_modules()
    assert "sharding_lab.training.trainer" in modules and "sharding_lab.distributed.worker" in modules
    assert "sharding_lab.server.jobs" in modules and "sharding_lab.server.warm_child" in modules
    # A finder that refuses streamlit and plotly, as on a machine without them.
    program = (
        "import sys, importlib\n"
        "class Refuse:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] in ('streamlit', 'plotly'):\n"
        "            raise ImportError(f'{name} is not available here')\n"
        "sys.meta_path.insert(0, Refuse())\n"
        f"for name in {modules!r}:\n"
        "    importlib.import_module(name)\n"
        "print('ok', len(sys.modules))\n"
    )
    done = subprocess.run([sys.executable, "-c", program], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.startswith("ok")


def test_the_app_layer_does_need_streamlit():
    """The refusing finder really bites: the app layer fails without Streamlit (so the test above
    would catch a core module that imported it)."""
    program = (
        "import sys\n"
        "class Refuse:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] in ('streamlit', 'plotly'):\n"
        "            raise ImportError(name)\n"
        "sys.meta_path.insert(0, Refuse())\n"
        "import sharding_lab.app.ui\n"
    )
    done = subprocess.run([sys.executable, "-c", program], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode != 0


def test_only_app_py_at_the_root():
    assert sorted(p.name for p in ROOT.glob("*.py")) == ["app.py"]


def _imports_of(path: Path, module: str) -> set[str]:
    """The sharding_lab modules ``module`` (file ``path``) imports, relative imports resolved."""
    import ast

    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            base = (
                ".".join(package[: len(package) - node.level + 1] + ([node.module] if node.module else []))
                if node.level
                else node.module or ""
            )
            found |= {base} | {f"{base}.{alias.name}" for alias in node.names}
        elif isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
    return {name for name in found if name.startswith("sharding_lab")}


def test_imports_run_one_way():
    """No module of sharding_lab/ imports one that (through others) imports it back — a package and its
    own submodules aside (an ``__init__`` re-exporting its children is not a cycle)."""
    files = {
        ".".join(p.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__"): p
        for p in (ROOT / "sharding_lab").rglob("*.py")
    }

    def related(a, b):
        return a == b or a.startswith(b + ".") or b.startswith(a + ".")

    graph = {m: {d for d in _imports_of(p, m) if d in files and not related(m, d)} for m, p in files.items()}
    cycles, done = [], set()

    def visit(module, stack):
        if module in stack:
            cycles.append(stack[stack.index(module) :] + [module])
            return
        if module in done:
            return
        for dep in sorted(graph[module]):
            visit(dep, stack + [module])
        done.add(module)

    for module in sorted(graph):
        visit(module, [])
    assert (
        "sharding_lab.training.options" in graph and "sharding_lab.training.options" in graph["sharding_lab.cli.main"]
    )
    assert not cycles, " ; ".join(" → ".join(c) for c in cycles[:3])


def test_packages_import_one_way():
    """The folders are layers: no subpackage of sharding_lab/ imports one that (through others) imports it
    back, so each folder can be read knowing only the ones below it."""
    files = {
        ".".join(p.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__"): p
        for p in (ROOT / "sharding_lab").rglob("*.py")
    }
    layer = {m: m.split(".")[1] for m in files if m.count(".") >= 1 and not m.endswith("__main__")}
    below: dict[str, set[str]] = {}
    for module, name in layer.items():
        deps = {layer[d] for d in _imports_of(files[module], module) if d in layer}
        below.setdefault(name, set()).update(deps - {name})

    def reaches(start, goal, seen=()):
        return any(
            dep == goal or (dep not in seen and reaches(dep, goal, (*seen, dep))) for dep in below.get(start, ())
        )

    assert "training" in below["cli"] and "hardware" in below["training"]
    upward = sorted((a, b) for a in below for b in below[a] if reaches(b, a))
    assert not upward, f"folders that import each other: {upward}"


def test_no_module_reaches_into_another_s_private_names():
    """A name that starts with ``_`` is its module's own business: another module that imports it, or reads
    ``module._name``, depends on what its author may change without notice."""
    import ast

    modules = {
        ".".join(p.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
        for p in (ROOT / "sharding_lab").rglob("*.py")
    }
    leaves = {m.rsplit(".", 1)[-1] for m in modules} | {"sl"}
    found = []
    for path in [*(ROOT / "sharding_lab").rglob("*.py"), ROOT / "app.py", *(ROOT / "app_pages").glob("*.py")]:
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").startswith("sharding_lab")):
                found += [
                    f"{path.name}: from {node.module} import {a.name}"
                    for a in node.names
                    if a.name.startswith("_") and not a.name.startswith("__")
                ]
            elif (
                isinstance(node, ast.Attribute)
                and node.attr.startswith("_")
                and not node.attr.startswith("__")
                and isinstance(node.value, (ast.Name, ast.Attribute))
            ):
                owner = node.value.id if isinstance(node.value, ast.Name) else node.value.attr
                if owner in leaves and owner != "self":
                    found.append(f"{path.name}: {owner}.{node.attr}")
    assert not found, found


def test_the_server_never_imports_the_app():
    """The class server is a layer below the app: the pages and :mod:`sharding_lab.app` call it, never the
    other way round (a server module that reached up into ``app/`` would bring Streamlit's world with it)."""
    server = ROOT / "sharding_lab" / "server"
    found = set()
    for path in server.glob("*.py"):
        module = "sharding_lab.server" + ("" if path.stem == "__init__" else f".{path.stem}")
        found |= {
            f"{path.name} imports {name}"
            for name in _imports_of(path, module)
            if name.split(".")[:2] == ["sharding_lab", "app"]
        }
    assert {p.stem for p in server.glob("*.py")} >= {"jobs", "slots", "warm", "record", "classroom"}
    assert not found, sorted(found)
    assert "sharding_lab.server" in _imports_of(ROOT / "app_pages" / "train.py", "app_pages.train")


def test_no_two_modules_share_a_file_name():
    """A file name says one thing: ``scheduler`` is the design search's queue (``search/scheduler.py``), the
    server's training slots are ``server/slots.py``; ``step`` the train step, the pipeline's ``pipelined_step``."""
    names = [p.stem for p in (ROOT / "sharding_lab").rglob("*.py") if p.stem not in ("__init__", "__main__")]
    shared = sorted({name for name in names if names.count(name) > 1})
    assert "scheduler" in names and "slots" in names
    assert not shared, f"modules of sharding_lab/ that share a file name: {shared}"


def _server_names_the_pages_use() -> dict[str, set[str]]:
    """{server module: the names app.py, app_pages/ and sharding_lab/app/ import from it or read off it}."""
    import ast
    from collections import defaultdict

    files = [ROOT / "app.py", *sorted((ROOT / "app_pages").glob("*.py"))]
    files += sorted((ROOT / "sharding_lab" / "app").rglob("*.py"))
    used: dict[str, set[str]] = defaultdict(set)
    for path in files:
        relative = path.relative_to(ROOT).with_suffix("")
        package = list(relative.parts[:-1])
        tree = ast.parse(path.read_text())
        modules = {}  # a local name → the server module it is
        for node in ast.walk(tree):
            if not isinstance(node, ast.ImportFrom):
                continue
            base = package[: len(package) - node.level + 1] if node.level else []
            module = ".".join(base + ([node.module] if node.module else []))
            if module == "sharding_lab.server":
                modules |= {alias.asname or alias.name: alias.name for alias in node.names}
            elif module.startswith("sharding_lab.server."):
                used[module.rsplit(".", 1)[1]] |= {alias.name for alias in node.names}
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in modules:
                used[modules[node.value.id]].add(node.attr)
    return used


def test_the_pages_use_only_the_server_s_declared_face():
    """The server's face towards the pages is one declared list (``sharding_lab.server.FOR_PAGES``): every name a
    page imports from it or reads off one of its modules is on it, every name on it exists and is used."""
    import importlib

    from sharding_lab.server import FOR_PAGES

    used = _server_names_the_pages_use()
    assert "slots" in used and "slot" in used["slots"]  # the scan sees the pages' real imports
    undeclared = {m: sorted(names - set(FOR_PAGES.get(m, ()))) for m, names in used.items()}
    assert not {m: n for m, n in undeclared.items() if n}, "declare these in sharding_lab.server.FOR_PAGES"
    unused = {m: sorted(set(names) - used.get(m, set())) for m, names in FOR_PAGES.items()}
    assert not {m: n for m, n in unused.items() if n}, "no page uses these any more: take them off FOR_PAGES"
    for module, names in FOR_PAGES.items():
        loaded = importlib.import_module(f"sharding_lab.server.{module}")
        assert all(hasattr(loaded, name) for name in names), module
