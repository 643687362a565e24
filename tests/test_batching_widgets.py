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
