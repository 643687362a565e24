"""The paged KV cache: the block manager's books (allocate, share, free, prefix hashes) and
attention read through block tables, checked against the model run on whole sequences."""

import pytest
import torch

from minillm.engine import BlockManager, PagedBatch, PagedKVPool, paged_forward
from minillm.engine.block_manager import block_hash
from minillm.model.toy import tiny_model


pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def tiny():
    return tiny_model()[0]


# --- the block manager ------------------------------------------------------------------------------

def test_allocate_hands_out_distinct_blocks_and_free_returns_them():
    bm = BlockManager(4, block_size=2)
    ids = [bm.allocate() for _ in range(4)]
    assert sorted(ids) == [0, 1, 2, 3] and bm.num_free == 0
    with pytest.raises(RuntimeError, match="no free KV-cache block"):
        bm.allocate()
    bm.release(ids[1])
    assert bm.num_free == 1 and bm.allocate() == ids[1]
    bm.check()


def test_reference_counts_keep_a_shared_block_until_the_last_holder_lets_go():
    bm = BlockManager(2, block_size=2)
    b = bm.allocate()
    bm.share(b)
    assert bm.blocks[b].ref_count == 2
    bm.release(b)
    assert bm.num_free == 1  # still held once
    bm.release(b)
    assert bm.num_free == 2
    with pytest.raises(RuntimeError, match="freed twice"):
        bm.release(b)


def test_grow_allocates_only_when_the_last_block_is_full():
    bm = BlockManager(10, block_size=4)
    table = []
    bm.grow(table, 1)
    assert len(table) == 1
    bm.grow(table, 4)
    assert len(table) == 1  # 4 tokens still fit in one block of 4
    bm.grow(table, 5)
    assert len(table) == 2
    bm.free_table(table)
    assert table == [] and bm.num_free == 10


def test_prefix_hash_names_the_whole_prefix_not_just_the_block():
    a = block_hash(None, (1, 2))
    assert block_hash(a, (3, 4)) != block_hash(None, (3, 4))
    assert block_hash(a, (3, 4)) == block_hash(block_hash(None, (1, 2)), (3, 4))


def test_match_prefix_finds_full_blocks_and_leaves_one_token_to_compute():
    bm = BlockManager(8, block_size=2)
    table, parent = [], None
    bm.grow(table, 6)
    for k, tokens in enumerate([(1, 2), (3, 4), (5, 6)]):
        parent = bm.register(table[k], parent, tokens)
    assert bm.match_prefix([1, 2, 3, 4, 5, 6, 7]) == table
    assert bm.match_prefix([1, 2, 3, 4, 5, 6]) == table[:2]  # the last token is recomputed
    assert bm.match_prefix([1, 2, 9, 9, 5, 6, 7]) == table[:1]
    assert bm.match_prefix([9, 2, 3, 4, 5]) == []
    assert BlockManager(8, 2, enable_prefix_caching=False).match_prefix([1, 2, 3]) == []


def test_a_freed_cached_block_can_be_hit_until_it_is_handed_out_again():
    bm = BlockManager(2, block_size=2)
    table = []
    bm.grow(table, 2)
    bm.register(table[0], None, (7, 8))
    cached = table[0]
    bm.free_table(table)
    assert bm.match_prefix([7, 8, 9]) == [cached]
    bm.share(cached)  # a hit on a free block takes it off the free list
    assert bm.num_free == 1
    bm.release(cached)
    # the least recently freed block is handed out first; once both are reused, the entry is gone
    bm.allocate(), bm.allocate()
    assert bm.match_prefix([7, 8, 9]) == []


def test_bad_pool_sizes():
    with pytest.raises(ValueError, match="num_blocks must be a positive int"):
        BlockManager(0)
    with pytest.raises(ValueError, match="block_size must be a positive int"):
        BlockManager(4, block_size=0)


# --- attention through block tables ----------------------------------------------------------------

def _scattered_tables(bm, lengths):
    """Block tables whose blocks interleave between sequences (not contiguous in the pool)."""
    tables = [[] for _ in lengths]
    for step in range(max(lengths)):
        for t, n in zip(tables, lengths):
            if step < n:
                bm.grow(t, step + 1)
    return tables


def test_gather_reads_a_sequence_back_through_its_block_table(tiny):
    pool = PagedKVPool.for_model(tiny, num_blocks=12, block_size=4)
    bm = BlockManager(12, 4)
    tables = _scattered_tables(bm, [9, 6])
    k = torch.randn(1, tiny.config.n_kv_heads, 9, tiny.config.head_dim)
    batch = PagedBatch(pool, [tables[0]], [0], [9])
    got_k, _ = batch.append(0, k, k)
    assert torch.equal(got_k, k)
    assert torch.equal(pool.gather(0, tables[0], 9)[0], k[0])
    assert tables[0] != list(range(tables[0][0], tables[0][0] + 3))  # really scattered


@pytest.mark.parametrize("chunks", [[(7, 3, 12)], [(3, 1, 5), (4, 2, 7)], [(2, 2, 2), (5, 1, 10)]])
def test_paged_forward_equals_the_model_on_whole_sequences(tiny, chunks):
    """Sequences of different lengths, run in chunks (prefill pieces and one-token decodes
    mixed in one batch), give the same last-token logits as the model on each whole sequence."""
    torch.manual_seed(1)
    lengths = [sum(c[i] for c in chunks) for i in range(3)]
    seqs = [torch.randint(0, 64, (n,)).tolist() for n in lengths]
    pool = PagedKVPool.for_model(tiny, num_blocks=32, block_size=4)
    bm = BlockManager(32, 4)
    tables = _scattered_tables(bm, lengths)
    done = [0, 0, 0]
    for chunk in chunks:
        with torch.no_grad():
            got = paged_forward(tiny, pool, tables, done,
                                [s[d:d + n] for s, d, n in zip(seqs, done, chunk)])
        done = [d + n for d, n in zip(done, chunk)]
    with torch.no_grad():
        for s, row in zip(seqs, got):
            want = tiny(torch.tensor([s]))[0, -1]
            torch.testing.assert_close(row, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("head_dim", [8, 16])
def test_a_decode_step_attends_in_the_pool_and_gives_the_gather_paths_logits(head_dim,
                                                                           monkeypatch):
    """A pass of one new token per row reads its keys where they lie (minillm.kernels' paged
    attention) where dispatch routes it there; the same pass with the kernels switched off (the
    gather path) gives the same logits, and both leave the same keys and values in the pool."""
    from minillm.kernels import dispatch

    model = tiny_model(hidden_size=4 * head_dim)[0]
    lengths = [9, 3, 14]
    seqs = [torch.randint(0, 64, (n + 1,), generator=torch.Generator().manual_seed(n)).tolist()
            for n in lengths]
    runs = {}
    for kernel in (True, False):
        if not kernel:
            monkeypatch.setenv(dispatch.SWITCH, "1")
        pool = PagedKVPool.for_model(model, num_blocks=16, block_size=4)
        tables = _scattered_tables(BlockManager(16, 4), [n + 1 for n in lengths])
        with torch.inference_mode():
            paged_forward(model, pool, tables, [0, 0, 0], [s[:-1] for s in seqs])
            step = PagedBatch(pool, tables, lengths, [1, 1, 1])
            assert step.attends == (kernel and dispatch.cpu_kernels("cpu"))
            runs[kernel] = (paged_forward(model, pool, tables, lengths, [s[-1:] for s in seqs]),
                            pool)
    (got, pool), (want, gathered) = runs[True], runs[False]
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    for a, b in zip(pool.keys + pool.values, gathered.keys + gathered.values):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)  # later layers: rounding
    with torch.inference_mode():
        whole = model(torch.tensor([seqs[0]]))[0, -1]
    torch.testing.assert_close(got[0], whole, atol=1e-5, rtol=1e-5)


def test_paged_batch_rejects_a_table_too_short(tiny):
    pool = PagedKVPool.for_model(tiny, num_blocks=4, block_size=4)
    with pytest.raises(ValueError, match="block table holds 4 tokens, it needs 6"):
        PagedBatch(pool, [[0]], [3], [3])


def test_pool_bytes_follow_the_kv_formula(tiny):
    c = tiny.config
    pool = PagedKVPool.for_model(tiny, num_blocks=5, block_size=16)
    assert pool.bytes_per_block == 2 * c.n_layers * c.n_kv_heads * c.head_dim * 16 * 4
    assert pool.nbytes == 5 * pool.bytes_per_block


def test_gathered_keys_land_in_one_reused_scratch_buffer(tiny):
    """Every layer and pass gathers into the same two buffers (grown when a pass needs more), so
    a long run allocates no fresh memory per layer; each layer reads its keys before the next
    layer's gather overwrites them."""
    pool = PagedKVPool.for_model(tiny, num_blocks=8, block_size=4)
    k1, v1 = pool.scratch(6)
    k2, _ = pool.scratch(5)
    assert k2.data_ptr() == k1.data_ptr() and k1.data_ptr() != v1.data_ptr()
    k3, _ = pool.scratch(20)
    assert k3.shape[0] == 20 and pool.scratch(6)[0].data_ptr() == k3.data_ptr()
    ids = [[3, 1, 4, 1, 5, 9, 2]]
    with torch.inference_mode():
        want = tiny(torch.tensor(ids))[:, -1]
        got = paged_forward(tiny, pool, [[2, 5]], [0], ids)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


# --- copy-on-write (the n samples of one request share its prompt's blocks) ---------------------

def test_copy_on_write_gives_a_writer_its_own_copy_of_a_shared_partial_block():
    bm = BlockManager(6, block_size=4)
    parent = []
    bm.grow(parent, 6)  # a full block and a partial one (2 of 4 slots)
    child = list(parent)
    for b in child:
        bm.share(b)
    assert not bm.is_shared(parent, 8)  # the next block does not exist yet: nothing to copy
    full, partial = child
    child_copy = bm.copy_on_write(child, 6)
    assert child_copy is not None and child_copy[0] == partial
    assert child[0] == full and child[1] == child_copy[1] != partial
    assert bm.blocks[partial].ref_count == 1  # the parent alone holds it now
    assert bm.copy_on_write(parent, 6) is None  # so the parent writes in place
    assert bm.blocks[full].ref_count == 2
    bm.free_table(parent)
    bm.free_table(child)
    assert bm.num_free == 6
    bm.check()


def test_copy_blocks_copies_every_layers_keys_and_values(tiny):
    pool = PagedKVPool.for_model(tiny, num_blocks=4, block_size=4)
    for t in (*pool.keys, *pool.values):
        t.copy_(torch.randn_like(t))
    before = [t.clone() for t in (*pool.keys, *pool.values)]
    pool.copy_blocks([(1, 3), (0, 2)])
    for old, new in zip(before, (*pool.keys, *pool.values)):
        assert torch.equal(new[12:16], old[4:8]) and torch.equal(new[8:12], old[0:4])
        assert torch.equal(new[:8], old[:8])  # the sources are unchanged


def test_paged_forward_can_keep_every_positions_logits(tiny):
    ids = [[3, 1, 4, 1, 5], [9, 2]]
    pool = PagedKVPool.for_model(tiny, num_blocks=8, block_size=4)
    with torch.inference_mode():
        got = paged_forward(tiny, pool, [[0, 1], [2]], [0, 0], ids, all_positions=True)
        assert got.shape == (2, 5, 64)
        for row, seq in zip(got, ids):  # each row's own positions are its last len(seq)
            want = tiny(torch.tensor([seq]))[0]
            torch.testing.assert_close(row[-len(seq):], want, rtol=1e-5, atol=1e-5)
