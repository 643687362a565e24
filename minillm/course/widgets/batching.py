"""Chapter 06's pictures of an engine at work: the timeline of who ran in which forward pass, and
the block map, a slider over a recorded run that shows the KV memory two ways (a contiguous cache
reserving each request's longest length, the paged pool handing out blocks).

The block map keeps the block size, the pool size and the snapshots it was built with: a lesson
that later builds another engine under the same name does not change its picture.
"""

from __future__ import annotations

from ..language import say
from .readable import plural
from .render import chart_html, new_figure

__all__ = ["COLOURS", "plot_timeline", "timeline_legend", "block_map_figure",
           "block_map_explorer", "record_block_maps"]

# The kinds of row a forward pass runs (minillm.engine.StepRecord.items), in the timeline's colours.
COLOURS = {"prefill": "tab:orange", "decode": "tab:blue", "recompute": "tab:red",
           "ghost": "lightgrey"}
KIND_NAMES_ZH = {"prefill": "预填充", "decode": "解码", "recompute": "重算", "ghost": "幽灵"}
GRID_COLUMNS = 16  # blocks per row of the block map's grid


def plot_timeline(ax, steps, title: str) -> set[str]:
    """One row per request, one bar per forward pass it took part in, coloured by what the row
    did (`COLOURS`). Returns the kinds drawn, for `timeline_legend`."""
    from matplotlib.ticker import MaxNLocator

    t0 = steps[0].start
    kinds, requests = set(), set()
    for step in steps:
        for rid, _, kind in step.items:
            ax.barh(rid, step.end - step.start, left=step.start - t0, height=0.8,
                    color=COLOURS[kind], linewidth=0)
            kinds.add(kind)
            requests.add(rid)
    ax.set_title(title)
    ax.set_ylabel(say("request", "请求"))
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_ylim(max(requests) + 0.6, min(requests) - 0.6)  # request 0 on top
    return kinds


def timeline_legend(ax, kinds) -> None:
    """A key for the kinds that appear (in `COLOURS`' order), outside the axes on the right."""
    from matplotlib.patches import Patch

    handles = [Patch(color=c, label=say(k, KIND_NAMES_ZH[k])) for k, c in COLOURS.items()
               if k in kinds]
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8,
              frameon=False)


def _palette():
    """16 strong colours, none of them grey (grey means reserved, white free), so pale can
    mean part-filled: tab10 and Dark2 without their greys."""
    import matplotlib

    tab10, dark2 = matplotlib.colormaps["tab10"].colors, matplotlib.colormaps["Dark2"].colors
    return [c for i, c in enumerate(tab10) if i != 7] + [c for i, c in enumerate(dark2) if i != 7]


def _request_colour(key):
    """A request's colour; the samples of request r (keys (r, i)) take the colours after r's."""
    palette = _palette()
    index = key if isinstance(key, int) else sum(key)
    return palette[index % len(palette)]


def _label(key) -> str:
    if isinstance(key, int):
        return say("request {r}", "请求 {r}", r=key)
    return say("request {r} sample {i}", "请求 {r} 样本 {i}", r=key[0], i=key[1])


def block_map_figure(snapshot: dict, block_size: int, num_blocks: int, step: int):
    """The pool after one step. `snapshot` maps each running sequence to (block table, tokens in
    the cache, tokens a contiguous cache would reserve); a sequence is a request id, or
    (request id, sample index) for the n samples of one request. Left: the contiguous cache,
    one bar per sequence; right: the paged pool, one cell per block, coloured by its owner
    (pale: part-filled; hatched with "×k": shared by k sequences, copy-on-write), with a key."""
    from matplotlib.patches import Patch, Rectangle

    fig = new_figure(11, 3.6)
    left, right = fig.subplots(1, 2, width_ratios=[1, 1.15])
    rows = sorted(snapshot.items(), key=lambda kv: (kv[0],) if isinstance(kv[0], int) else kv[0])
    for row, (key, (_, used, reserved)) in enumerate(rows):
        left.barh(row, reserved, color="gainsboro")
        left.barh(row, used, color=_request_colour(key))
        left.text(reserved, row, f" {used}/{reserved}", va="center", fontsize=8)
    left.set_yticks(range(len(rows)), [_label(key) for key, _ in rows], fontsize=8)
    left.set_ylim(len(rows) - 0.5 if rows else 0.5, -0.5)
    left.set_xlabel(say("token slots", "词元槽"))
    left.set_title(say("contiguous: reserved (grey) vs used", "连续存储：预留（灰色）与已用"),
                   fontsize=10)
    left.margins(x=0.15)
    if not rows:
        left.text(0.5, 0.5, say("no request running", "没有请求在运行"), ha="center", va="center",
                  transform=left.transAxes, fontsize=10)

    owners, fill = {}, {}
    for key, (table, used, _) in rows:
        for k, block in enumerate(table):
            owners.setdefault(block, []).append(key)
            fill[block] = max(fill.get(block, 0.0),
                              min(block_size, max(used - k * block_size, 0)) / block_size)
    n_rows = -(-num_blocks // GRID_COLUMNS)
    for block in range(num_blocks):
        r, c = divmod(block, GRID_COLUMNS)
        holders = owners.get(block, [])
        if holders:
            colour, alpha = _request_colour(holders[0]), max(fill[block], 0.25)
        else:
            colour, alpha = "white", 1.0
        cell = Rectangle((c, r), 1, 1, facecolor=colour, alpha=alpha, edgecolor="none",
                         hatch="////" if len(holders) > 1 else None)
        cell.set_gid(f"blockmap-block-{block}")
        right.add_patch(cell)
        right.add_patch(Rectangle((c, r), 1, 1, fill=False, edgecolor="#bbb", linewidth=0.5))
        if len(holders) > 1:
            right.text(c + 0.5, r + 0.5, f"×{len(holders)}", ha="center", va="center",
                       fontsize=6, color="black")
    right.set_xlim(0, GRID_COLUMNS)
    right.set_ylim(n_rows, 0)
    right.set_aspect("equal")
    right.set_xticks([])
    right.set_yticks([r + 0.5 for r in range(n_rows)],
                     [f"{r * GRID_COLUMNS}" for r in range(n_rows)], fontsize=7)
    right.tick_params(axis="y", length=0)
    right.set_ylabel(say("first block of the row", "这一行的第一个块"), fontsize=8)
    right.set_title(say("paged: {n} blocks of {size} (pale = part-filled)",
                        "分页：{n} 个块，每块 {size} 个槽（浅色 = 未填满）", n=num_blocks,
                        size=block_size), fontsize=10).set_gid("blockmap-pool-title")
    key = [Patch(color=_request_colour(k), label=_label(k)) for k, _ in rows]
    if any(len(h) > 1 for h in owners.values()):
        key.append(Patch(facecolor="white", edgecolor="black", hatch="////",
                         label=say("shared (×k holders)", "共享（×k 个持有者）")))
    key.append(Patch(facecolor="white", edgecolor="#bbb", label=say("free block", "空闲块")))
    right.legend(handles=key, loc="upper left", bbox_to_anchor=(1.02, 1.0), fontsize=7,
                 frameon=False, ncols=2 if len(key) > 9 else 1)

    used = sum(u for _, u, _ in snapshot.values())
    stored = sum(round(fill[b] * block_size) for b in owners)  # a shared block counts once
    paged = len(owners) * block_size
    contiguous = sum(r for _, _, r in snapshot.values())
    if not rows:
        title = say("step {step}: no request running; all {n} blocks are free",
                    "第 {step} 步：没有请求在运行；全部 {n} 个块都空闲", step=step, n=num_blocks)
    else:
        shared = say(" in {stored} slots (shared blocks once)",
                     "，占 {stored} 个槽（共享的块只算一次）", stored=stored) if stored != used else ""
        title = say("step {step}: {tokens} stored{shared}; paged holds {paged} slots "
                    "({paged_use:.0%} used), contiguous {contiguous} ({contiguous_use:.0%} used)",
                    "第 {step} 步：存了 {used} 个词元{shared}；分页占 {paged} 个槽（已用 "
                    "{paged_use:.0%}），连续存储占 {contiguous} 个（已用 {contiguous_use:.0%}）",
                    step=step, tokens=plural(used, "token"), used=used, shared=shared,
                    paged=paged, paged_use=stored / max(paged, 1), contiguous=contiguous,
                    contiguous_use=used / max(contiguous, 1))
    fig.suptitle(title, fontsize=10).set_gid("blockmap-title")
    return fig


def record_block_maps(engine) -> list[dict]:
    """Step `engine` until every request has ended, keeping after each step a snapshot of the
    pool as `block_map_figure` takes it: each running sequence's block table, tokens in the
    cache and tokens a contiguous cache would reserve. A sequence is its request id, or
    (request id, sample index) for a request with n > 1 samples. Steps after which nothing runs
    (the last one) are left out."""
    snapshots = []
    while engine.has_unfinished():
        engine.step()
        snapshot = {(r.id, r.index) if r.n > 1 else r.id:
                    (list(r.block_table), r.num_computed, r.max_tokens)
                    for r in engine.scheduler.running}
        if snapshot:
            snapshots.append(snapshot)
    return snapshots


def block_map_explorer(engine, snapshots: list[dict], step: int | None = None):
    """A step slider over `snapshots` (one dict per engine step, as `block_map_figure` takes)
    recorded from `engine`. The engine's block size and pool size are read now, once. The box
    has `.slider`, `.draw()` and `.figure`."""
    import ipywidgets as w

    if not snapshots:
        raise ValueError("snapshots is empty: record at least one engine step")
    block_size, num_blocks = engine.blocks.block_size, engine.blocks.num_blocks
    snapshots = list(snapshots)
    slider = w.IntSlider(value=len(snapshots) // 2 if step is None else step, min=0,
                         max=len(snapshots) - 1, description=say("step", "步"),
                         continuous_update=False, layout=w.Layout(width="480px"))
    chart = w.HTML()
    box = w.VBox([slider, chart])

    def draw(change=None):
        box.figure = block_map_figure(snapshots[slider.value], block_size, num_blocks,
                                      slider.value)
        chart.value = chart_html(box.figure, "blockmap")

    slider.observe(draw, names="value")
    draw()
    box.draw, box.slider, box.chart = draw, slider, chart
    return box
