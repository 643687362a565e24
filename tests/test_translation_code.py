"""The two editions run the same code: a Chinese notebook's code cells may differ from the English
ones only in string literals and comments, plus the one cell that switches the course to Chinese.
The strings the model or the tokenizer reads stay English (a prompt, a chat message), so that
token ids and the model's outputs are the same in both editions."""

import ast
import re
from pathlib import Path

import nbformat
import pytest
from script_modules import script

ROOT = Path(__file__).resolve().parents[1]
ZH_NOTEBOOKS = sorted(p for folder in ("notebooks", "exercises", "solutions")
                      for p in (ROOT / folder / "zh").glob("[0-9][0-9]*_*.ipynb"))
# Where a string literal is what the model or the tokenizer reads, it must stay as it is:
# the arguments of these calls, these keyword arguments, the values of chat messages' keys, and
# what is assigned to a name like these.
MODEL_READS = {"generate", "stream", "encode", "encode_batch", "tokenize", "apply_chat_template",
               "tokenizer", "chat_prompt", "complete", "answer", "next_token_logits"}
KEPT_KEYWORDS = {"prompt", "prompts", "messages", "text", "stop"}
KEPT_KEYS = {"role", "content"}
KEPT_NAMES = re.compile(r"prompt|message|system|question|corpus", re.I)


def _name(func) -> str:
    return func.id if isinstance(func, ast.Name) else getattr(func, "attr", "")


def model_reads(tree) -> set[int]:
    """The ids of the string nodes the model or the tokenizer reads."""
    kept = set()

    def keep(node):
        kept.update(id(n) for n in ast.walk(node) if isinstance(n, (ast.Constant, ast.JoinedStr)))

    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            if _name(node.func) in MODEL_READS:
                for arg in node.args:
                    keep(arg)
            for kw in node.keywords:
                if kw.arg in KEPT_KEYWORDS:
                    keep(kw.value)
        elif isinstance(node, ast.Dict):
            for key, value in zip(node.keys, node.values):
                if isinstance(key, ast.Constant) and key.value in KEPT_KEYS:
                    keep(key)
                    keep(value)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and KEPT_NAMES.search(t.id) for t in targets):
                if node.value is not None:
                    keep(node.value)
    return kept


class _Words(ast.NodeTransformer):
    """Every string literal becomes a placeholder: an f-string keeps its fields (their order
    may change with the sentence), a plain string keeps nothing. Strings in `kept` stay."""

    def __init__(self, kept: set[int]):
        self.kept = kept

    def visit_Constant(self, node):
        if isinstance(node.value, str) and id(node) not in self.kept:
            return ast.Constant("<words>")
        return node

    def visit_JoinedStr(self, node):
        if id(node) in self.kept:
            return node
        for v in node.values:  # a string inside a field (a table's heading) is words too
            if isinstance(v, ast.FormattedValue):
                v.value = self.visit(v.value)
        fields = sorted(ast.dump(v) for v in node.values if isinstance(v, ast.FormattedValue))
        return ast.Call(ast.Name("<f-string>"), [ast.Constant(f) for f in fields], [])


def statements(source: str, keep_model_reads: bool = True) -> list[str]:
    """The cell's top-level statements with the words taken out, one dump each."""
    tree = ast.parse(source)
    kept = model_reads(tree) if keep_model_reads else set()
    tree = _Words(kept).visit(tree)
    return [ast.dump(s) for s in tree.body]


def code_difference(english: str, chinese: str) -> str | None:
    """None when the two cells differ only in words; else what differs, in plain words."""
    ours, theirs = ast.parse(english).body, ast.parse(chinese).body
    plain_en, plain_zh = statements(english), statements(chinese)
    if plain_en == plain_zh:
        return None
    if statements(english, False) == statements(chinese, False):
        return ("a string the model or the tokenizer reads was changed: keep prompts and chat "
                "messages in English, with the Chinese meaning in a comment or in the prose")
    for i, (a, b) in enumerate(zip(plain_en, plain_zh)):
        if a != b:
            return (f"the statement at English line {ours[i].lineno}, Chinese line "
                    f"{theirs[i].lineno} differs beyond strings and comments:\n"
                    f"  {ast.unparse(ours[i]).splitlines()[0]}\n"
                    f"  {ast.unparse(theirs[i]).splitlines()[0]}")
    return f"the English cell has {len(ours)} statements, the Chinese one {len(theirs)}"


def english_twin(zh_notebook: Path) -> Path:
    return zh_notebook.parent.parent / zh_notebook.name


def code_problems(english_nb, zh_nb, name: str) -> list[str]:
    builder = script("notebook")
    zh_cells = list(zh_nb.cells)
    first_code = next((i for i, c in enumerate(zh_cells) if c.cell_type == "code"), None)
    if first_code is None or zh_cells[first_code].source != builder.LANGUAGE_CELL:
        return [f"{name}: the first code cell must be the language cell "
                f"(scripts/notebook.py LANGUAGE_CELL); rebuild with scripts/notebook.py --all"]
    del zh_cells[first_code]
    if [c.cell_type for c in english_nb.cells] != [c.cell_type for c in zh_cells]:
        return [f"{name}: its cells are not the English notebook's cells in the same order "
                "(python scripts/translate.py status)"]
    problems = []
    for i, (en, zh) in enumerate(zip(english_nb.cells, zh_cells)):
        if en.cell_type != "code":
            continue
        if en.get("metadata", {}).get("tags") != zh.get("metadata", {}).get("tags"):
            problems.append(f"{name} cell {i + 1}: its tags differ from the English cell's")
        difference = code_difference(en.source, zh.source)
        if difference:
            problems.append(f"{name}, the code cell translating English cell {i + 1}: "
                            f"{difference}")
    return problems


@pytest.mark.parametrize("notebook", ZH_NOTEBOOKS, ids=lambda p: f"{p.parent.parent.name}/{p.stem}")
def test_a_chinese_notebook_runs_the_english_code(notebook):
    english = english_twin(notebook)
    assert english.is_file(), f"{notebook.relative_to(ROOT)} has no English twin {english.name}"
    problems = code_problems(nbformat.read(english, as_version=4),
                             nbformat.read(notebook, as_version=4),
                             str(notebook.relative_to(ROOT)))
    assert not problems, "\n".join(problems)


def test_the_chinese_edition_exists_for_the_pilot_chapter():
    names = {p.relative_to(ROOT).as_posix() for p in ZH_NOTEBOOKS}
    assert {"notebooks/zh/00_welcome.ipynb", "exercises/zh/00_welcome.ipynb",
            "solutions/zh/00_welcome.ipynb"} <= names


# --- the rule itself, on small cells --------------------------------------------------------------

CELL = '''\
timings = {}
messages = [{"role": "user", "content": "What is the capital of France?"}]
n = len(ids)  # how many tokens
print(f"{n} tokens in {seconds:.2f} s", "...")
ax.set_title("One answer")
timings["prefill"] = stage.seconds
'''


@pytest.mark.parametrize("chinese", [
    CELL.replace("# how many tokens", "# 词元个数"),
    CELL.replace('f"{n} tokens in {seconds:.2f} s"', 'f"用时 {seconds:.2f} 秒，共 {n} 个词元"'),
    CELL.replace('"One answer"', '"一次回答"').replace('"prefill"', '"预填充"'),
    CELL.replace('"One answer"', '("一次" "回答")'),
])
def test_words_and_comments_may_differ(chinese):
    assert code_difference(CELL, chinese) is None


@pytest.mark.parametrize("chinese, words", [
    (CELL.replace("n = len(ids)", "n = len(ids) + 1"), "English line 3, Chinese line 3"),
    (CELL.replace("{seconds:.2f}", "{seconds:.1f}"), "English line 4"),
    (CELL.replace('f"{n} tokens in', 'f"{n + 1} tokens in'), "English line 4"),
    (CELL.replace("What is the capital of France?", "法国的首都是哪里？"),
     "the model or the tokenizer reads"),
    (CELL + "extra = 1\n", "the English cell has 6 statements, the Chinese one 7"),
])
def test_anything_else_that_differs_is_named(chinese, words):
    difference = code_difference(CELL, chinese)
    assert difference is not None and words in difference, difference


def test_a_string_inside_an_f_strings_field_is_words_but_its_format_is_code():
    english = "print(f\"{'model':<18} {'per token':>10}\")"
    assert code_difference(english, "print(f\"{'模型':<18} {'每个词元':>10}\")") is None
    assert code_difference(english, "print(f\"{'模型':<20} {'每个词元':>10}\")") is not None
    assert code_difference(english, "print(f\"{'模型'!r:<18} {'每个词元':>10}\")") is not None


def test_a_prompt_passed_to_the_model_stays_english():
    english = 'minillm.generate(model, tok, "The capital of France is", max_new_tokens=8)'
    assert "reads" in code_difference(english, english.replace("The capital of France is",
                                                               "法国的首都是"))
    prompt = 'prompt = "Once upon a time"\nprint("the prompt")'
    assert code_difference(prompt, prompt.replace("the prompt", "提示词")) is None
    assert "reads" in code_difference(prompt, prompt.replace("Once upon a time", "从前"))


def test_a_notebook_with_a_changed_cell_is_named(tmp_path):
    """A Chinese notebook whose code differs from the English fails, naming the cell."""
    builder = script("notebook")
    english = ROOT / "notebooks" / "00_welcome.ipynb"
    zh = nbformat.read(ROOT / "notebooks" / "zh" / "00_welcome.ipynb", as_version=4)
    en = nbformat.read(english, as_version=4)
    assert code_problems(en, zh, "zh/00") == []
    i = next(i for i, c in enumerate(zh.cells) if "max_new_tokens = 40" in c.source)
    zh.cells[i].source = zh.cells[i].source.replace("max_new_tokens = 40", "max_new_tokens = 20")
    problems = code_problems(en, zh, "zh/00")
    assert len(problems) == 1 and f"English cell {i}" in problems[0], problems
    assert "max_new_tokens = 40" in problems[0] and "max_new_tokens = 20" in problems[0]
    zh.cells[i].source = zh.cells[i].source.replace("max_new_tokens = 20", "max_new_tokens = 40")
    del zh.cells[next(i for i, c in enumerate(zh.cells) if c.source == builder.LANGUAGE_CELL)]
    assert "language cell" in code_problems(en, zh, "zh/00")[0]
