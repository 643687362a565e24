"""minillm.fast.huge_pages: a fast model's streamed weights copied into memory Linux is asked to
back with 2 MB pages. The copy must change nothing but where the bytes lie: the same logits,
a tied head still tied, every tensor on its own storage (sizes count as before), a deep copy and
a saved state as before; MINILLM_HUGE_PAGES=0 leaves the weights in place, and a system without
transparent huge pages says so once."""

import copy
import io
import sys

import pytest
import torch

from minillm.fast import huge_pages, optimize
from minillm.model.memory import bytes_per_token, weight_bytes
from test_fast import _tiny

linux_with_thp = pytest.mark.skipif(huge_pages.why_not() is not None,
                                    reason=f"no huge pages here: {huge_pages.why_not()}")


@pytest.fixture
def every_size(monkeypatch):
    """The tiny models' weights are far below SMALLEST: move them all."""
    monkeypatch.setattr(huge_pages, "SMALLEST", 1)


def _advised(address: int) -> bool:
    """Whether the mapping holding `address` carries madvise's huge-page flag ("hg")."""
    with open("/proc/self/smaps") as f:
        inside = False
        for line in f:
            head = line.split()[0]
            if "-" in head and ":" not in head:
                start, end = (int(a, 16) for a in head.split("-"))
                inside = start <= address < end
            elif inside and line.startswith("VmFlags:"):
                return "hg" in line.split()[1:]
    return False


@linux_with_thp
@pytest.mark.parametrize("weights", ["fp32", "int8"])
def test_moved_weights_give_the_same_logits_and_keep_their_shapes_of_sharing(
        weights, every_size, monkeypatch):
    model = _tiny()
    monkeypatch.setenv(huge_pages.SWITCH, "0")
    before = optimize(model, weights)
    monkeypatch.delenv(huge_pages.SWITCH)
    after = optimize(model, weights)
    assert before.huge_page_bytes == 0 and after.huge_page_bytes > 0
    ids = torch.tensor([[3, 7, 79, 0, 12]])
    assert torch.equal(after(ids), before(ids))
    assert weight_bytes(after) == weight_bytes(before)
    assert bytes_per_token(after) == bytes_per_token(before)
    if weights == "fp32":  # the tied table is the head's weight, on one storage, moved
        table, head = after.embed.weight, after.lm_head.weight
        assert table.untyped_storage().data_ptr() == head.untyped_storage().data_ptr()
        assert _advised(head.data_ptr())
    block = after.layers[0]
    for layer in (block.attn.qkv_proj, block.mlp.gate_up_proj, block.mlp.down_proj):
        assert all(_advised(t.data_ptr()) for t in layer._operands if t is not None)
    storages = {p.untyped_storage().data_ptr() for p in after.parameters()}
    assert len(storages) == len({p.untyped_storage().data_ptr() for p in before.parameters()})
    twin = copy.deepcopy(after)
    assert torch.equal(twin(ids), before(ids))
    saved = io.BytesIO()
    torch.save(after.state_dict(), saved)
    state = torch.load(io.BytesIO(saved.getvalue()))
    assert all(torch.equal(state[k], v) for k, v in before.state_dict().items())


def test_the_switch_leaves_the_weights_in_place(every_size, monkeypatch):
    monkeypatch.setenv(huge_pages.SWITCH, "0")
    assert not huge_pages.switched_on()
    assert huge_pages.describe() == "4 KB pages (MINILLM_HUGE_PAGES=0)"
    assert optimize(_tiny(), "int8").huge_page_bytes == 0


def test_a_system_without_huge_pages_says_so_once(every_size, monkeypatch, tmp_path, capsys):
    setting = tmp_path / "enabled"
    setting.write_text("always madvise [never]\n")
    monkeypatch.setattr(huge_pages, "SETTING", setting)
    monkeypatch.setattr(huge_pages, "_SAID", [])
    monkeypatch.setattr(sys, "platform", "linux")
    assert "never" in huge_pages.why_not() and huge_pages.describe().startswith("4 KB pages")
    fast = optimize(_tiny(), "int8")
    assert fast.huge_page_bytes == 0
    assert huge_pages.to_huge_pages(fast) == 0
    err = capsys.readouterr().err
    assert err.count("4 KB pages") == 1 and "says never" in err


@linux_with_thp
def test_a_region_the_system_refuses_leaves_the_weights_in_place_and_says_so_once(
        every_size, monkeypatch, capsys):
    def refuse(*args, **kwargs):
        raise OSError(12, "Cannot allocate memory")

    model = _tiny()
    monkeypatch.setenv(huge_pages.SWITCH, "0")
    in_place = optimize(model, "int8")
    monkeypatch.delenv(huge_pages.SWITCH)
    monkeypatch.setattr(huge_pages, "_SAID", [])
    monkeypatch.setattr(huge_pages.mmap, "mmap", refuse)
    fast = optimize(model, "int8")
    assert fast.huge_page_bytes == 0
    assert huge_pages.to_huge_pages(fast) == 0
    ids = torch.tensor([[3, 7, 79, 0, 12]])
    assert torch.equal(fast(ids), in_place(ids))
    err = capsys.readouterr().err
    assert err.count("4 KB pages") == 1 and "Cannot allocate memory" in err


def test_bench_step_says_where_the_weights_lie(monkeypatch):
    from minillm.tools.bench.step import huge_pages_of

    model = _tiny()
    model.huge_page_bytes = 134_676_480
    assert huge_pages_of(model) == "135 MB asked for 2 MB pages"
    model.huge_page_bytes = 0
    monkeypatch.setenv(huge_pages.SWITCH, "0")
    assert huge_pages_of(model) == "4 KB pages (MINILLM_HUGE_PAGES=0)"
