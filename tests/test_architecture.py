"""The package's shape, pinned: no import cycles (a module never needs, even lazily, a module
that needs it), every architecture guard reads the registry, and a block's math is written
only in its family file and the fast path's fused decode step."""

import ast
import re
from collections import defaultdict
from pathlib import Path

import pytest

import minillm
from minillm.model import registry

PACKAGE = Path(minillm.__file__).parent
WINGS = ("minillm.course", "minillm.tools")


def package_files() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def test_the_package_holds_no_lesson_text():
    """The lessons' sources live in lessons/ at the top of the repository: the package a learner
    installs is code (the course's checkers and widgets included), not prose."""
    sources = [p for p in PACKAGE.rglob("*.py") if "# %% [markdown]" in p.read_text()]
    assert sources == [] and not list((PACKAGE / "course").glob("lessons/*.py"))


def _modules() -> dict[str, Path]:
    found = {}
    for path in package_files():
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = path
    return found


def import_graph() -> dict[str, set[str]]:
    """module -> the package modules it imports anywhere in its file (inside functions too).
    Importing a.b runs a's __init__ first, so an edge to a.b is also an edge to a (unless the
    importer lives inside a)."""
    modules, graph = _modules(), defaultdict(set)
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                base = package.split(".")[:len(package.split(".")) - node.level + 1] \
                    if node.level else []
                target = ".".join(base + ([node.module] if node.module else []))
                targets = {f"{target}.{a.name}" if f"{target}.{a.name}" in modules else target
                           for a in node.names}
            elif isinstance(node, ast.Import):
                targets = {a.name for a in node.names}
            else:
                continue
            for t in targets & set(modules):
                if t != name:
                    graph[name].add(t)
                parts = t.split(".")
                for i in range(1, len(parts)):
                    parent = ".".join(parts[:i])
                    if parent in modules and not name.startswith(parent + "."):
                        graph[name].add(parent)
    return graph


def cycles(graph) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index, low, stack, on, found, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in list(graph):
        if v not in index:
            visit(v)
    return found


def test_the_package_has_no_import_cycles():
    assert cycles(import_graph()) == []


def under(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def in_wing(module: str) -> bool:
    return any(under(module, w) for w in WINGS)


def test_the_engine_never_imports_the_course_or_tools_wings():
    """Only the command line's entry point (__main__) may reach into the tools wing."""
    reaches = {name: sorted(t for t in targets if in_wing(t))
               for name, targets in import_graph().items()
               if not in_wing(name) and name != "minillm.__main__"}
    assert {name: t for name, t in reaches.items() if t} == {}


def _reaches(source: str, target: str) -> list[str]:
    """The modules under `source` that import one under `target` (anywhere in their file)."""
    return sorted(f"{name} -> {t}" for name, targets in import_graph().items()
                  if under(name, source) for t in targets if under(t, target))


def test_the_tools_wing_never_imports_the_course_wing():
    """The wings do not lean on each other: the lessons may use the tools (a benchmark, the
    server), the tools never the course. What both need (the toy model, the sample texts) lives
    in the engine."""
    assert _reaches("minillm.tools", "minillm.course") == []


@pytest.mark.parametrize("foundation", ["minillm.layers", "minillm.model"])
def test_the_layers_and_models_never_import_generation(foundation):
    """The KV contract (layers/kv_contract.py) sits beneath the layers and models that call it;
    the caches that keep it are chapter 03's, upstairs."""
    assert _reaches(foundation, "minillm.generation") == []


def test_decoding_never_imports_generation():
    """Generation (the loop and its front door) uses decoding's pieces; decoding (chapter 04)
    is given what it needs of generation, such as beam search's cache, so the two make no loop."""
    assert _reaches("minillm.decoding", "minillm.generation") == []
    assert _reaches("minillm.generation", "minillm.decoding")  # the one direction


def test_the_wing_check_sees_an_import_of_a_wing():
    graph = import_graph()
    assert "minillm.tools.cli" in graph["minillm.__main__"]
    assert "minillm.course.checks._base" in graph["minillm.course.checks.ch03_kv_cache"]


def test_the_engine_package_keeps_at_most_eight_top_level_modules():
    """Entry points and the public API; each chapter's code lives in its folder."""
    top = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert len(top) <= 8, top


def test_the_cycle_finder_finds_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_module_chooses_by_architecture_name_outside_the_registry_and_the_families():
    allowed = {"model/registry.py", "model/config.py", "model/llama.py", "model/qwen3.py",
               "model/gpt2.py"}
    for path in package_files():
        rel = path.relative_to(PACKAGE).as_posix()
        if rel in allowed:
            continue
        text = path.read_text()
        for arch in registry.names():
            assert f'arch == "{arch}"' not in text and f"arch == '{arch}'" not in text, rel
            assert f'"{arch}")' not in text.replace(f'("{arch}")', ""), (rel, arch)


def test_the_block_math_is_written_in_two_places_for_llama_and_one_for_gpt2():
    """Only the family files define a block's forward, plus the fast path's one fused decode
    step (fast/decode.py); the parallel runners and the fast path's linear layers build on them.
    Code that applies a block's second norm computes a block; the chapter checkers' deliberately
    wrong variants (course/checks/) are teaching material, not runners."""
    applies_mlp_norm = re.compile(r"mlp_norm[(,]")
    checks = PACKAGE / "course" / "checks"
    blocks = sorted(p.relative_to(PACKAGE).as_posix() for p in package_files()
                    if p.parent != checks and applies_mlp_norm.search(p.read_text()))
    assert blocks == ["fast/decode.py", "model/gpt2.py", "model/llama.py"]


def test_every_guard_names_the_architectures_the_registry_allows():
    from minillm.distributed import shard_model
    from minillm.fast import optimize
    from minillm.model import GPT2Model, ModelConfig

    gpt2 = GPT2Model(ModelConfig(arch="gpt2", vocab_size=16, hidden_size=8, n_layers=1,
                                 n_heads=2, n_kv_heads=2, head_dim=4, intermediate_size=16,
                                 max_seq_len=16))
    with pytest.raises(ValueError, match="tensor parallelism .* runs llama, qwen2, qwen3, not "
                                         "'gpt2'"):
        shard_model(gpt2, 0, 1)
    assert registry.names("fast") == ["llama", "qwen2", "qwen3", "gpt2"]
    assert optimize(gpt2).weight_format == "fp32"
    with pytest.raises(ValueError, match="unsupported architecture 'mamba'; minillm runs llama, "
                                         "qwen2, qwen3, gpt2"):
        ModelConfig(arch="mamba", vocab_size=16, hidden_size=8, n_layers=1, n_heads=2,
                    n_kv_heads=2, head_dim=4, intermediate_size=16)


WING_PACKAGES = ["transformers", "accelerate", "tokenizers", "matplotlib", "ipywidgets",
                 "IPython", "nbformat", "nbclient", "fastapi", "uvicorn", "httpx",
                 "prometheus_client", "pydantic"]


def test_every_engine_module_imports_without_the_wings_dependencies():
    """`pip install minillm` gives the engine alone: no engine module needs a package that only
    the course or the server installs (tested by refusing those imports in a fresh process)."""
    import subprocess
    import sys

    engine = sorted(name for name in _modules() if not in_wing(name))
    code = (
        "import importlib, sys\n"
        f"BLOCKED = {WING_PACKAGES!r}\n"
        "class Refuse:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] in BLOCKED:\n"
        "            raise ImportError(f'{name} belongs to a wing, not the engine')\n"
        "sys.meta_path.insert(0, Refuse())\n"
        f"for module in {engine!r}:\n"
        "    importlib.import_module(module)\n"
        "import minillm.reference\n"
        "try:\n"
        "    minillm.reference.load_reference()\n"
        "except ImportError as error:\n"
        "    assert \"pip install 'minillm-course[course]'\" in str(error), error\n"
        "else:\n"
        "    raise AssertionError('load_reference ran without transformers')\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]


def _lines(files) -> int:
    return sum(len(p.read_text().splitlines()) for p in files)


def test_the_readme_states_the_wings_sizes_as_they_are():
    """The README's layout section gives each wing's size; they stay within 10% of the count."""
    readme = (PACKAGE.parent / "README.md").read_text()
    match = re.search(r"The engine is ([\d,]+) lines of Python in (\d+) files \(the course wing "
                      r"([\d,]+), the tools wing ([\d,]+)\)", readme)
    assert match, "the README's layout section no longer states the wings' sizes"
    engine = [p for p in package_files()
              if not in_wing(".".join(p.relative_to(PACKAGE.parent).with_suffix("").parts))]
    course = [p for p in package_files() if PACKAGE / "course" in p.parents]
    tools = [p for p in package_files() if PACKAGE / "tools" in p.parents]
    stated = [int(g.replace(",", "")) for g in match.groups()]
    counted = [_lines(engine), len(engine), _lines(course), _lines(tools)]
    for said, real in zip(stated, counted):
        assert abs(said - real) <= 0.1 * real, f"the README says {stated}, the tree has {counted}"
