"""The lessons on a (fake) GPU, CUDA's and Apple's (MPS): each lesson's Chinese notebook runs top
to bottom (CI sizes) in a kernel whose first cell starts the fake device harness
(tests/fake_cuda.py: FakeCuda or FakeMps), so `minillm.pick_device("auto")` is cuda (or mps),
every tensor a lesson puts there computes on the CPU, and a cell that mixes a GPU tensor with a
CPU one (or hands one to NumPy or matplotlib, or, on mps, asks for float64) fails as it would
on that GPU.

Every lesson runs here on fake CUDA (NOT_RUN would name one that cannot, with the reason), and
on fake MPS the lighter half of them (MPS_EVERY_RUN), the rest with MINILLM_MPS_LESSONS=1. Each
group on each device is one class, one pytest-xdist scope (`make test` runs `--dist
loadscope`), so the groups share the two workers.

The Chinese edition runs here and the English one on the CPU, under nbval or, for a lesson with
widgets, in tests/test_browser.py (`make test` leaves notebooks/zh out of nbval): the two
editions' code is the same but for its strings, so each edition runs once, and the code of both
runs on the CPU, on fake CUDA and (half of it in every run) on fake MPS."""

import os
import sys
import warnings
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[1]
LESSONS = sorted(p.stem for p in (ROOT / "notebooks").glob("[0-9][0-9]*_*.ipynb"))

GROUPS = {
    "decoding": ["00_welcome", "02_forward_pass", "03_kv_cache", "03b_long_context",
                 "04_decoding"],
    "serving": ["05_metrics", "05b_fast_engine", "06_batching", "08_speculative"],
    "quantization": ["07_quantization", "07b_kv_quantization", "07c_fp8_fp4"],
    "interview": ["10_interview_qa", "10b_interview_engine", "10c_interview_serving",
                  "10d_interview_frontier"],
    "text and processes": ["01_tokenization", "09_scaling_out", "09b_mixture_of_experts"],
}
NOT_RUN = {
}
# Run, but the model stays on the CPU there by design (the lesson says why: it opens the model up
# tensor by tensor against transformers'): only the absence of device errors is checked.
# 01: the tokenizer chapter has no model; 09: its models run in processes of their own (gloo
# ranks, a server), outside the harness
ON_CPU = {"02_forward_pass", "01_tokenization", "09_scaling_out"}

HARNESSES = {"cuda": "FakeCuda", "mps": "FakeMps"}
START = """import sys
sys.path.insert(0, {tests!r})
import fake_cuda
fake_cuda.{harness}().start()"""
REPORT = """import minillm
print(minillm.pick_device("auto"), fake_cuda.cuda_ops())"""


def test_every_lesson_is_run_or_says_why_not():
    run = [name for names in GROUPS.values() for name in names]
    assert sorted(run + list(NOT_RUN)) == LESSONS
    assert ON_CPU <= set(run)
    untranslated = [name for name in LESSONS
                    if not (ROOT / "notebooks" / "zh" / f"{name}.ipynb").exists()]
    assert untranslated == [], "the fake-device runs use the Chinese edition of every lesson"


def stdout_of(cell) -> str:
    """Everything a cell printed: its stdout may arrive in several stream outputs (a busy
    machine flushes a print in pieces)."""
    return "".join(o.get("text", "") for o in cell.get("outputs", [])
                   if o.get("output_type") == "stream" and o.get("name") == "stdout")


# No cell of these lessons takes a minute at CI sizes, even without kernels on a busy machine
# (the longest, 04's first comparison, about 30 s); a cell past this has lost a message between
# nbclient and the kernel: seen three times in many whole runs, the kernel idle and nbclient
# still waiting for the cell's reply, which matches ipykernel 7's shell socket leaving a request
# unread (ipython/ipykernel issue 1554, open). Each wait costs the whole run this much.
CELL_TIMEOUT_S = 180


def run_on_fake_device(path: Path, monkeypatch, device: str = "cuda",
                       cell_timeout_s: float = CELL_TIMEOUT_S) -> tuple[str, int]:
    """Run the notebook at `path` with the harness for `device` ("cuda" or "mps") started in
    its first cell; returns what `pick_device("auto")` gave in the kernel and how many
    operations ran on the fake device. A cell that times out fails the run loudly after one
    more try of the whole notebook in a fresh kernel (with a warning saying so)."""
    from nbclient.exceptions import CellTimeoutError

    monkeypatch.setenv("CI", "1")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(
        [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]))
    try:
        nb = _execute_with_harness(path, device, cell_timeout_s)
    except CellTimeoutError as timeout:
        warnings.warn(f"{path.name} on fake {device}: a cell passed {cell_timeout_s:g} s "
                      f"({str(timeout).splitlines()[0]}); running it again in a fresh kernel")
        nb = _execute_with_harness(path, device, cell_timeout_s)
    picked, ops = stdout_of(nb.cells[-1]).split()
    return picked, int(ops)


def _execute_with_harness(path: Path, device: str, cell_timeout_s: float):
    from nbclient import NotebookClient

    nb = nbformat.read(path, as_version=4)
    start = START.format(tests=str(ROOT / "tests"), harness=HARNESSES[device])
    nb.cells.insert(0, nbformat.v4.new_code_cell(start))
    nb.cells.append(nbformat.v4.new_code_cell(REPORT))
    NotebookClient(nb, timeout=cell_timeout_s, kernel_name="python3",
                   resources={"metadata": {"path": str(path.parent)}}).execute()
    return nb


def check_lesson(name: str, monkeypatch, device: str) -> None:
    picked, ops = run_on_fake_device(ROOT / "notebooks" / "zh" / f"{name}.ipynb", monkeypatch,
                                     device)
    assert picked == device, f"{name}: pick_device('auto') gave {picked} under the harness"
    if name not in ON_CPU:
        assert ops > 0, f"{name} ran nothing on the {device} device"


def test_the_report_reads_every_piece_of_a_printed_line():
    cell = nbformat.v4.new_code_cell("print(...)")
    cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text="cuda"),
                    nbformat.v4.new_output("stream", name="stderr", text="a warning\n"),
                    nbformat.v4.new_output("stream", name="stdout", text=" 1234\n")]
    assert stdout_of(cell).split() == ["cuda", "1234"]


@pytest.mark.parametrize("device,cell,error", [
    ("cuda", "x = torch.ones(3, device=minillm.pick_device())\nx + torch.arange(3)",
     "Expected all tensors to be on the same device"),
    ("cuda", "plt.plot(torch.ones(3, device='cuda'))", "can't convert cuda:0 device type tensor"),
    ("mps", "torch.ones(3, device=minillm.pick_device()).double()",
     "MPS framework doesn't support float64"),
], ids=["mixed-devices", "plot-a-cuda-tensor", "float64-on-mps"])
def test_a_lesson_cell_that_would_fail_on_a_gpu_fails_here(tmp_path, monkeypatch, device, cell,
                                                           error):
    from nbclient.exceptions import CellExecutionError

    nb = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_code_cell("import matplotlib.pyplot as plt\nimport torch\nimport minillm"),
        nbformat.v4.new_code_cell(cell)])
    nbformat.write(nb, tmp_path / "lesson.ipynb")
    with pytest.raises(CellExecutionError, match=error):
        run_on_fake_device(tmp_path / "lesson.ipynb", monkeypatch, device)


@pytest.mark.slow
def test_a_cell_that_hangs_times_out_and_the_notebook_runs_again_in_a_fresh_kernel(
        tmp_path, monkeypatch):
    hung_once = tmp_path / "hung_once"
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(
        f"import pathlib, time\nmarker = pathlib.Path({str(hung_once)!r})\n"
        "if not marker.exists():\n    marker.touch()\n    time.sleep(3600)")])
    nbformat.write(nb, tmp_path / "lesson.ipynb")
    with pytest.warns(UserWarning, match="a cell passed 10 s .*running it again"):
        picked, _ = run_on_fake_device(tmp_path / "lesson.ipynb", monkeypatch, cell_timeout_s=10)
    assert picked == "cuda" and hung_once.exists()


def test_a_cell_that_times_out_twice_fails_the_run(tmp_path, monkeypatch):
    from nbclient.exceptions import CellTimeoutError

    tries = []

    def always_times_out(path, device, cell_timeout_s):
        tries.append(path)
        raise CellTimeoutError("A cell timed out while it was being executed, after 600 seconds.")

    monkeypatch.setattr(sys.modules[__name__], "_execute_with_harness", always_times_out)
    with pytest.warns(UserWarning, match="running it again"), pytest.raises(CellTimeoutError):
        run_on_fake_device(tmp_path / "lesson.ipynb", monkeypatch)
    assert len(tries) == 2


# On fake MPS `make test` runs the lighter half of the lessons, the ten quickest there (all of
# them would not fit its 30 minutes on 2 cores), both float8 lessons (07b, 07c) among them: MPS
# refuses float8 on an older torch. The rest run with MINILLM_MPS_LESSONS=1.
# tests/test_fake_cuda.py and tests/test_package_on_fake_cuda.py keep the package on fake MPS in
# every run.
MPS_EVERY_RUN = {"00_welcome", "01_tokenization", "02_forward_pass", "03_kv_cache",
                 "03b_long_context", "05b_fast_engine", "07b_kv_quantization", "07c_fp8_fp4",
                 "09b_mixture_of_experts", "10d_interview_frontier"}
ON_DEMAND = pytest.mark.skipif(not os.environ.get("MINILLM_MPS_LESSONS"),
                               reason="the heavier half of the lessons on fake MPS runs with "
                                      "MINILLM_MPS_LESSONS=1")


def on_mps(group: str) -> list:
    return [pytest.param(name, marks=() if name in MPS_EVERY_RUN else ON_DEMAND)
            for name in GROUPS[group]]


def test_the_lessons_on_mps_in_every_run_are_half_of_them():
    assert MPS_EVERY_RUN <= set(LESSONS)
    assert len(MPS_EVERY_RUN) == (len(LESSONS) + 1) // 2


def _lessons_class(group: str, device: str, names: list) -> type:
    """One group's lessons on one device, as a class: one pytest-xdist scope."""
    @pytest.mark.parametrize("name", names)
    def test(self, name, monkeypatch):
        check_lesson(name, monkeypatch, device)

    test.__name__ = f"test_lesson_runs_on_{device}"
    title = "Test" + group.title().replace(" ", "") + "Lessons" + ("OnMps" * (device == "mps"))
    return pytest.mark.slow(type(title, (), {test.__name__: test}))


for _group in GROUPS:
    for _cls in (_lessons_class(_group, "cuda", GROUPS[_group]),
                 _lessons_class(_group, "mps", on_mps(_group))):
        globals()[_cls.__name__] = _cls
