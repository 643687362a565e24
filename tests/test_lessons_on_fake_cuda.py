"""The lessons on a (fake) CUDA device: each lesson notebook runs top to bottom (CI sizes) in a
kernel whose first cell starts the fake CUDA harness (tests/fake_cuda.py), so
`minillm.pick_device("auto")` is cuda, every tensor a lesson puts there computes on the CPU, and
a cell that mixes a cuda tensor with a CPU one (or hands a cuda tensor to NumPy or matplotlib)
fails as it would on a GPU.

The model-heavy lessons run here; the others are listed in NOT_RUN with the reason. Each group
below is one pytest-xdist scope (`make test` runs `--dist loadscope`), so the two groups share
the two workers."""

import os
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[1]
LESSONS = sorted(p.stem for p in (ROOT / "notebooks").glob("[0-9][0-9]*_*.ipynb"))

GROUPS = {
    "decoding": ["00_welcome", "02_forward_pass", "03_kv_cache", "03b_long_context",
                 "04_decoding"],
    "serving": ["05_metrics", "05b_fast_engine", "06_batching", "08_speculative"],
}
NOT_RUN = {
    "01_tokenization": "no model on a device: the tokenizer chapter runs on the CPU by design",
    "07_quantization": "time: the test budget holds the seven model-heavy chapters",
    "09_scaling_out": "time; and its tensor-parallel runs are separate CPU processes (gloo), "
                      "which a harness inside the kernel cannot enter",
    "10_interview_qa": "time: the test budget holds the seven model-heavy chapters",
}
# Run, but the model stays on the CPU there by design (the lesson says why: it opens the model up
# tensor by tensor against transformers'): only the absence of device errors is checked.
ON_CPU = {"02_forward_pass"}

START = f"""import sys
sys.path.insert(0, {str(ROOT / "tests")!r})
import fake_cuda
fake_cuda.FakeCuda().start()"""
REPORT = """import minillm
print(minillm.pick_device("auto"), fake_cuda.cuda_ops())"""


def test_every_lesson_is_run_or_says_why_not():
    run = [name for names in GROUPS.values() for name in names]
    assert sorted(run + list(NOT_RUN)) == LESSONS
    assert ON_CPU <= set(run)


def run_on_fake_cuda(path: Path, monkeypatch) -> tuple[str, int]:
    """Run the notebook at `path` with the harness started in its first cell; returns what
    `pick_device("auto")` gave in the kernel and how many operations ran on the fake device."""
    from nbclient import NotebookClient

    nb = nbformat.read(path, as_version=4)
    nb.cells.insert(0, nbformat.v4.new_code_cell(START))
    nb.cells.append(nbformat.v4.new_code_cell(REPORT))
    monkeypatch.setenv("CI", "1")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(
        [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]))
    NotebookClient(nb, timeout=900, kernel_name="python3",
                   resources={"metadata": {"path": str(path.parent)}}).execute()
    device, ops = nb.cells[-1].outputs[0]["text"].split()
    return device, int(ops)


def check_lesson(name: str, monkeypatch) -> None:
    device, ops = run_on_fake_cuda(ROOT / "notebooks" / f"{name}.ipynb", monkeypatch)
    assert device == "cuda", f"{name}: pick_device('auto') gave {device} under the harness"
    if name not in ON_CPU:
        assert ops > 0, f"{name} ran nothing on the cuda device"


@pytest.mark.parametrize("cell,error", [
    ("x = torch.ones(3, device=minillm.pick_device())\nx + torch.arange(3)",
     "Expected all tensors to be on the same device"),
    ("plt.plot(torch.ones(3, device='cuda'))", "can't convert cuda:0 device type tensor"),
], ids=["mixed-devices", "plot-a-cuda-tensor"])
def test_a_lesson_cell_that_would_fail_on_a_gpu_fails_here(tmp_path, monkeypatch, cell, error):
    from nbclient.exceptions import CellExecutionError

    nb = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_code_cell("import matplotlib.pyplot as plt\nimport torch\nimport minillm"),
        nbformat.v4.new_code_cell(cell)])
    nbformat.write(nb, tmp_path / "lesson.ipynb")
    with pytest.raises(CellExecutionError, match=error):
        run_on_fake_cuda(tmp_path / "lesson.ipynb", monkeypatch)


@pytest.mark.slow
class TestDecodingLessons:
    @pytest.mark.parametrize("name", GROUPS["decoding"])
    def test_lesson_runs_on_cuda(self, name, monkeypatch):
        check_lesson(name, monkeypatch)


@pytest.mark.slow
class TestServingLessons:
    @pytest.mark.parametrize("name", GROUPS["serving"])
    def test_lesson_runs_on_cuda(self, name, monkeypatch):
        check_lesson(name, monkeypatch)
