"""Chapter 06's pictures: the timeline (integer request numbers, a key for what appears) and the
block map, which keeps the engine it was built with."""

from types import SimpleNamespace

import matplotlib
import pytest

matplotlib.use("Agg")

from minillm.course.widgets.batching import (COLOURS, block_map_explorer, block_map_figure,  # noqa: E402
                                      plot_timeline, timeline_legend)
from minillm.course.widgets.render import new_figure  # noqa: E402

SNAPSHOT = {0: ([0, 1, 2], 40, 60), 3: ([3, 4], 20, 80), 5: ([5, 9], 20, 70)}


def _cells(fig):
    return [p for p in fig.axes[1].patches if (p.get_gid() or "").startswith("blockmap-block-")]


def test_block_map_draws_every_block_of_its_pool_and_a_key():
    fig = block_map_figure(SNAPSHOT, block_size=16, num_blocks=64, step=7)
    cells = _cells(fig)
    assert [c.get_gid() for c in cells] == [f"blockmap-block-{i}" for i in range(64)]
    owned = [c for c in cells if c.get_facecolor()[:3] != (1.0, 1.0, 1.0)]
    assert len(owned) == 7  # the blocks in the three tables
    by_id = {c.get_gid(): c for c in cells}
    assert by_id["blockmap-block-0"].get_alpha() == 1.0  # full
    assert by_id["blockmap-block-2"].get_alpha() == pytest.approx(0.5)  # 8 of 16 slots
    assert by_id["blockmap-block-9"].get_alpha() == 0.25  # 4 of 16: drawn at the palest
    left, right = fig.axes
    assert right.get_title() == "paged: 64 blocks of 16 (pale = part-filled)"
    key = [t.get_text() for t in right.get_legend().get_texts()]
    assert key == ["request 0", "request 3", "request 5", "free block"]
    assert [t.get_text() for t in left.get_yticklabels()] == key[:3]
    assert fig._suptitle.get_text() == ("step 7: 80 tokens stored; paged holds 112 slots "
                                        "(71% used), contiguous 210 (38% used)")


def test_block_map_explorer_keeps_the_engine_it_was_built_with():
    """The lesson builds later engines under the same name: the map must not follow them."""
    engine = SimpleNamespace(blocks=SimpleNamespace(block_size=16, num_blocks=64))
    snapshots = [SNAPSHOT, {0: ([0, 1, 2, 6], 50, 60)}, {}]
    box = block_map_explorer(engine, snapshots)
    assert box.slider.value == 1 and box.slider.max == 2
    engine.blocks = SimpleNamespace(block_size=16, num_blocks=128)  # "engine = new_engine(...)"
    snapshots.clear()
    box.slider.value = 0
    assert "paged: 64 blocks of 16" in box.chart.value and "step 0:" in box.chart.value
    assert box.chart.value.count('id="blockmap-block-') == 64
    assert len(_cells(box.figure)) == 64
    with pytest.raises(ValueError, match="snapshots is empty"):
        block_map_explorer(engine, [])


def test_no_request_is_drawn_in_a_grey_that_reads_as_reserved():
    """Grey means reserved (left) and white free (right): every request's colour has hue."""
    import colorsys

    fig = block_map_figure({rid: ([rid], 4, 16) for rid in range(20)}, 16, 32, 0)
    for cell in _cells(fig)[:20]:
        r, g, b = cell.get_facecolor()[:3]
        assert colorsys.rgb_to_hls(r, g, b)[2] > 0.3, f"{cell.get_gid()} is grey"


def test_a_step_with_no_request_running_says_so_instead_of_an_empty_chart():
    fig = block_map_figure({}, block_size=16, num_blocks=32, step=41)
    assert fig._suptitle.get_text() == "step 41: no request running; all 32 blocks are free"
    assert "no request running" in [t.get_text() for t in fig.axes[0].texts]
    assert len(_cells(fig)) == 32


def test_blocks_shared_by_samples_are_hatched_counted_once_and_keyed():
    """Copy-on-write: three samples of request 0 share the prompt's two full blocks; each has
    its own last block."""
    snapshot = {(0, 0): ([0, 1, 2], 36, 60), (0, 1): ([0, 1, 3], 36, 60),
                (0, 2): ([0, 1, 4], 36, 60)}
    fig = block_map_figure(snapshot, block_size=16, num_blocks=16, step=3)
    by_id = {c.get_gid(): c for c in _cells(fig)}
    assert by_id["blockmap-block-0"].get_hatch() and by_id["blockmap-block-1"].get_hatch()
    assert not by_id["blockmap-block-2"].get_hatch()
    assert [t.get_text() for t in fig.axes[1].texts] == ["×3", "×3"]
    key = [t.get_text() for t in fig.axes[1].get_legend().get_texts()]
    assert key == ["request 0 sample 0", "request 0 sample 1", "request 0 sample 2",
                   "shared (×k holders)", "free block"]
    assert fig._suptitle.get_text() == ("step 3: 108 tokens stored in 44 slots (shared blocks "
                                        "once); paged holds 80 slots (55% used), contiguous "
                                        "180 (60% used)")


def _step(start, end, *items):
    return SimpleNamespace(start=start, end=end, items=list(items))


def test_timeline_numbers_requests_with_integers_and_keys_only_what_appears():
    steps = [_step(10.0, 10.5, (0, 8, "prefill"), (1, 6, "prefill")),
             _step(10.5, 10.7, (0, 1, "decode"), (1, 1, "decode")),
             _step(10.7, 10.9, (0, 1, "decode"), (4, 9, "prefill"))]
    fig = new_figure(6, 3)
    ax = fig.subplots()
    kinds = plot_timeline(ax, steps, "continuous")
    assert kinds == {"prefill", "decode"}
    timeline_legend(ax, kinds)
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["prefill", "decode"]
    fig.canvas.draw()
    ticks = [t for t in ax.get_yticks() if -0.5 <= t <= 4.5]
    assert ticks and all(float(t).is_integer() for t in ticks)
    assert ax.get_ylim()[0] > ax.get_ylim()[1]  # request 0 on top
    first = min(ax.patches, key=lambda p: p.get_x())
    assert first.get_x() == 0.0 and first.get_width() == pytest.approx(0.5)
    assert first.get_facecolor()[:3] == matplotlib.colors.to_rgb(COLOURS["prefill"])


def test_recorded_block_maps_key_samples_and_skip_the_empty_last_step():
    from minillm.model.toy import tiny_model
    from minillm.course.widgets.batching import record_block_maps
    from minillm.engine import Engine

    engine = Engine(*tiny_model(), num_blocks=16, block_size=4)
    engine.add_request(list(range(10)), n=3, do_sample=True, seed=0, max_new_tokens=5,
                       ignore_eos=True)
    engine.add_request([1, 2], max_new_tokens=2, ignore_eos=True)
    maps = record_block_maps(engine)
    assert not engine.has_unfinished() and all(maps)
    assert set(maps[-1]) <= {(0, 0), (0, 1), (0, 2)}
    forked = next(m for m in maps if len([k for k in m if isinstance(k, tuple)]) == 3)
    tables = [forked[(0, i)][0] for i in range(3)]
    assert tables[0][:2] == tables[1][:2] == tables[2][:2]  # the prompt's two full blocks
    assert 1 in maps[0] and maps[0][1] == ([maps[0][1][0][0]], 2, 4)


def test_the_labels_come_in_chinese():
    """With the zh setting (the notebooks in zh/), the block map and the timeline speak Chinese."""
    import matplotlib.pyplot as plt

    from minillm.course import set_language
    from minillm.course.widgets.batching import block_map_figure, timeline_legend

    set_language("zh")
    try:
        empty = block_map_figure({}, 16, 32, 41)
        assert empty._suptitle.get_text() == "第 41 步：没有请求在运行；全部 32 个块都空闲"
        full = block_map_figure({0: ([0, 1], 20, 48), 1: ([0, 2], 18, 48)}, 16, 32, 3)
        title = full._suptitle.get_text()
        assert title.startswith("第 3 步：存了 38 个词元") and "分页占" in title, title
        labels = [t.get_text() for t in full.axes[1].get_legend().get_texts()]
        assert "请求 0" in labels and "空闲块" in labels and "共享（×k 个持有者）" in labels
        fig, ax = plt.subplots()
        timeline_legend(ax, {"prefill", "ghost"})
        assert [t.get_text() for t in ax.get_legend().get_texts()] == ["预填充", "幽灵"]
        plt.close("all")
    finally:
        set_language("en")
