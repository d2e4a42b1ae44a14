"""The search agent and the shape: each family started where its tiles fit, moves ordered by the fit,
warm starts from the runs recorded at the nearest shapes, and the fit in the LLM's prompt."""

from __future__ import annotations

import pytest
from shapes import GEMM, MID, SKINNY, WGMMA, harness_at, record_run, structural

from autodiscovery import campaign as campaigns
from autodiscovery.agents import warm
from autodiscovery.agents.search import SearchAgent
from autodiscovery.agents.space import Space
from autodiscovery.interfaces import History, Record
from autodiscovery.toolkit.text import canon


@pytest.fixture(scope="module")
def space():
    return Space("hopper_gemm")

def test_at_the_square_shape_every_family_starts_at_its_default(space):
    """All but wgmma_tma, whose default ring (4 stages of 128×128 tiles, one block an SM) spans too few
    round trips to L2 to keep its MMAs fed: it starts at 128×256 tiles (measured on an H100 at 4096³:
    0.69× cuBLAS at 128×128, where the warp-specialized family's 128×256 gives 0.88×)."""
    moves = structural(4096, 4096, 4096)
    assert [p.family for p in moves] == ["tiled", "mma_sync", *WGMMA]
    for p in moves:
        default = space.families[p.family].default
        if p.family == "wgmma_tma":
            assert p.knobs == default | {"BN": 256} and "better served by 128×256 tiles" in p.hypothesis
            continue
        assert p.knobs == default
        fitted = bool(space.families[p.family].shape_knobs)  # CUDA-core tiles have no fit
        assert ("its default fits the shape" in p.hypothesis) == fitted, p.family


def test_at_a_skinny_shape_the_families_start_with_tiles_that_fill_the_gpu(space):
    moves = {p.family: p for p in structural(*SKINNY)}
    for name in WGMMA:
        p, default = moves[name], space.families[name].default
        assert p.knobs["BM"] * p.knobs["BN"] < default["BM"] * default["BN"], name
        assert {k for k in p.knobs if p.knobs[k] != default[k]} <= set(space.families[name].shape_knobs)
        assert "better served by" in p.hypothesis and "estimated" in p.hypothesis
    cluster = moves["wgmma_cluster"]
    assert (cluster.knobs["BM"], cluster.knobs["BN"], cluster.knobs["SCHEDULE"]) == (64, 128, "pingpong")
    assert "128 tiles for 132 SMs (0.97 waves)" in cluster.hypothesis


@pytest.mark.parametrize("shape", [(16, 4096, 4096), (128, 4096, 4096), (128, 4096, 14336), SKINNY])
def test_at_a_skinny_shape_the_split_family_starts_with_blocks_that_fill_the_gpu(space, shape):
    """Too few large output tiles for the SMs: the structural move into wgmma_splitk takes tiles small
    enough, or splits K across a cluster, so that every SM gets a block (at most two)."""
    (move,) = [p for p in structural(*shape, n=7) if p.family == "wgmma_splitk"]
    split = move.knobs["SPLIT"]
    assert move.rejected is None and f"cluster: [{split}, 1, 1]" in move.source
    assert (f"× {split} K slices reduced in the cluster" in move.hypothesis) == (split > 1)
    M, N, _ = shape
    def blocks(knobs):
        return -(-M // knobs["BM"]) * -(-N // knobs["BN"]) * knobs["SPLIT"]
    assert 128 <= blocks(move.knobs) <= 2 * 132
    assert blocks({"BM": 128, "BN": 256, "SPLIT": 1}) < 128  # large tiles leave SMs idle


def test_where_the_wide_side_divides_by_96_the_split_family_starts_at_64x96_tiles(space):
    """128×6144×4096 (a QKV projection at 128 tokens): 64×128 tiles make 96 for 132 SMs and 64×64 make
    192, 64×96 make 128, one wave, with a ring of 10 stages (the deepest that fits). Measured on an H100:
    0.965× cuBLAS, where 64×128 in 8 stages gave 0.946× (cuBLAS runs a 96×64 tile of 10 stages)."""
    (move,) = [p for p in structural(128, 6144, 4096, n=7) if p.family == "wgmma_splitk"]
    assert (move.knobs["BM"], move.knobs["BN"], move.knobs["SPLIT"], move.knobs["QSIZE"]) == (64, 96, 1, 10)
    assert "64×96 tiles: 128 tiles for 132 SMs (0.97 waves)" in move.hypothesis


def test_where_128_wide_tiles_leave_a_ragged_wave_the_cluster_family_starts_at_a_width_that_fills_whole_ones(space):
    """512×28672×4096 (gate_up at 512 tokens): 128×128 tiles give 6.79 waves, 128×176 give 4.94."""
    (move,) = [p for p in structural(512, 28672, 4096, n=7) if p.family == "wgmma_cluster"]
    assert (move.knobs["BM"], move.knobs["BN"], move.knobs["CTAS"]) == (128, 176, 0)
    assert "652 tiles for 132 SMs (4.94 waves)" in move.hypothesis


def test_at_the_square_shape_the_split_family_starts_unsplit(space):
    (move,) = [p for p in structural(4096, 4096, 4096, n=7) if p.family == "wgmma_splitk"]
    assert (move.knobs["BM"], move.knobs["BN"], move.knobs["SPLIT"]) == (128, 256, 1)
    assert "better served by 128×256 tiles: 512 tiles" in move.hypothesis and "cluster: [1, 1, 1]" in move.source


def test_the_llm_prompt_states_the_incumbents_fit(space):
    harness, _ = harness_at(*SKINNY)
    source = space.render("wgmma_cluster", space.families["wgmma_cluster"].default)
    inc = Record(seq=3, family="wgmma_cluster", knobs={}, status="kept", score=0.59, kept=True, source_hash="i",
                 source=source)
    text = harness.hardware({}, History([inc], inc, GEMM))
    assert "The incumbent's 128×256 tiles: 32 tiles for 132 SMs (0.24 waves)" in text
    assert "fewer tiles than that\nleaves SMs idle" in text


def test_a_run_starts_from_the_best_recorded_at_the_nearest_shapes(space, tmp_path):
    from autodiscovery.store import Store

    store = Store(tmp_path / "runs.db")
    near = {"BM": 64, "BN": 128, "SCHEDULE": "pingpong"}
    far = {"BM": 128, "BN": 128}
    record_run(store, (4096, 4096, 4096), "wgmma_persistent", far, 1.01)
    nearest = record_run(store, (512, 4096, 14336), "wgmma_cluster", near, 0.97)
    record_run(store, (256, 4096, 14336), "wgmma_tma", {"BM": 64}, 1.2, gpu="H200")  # another GPU
    record_run(store, (256, 4096, 14336), "wgmma_tma", {"BM": 64}, 1.2, dry=True)  # a dry run measures nothing
    record_run(store, (256, 4096, 14336), "wgmma_tma", {"NOT_A_KNOB": 1}, 1.2)  # not of this space

    harness, campaign = harness_at(*SKINNY)
    agent = SearchAgent(campaign)
    agent.bind(store, 99, harness, {"gpu": "H100"})
    seed = Record(seq=0, family="naive", knobs={}, status="kept", score=0.001, kept=True, source_hash="s")
    moves = agent.propose(History([seed], seed, GEMM), 4)
    assert [(p.family, p.proposer) for p in moves] == [("wgmma_cluster", "search:warm")] * 2 + \
        [("wgmma_persistent", "search:warm")] * 2
    assert moves[0].knobs == space.families["wgmma_cluster"].default | near
    # each followed by its refit to this shape: one 64×128 tile an SM (two 128×128) wants a deeper ring
    assert moves[1].knobs == moves[0].knobs | {"QSIZE": 6} and "refitted to this problem" in moves[1].hypothesis
    assert moves[3].knobs == moves[2].knobs | {"QSIZE": 6}
    assert f"the best of run {nearest} at 512×4096×14336, 0.970× cuBLAS there" in moves[0].hypothesis
    assert "Here: 64×128 tiles" in moves[0].hypothesis

    # once measured, the climb goes on from there, and no warm move is proposed twice
    records = [seed] + [Record(seq=i + 1, family=p.family, knobs=p.knobs, status="reverted", score=0.5,
                               kept=False, source_hash=str(i)) for i, p in enumerate(moves)]
    after = agent.propose(History(records, seed, GEMM), 4)
    assert after and all(p.proposer != "search:warm" for p in after)

    agent = SearchAgent(campaigns.load("hopper-gemm", [*(f"problem.{k}={v}" for k, v in zip("MNK", SKINNY)),
                                                        "agent.search.warm_start=0"]))
    agent.bind(store, 99, harness, {"gpu": "H100"})
    assert all(p.proposer != "search:warm" for p in agent.propose(History([seed], seed, GEMM), 4))


def test_a_warm_start_from_a_larger_problem_is_refitted_to_this_one(space, tmp_path):
    from autodiscovery.store import Store

    store = Store(tmp_path / "runs.db")
    record_run(store, (4096, 4096, 4096), "wgmma_cluster", {}, 1.006)  # 128×256 tiles: 32 tiles at M = 256
    harness, campaign = harness_at(*SKINNY)
    agent = SearchAgent(campaign)
    agent.bind(store, 99, harness, {"gpu": "H100"})
    seed = Record(seq=0, family="naive", knobs={}, status="kept", score=0.001, kept=True, source_hash="s")
    recorded, refit = agent.propose(History([seed], seed, GEMM), 4)
    assert recorded.knobs == space.families["wgmma_cluster"].default and "Here: 128×256 tiles" in recorded.hypothesis
    assert (refit.knobs["BM"], refit.knobs["BN"]) == (64, 128) and refit.proposer == "search:warm"
    assert "refitted to this problem" in refit.hypothesis and "estimated" in refit.hypothesis


def test_a_shape_two_tile_sizes_quantize_badly_starts_at_192_square_tiles(space):
    """128×256 tiles leave 2304×8192 a ragged fifth wave; the structural move starts at 192×192 tiles
    (3.91 waves), with the register split three consumers need, and the default comes next as the check."""
    harness, campaign = harness_at(*MID)
    (move,) = [p for p in structural(*MID, n=6) if p.family == "wgmma_cluster"]
    fam = space.families["wgmma_cluster"]
    changed = {k: v for k, v in move.knobs.items() if v != fam.default[k]}
    assert changed == {"BM": 192, "BN": 192, "CTAS": 0, "CONSUMER_REGS": 160}
    assert "516 tiles for 132 SMs (3.91 waves)" in move.hypothesis and "576 tiles" in move.hypothesis

    agent = SearchAgent(campaign)
    agent.bind(None, 1, harness, {})
    climbed = [Record(seq=i, family=f.name, knobs=dict(f.default), status="reverted", score=0.01 * i, kept=False,
                      source_hash=str(i)) for i, f in enumerate(space.ladder()) if f.name != "wgmma_cluster"]
    start = Record(seq=10, family="wgmma_cluster", knobs=move.knobs, status="kept", score=1.01, kept=True,
                   source_hash="c")
    (nxt,) = agent.propose(History([*climbed, start], start, GEMM), 1)
    assert nxt.knobs == fam.default and "the family's default, which the fit of the shape rates close" in nxt.hypothesis
    default = Record(seq=11, family="wgmma_cluster", knobs=fam.default, status="reverted", score=0.94, kept=False,
                     source_hash="d")
    (after,) = agent.propose(History([*climbed, start, default], start, GEMM), 1)
    assert after.family == "wgmma_cluster" and after.knobs != fam.default
    assert "one step from the family's best" in after.hypothesis


def test_of_settings_the_fit_rates_alike_a_move_starts_at_a_ring_of_four_stages(space):
    """At 3000×5000×2000 the fit rates 256×152 tiles (three whole waves) fastest, with three stages and the
    split epilogue as with four and an 8 KB epilogue, which four stages need; the move starts at four, with
    the nearest such epilogue, every warp storing its own rows (measured on an H100: 0.97× cuBLAS with
    three stages, 0.99× with four and one 64 x 64 buffer a consumer, 1.005× with the warps' buffers)."""
    (move,) = [p for p in structural(3000, 5000, 2000, n=6) if p.family == "wgmma_cluster"]
    k = move.knobs
    assert (k["BM"], k["BN"], k["QSIZE"], k["EPILOGUE"]) == (256, 152, 4, "tma_warp")
    assert "396 tiles for 132 SMs (3.00 waves)" in move.hypothesis
    harness, _ = harness_at(3000, 5000, 2000)
    three = harness.fit(space.render("wgmma_cluster", k | {"QSIZE": 3, "EPILOGUE": "tma_split"}))
    four = harness.fit(space.render("wgmma_cluster", k))
    assert three.estimate == four.estimate and (three.ring_k, four.ring_k) == (192, 256)


def test_knob_moves_the_fit_rates_faster_go_first_and_much_slower_last(space):
    """From 128×256 tiles at 3000×5000×2000 (3.64 waves), the fit rates 128×192 and 192×128 tiles
    faster: those go first, fastest first, even two and three knobs away; a tile move it rates much
    slower (64-row ping-pong tiles) goes after every other neighbour."""
    harness, campaign = harness_at(3000, 5000, 2000)
    agent = SearchAgent(campaign)
    agent.bind(None, 1, harness, {})
    fam = space.families["wgmma_cluster"]
    order = agent.fits.order(fam, fam.default, agent.neighbours(fam, fam.default))
    here = harness.fit(space.render("wgmma_cluster", fam.default)).estimate
    fits = [harness.fit(space.render("wgmma_cluster", k)).estimate for k, _ in order]
    lead = [i for i, (_, why) in enumerate(order) if why.startswith("the fit of the shape rates")]
    assert lead == list(range(len(lead))) and len(lead) >= 2
    assert all(fits[i] * 1.03 < here for i in lead) and fits[:len(lead)] == sorted(fits[:len(lead)])
    assert {(order[i][0]["BM"], order[i][0]["BN"]) for i in lead} >= {(128, 192), (192, 128)}
    slow = [i for i, (_, why) in enumerate(order) if why.endswith("rates it slower")]
    assert slow and slow == list(range(len(order) - len(slow), len(order)))
    assert all(fits[i] > here * 1.1 for i in slow)
    assert sorted(map(canon, (k for k, _ in order))) == sorted(
        {*map(canon, agent.neighbours(fam, fam.default)), *(canon(order[i][0]) for i in lead)})
    # No fit (another harness): the neighbours as they are.
    agent.fits.harness = None
    near = agent.neighbours(fam, fam.default)
    assert [k for k, _ in agent.fits.order(fam, fam.default, near)] == near


def test_moves_the_fit_rates_a_little_faster_come_before_those_it_cannot_tell_apart(space):
    """From 64×128 ping-pong tiles at 256×4096×14336 the fit rates the promoted maps 1.3% faster (under
    FIT_EDGE; measured 0.948× → 0.998× cuBLAS on an H100): that move comes right after the moves rated
    more than 3% faster, ahead of the neighbours the fit rates alike; at 4096³ nothing is nudged."""
    fam = space.families["wgmma_cluster"]
    tile = {"BM": 64, "BN": 128, "SCHEDULE": "pingpong", "QSIZE": 6, "CTAS": 128}
    harness, campaign = harness_at(256, 4096, 14336)
    agent = SearchAgent(campaign)
    agent.bind(None, 1, harness, {})
    best = fam.default | tile
    near = agent.neighbours(fam, best)
    order = agent.fits.order(fam, best, near)
    lead = sum(why.startswith("the fit of the shape rates") for _, why in order)
    knobs, why = order[lead]
    assert knobs == best | {"L2_PROMO": 256} and "rates 1.01" in why and "faster" in why
    assert near.index(knobs) > 0  # not where the neighbours' own order had it
    here = harness.fit(space.render("wgmma_cluster", best)).estimate
    nudged = [harness.fit(space.render("wgmma_cluster", k)).estimate for k, w in order[lead:] if "× faster" in w]
    assert nudged == sorted(nudged) and all(here / 1.03 <= e < here / 1.01 for e in nudged)
    lean = [k for k, w in order[lead + len(nudged):] if "GB of operands" in w]
    here_gb = harness.fit(space.render("wgmma_cluster", best)).l2_gb
    gbs = [harness.fit(space.render("wgmma_cluster", k)).l2_gb for k in lean]
    assert gbs == sorted(gbs) and all(gb < here_gb * 0.9 for gb in gbs)
    rest = [k for k, w in order[lead + len(nudged) + len(lean):] if "faster" not in w and "slower" not in w]
    assert rest == [k for k in near if k in rest]  # the others keep their order
    square, campaign = harness_at(4096, 4096, 4096)
    agent = SearchAgent(campaign)
    agent.bind(None, 1, square, {})
    assert not any("× faster" in why for _, why in agent.fits.order(fam, fam.default, agent.neighbours(fam, fam.default)))


def test_a_move_of_a_knob_outside_the_shape_knobs_goes_first_where_the_fit_rates_it_faster(space):
    """From 128×224 tiles at 128×28672×4096 the fit rates the promoted maps faster: that move leads the
    walk; at 4096³ it stays among the plain neighbours."""
    fam = space.families["wgmma_cluster"]
    for shape, tile, first in [((128, 28672, 4096), {"BM": 128, "BN": 224, "CTAS": 0}, True), ((4096, 4096, 4096), {}, False)]:
        harness, campaign = harness_at(*shape)
        agent = SearchAgent(campaign)
        agent.bind(None, 1, harness, {})
        best = fam.default | tile
        order = agent.fits.order(fam, best, agent.neighbours(fam, best))
        lead = [k for k, why in order if why.startswith("the fit of the shape rates")]
        assert (fam.default | tile | {"L2_PROMO": 256} in lead) is first
        assert any(k == best | {"L2_PROMO": 256} for k, _ in order)


def test_a_run_recorded_before_a_knob_existed_resumes_its_walk_from_its_best(space):
    """Configurations recorded before the cluster family had PDL and L2_PROMO are read as what they were
    (both 0, what the template renders without them): the family's best among them is found and its
    knob moves start from it, never proposing it again as new."""
    fam = space.families["wgmma_cluster"]
    old = {k: v for k, v in fam.default.items() if k not in ("PDL", "L2_PROMO")} | {"QSIZE": 6, "BN": 128}
    assert fam.complete(old) == old | {"PDL": 0, "L2_PROMO": 0}
    assert fam.complete({"BM": 128}) == {"BM": 128}  # lacks knobs that never were absent: left alone
    harness, campaign = harness_at(512, 4096, 4096)
    agent = SearchAgent(campaign)
    agent.bind(None, 1, harness, {})
    seed = Record(seq=0, family="naive", knobs={}, status="kept", score=0.001, kept=True, source_hash="s")
    best = Record(seq=1, family="wgmma_cluster", knobs=old, status="kept", score=0.98, kept=True, source_hash="b")
    worse = Record(seq=2, family="wgmma_cluster", knobs=old | {"QSIZE": 5}, status="reverted", score=0.95,
                   kept=False, source_hash="w")
    structural_done = [Record(seq=3 + i, family=f.name, knobs=dict(f.default), status="reverted", score=0.5,
                              kept=False, source_hash=f"f{i}") for i, f in enumerate(space.ladder())
                       if f.rung > 0 and f.name != "wgmma_cluster"]
    history = History([seed, best, worse, *structural_done], best, GEMM)
    moves = agent.propose(history, 6)
    cluster = [m for m in moves if m.family == "wgmma_cluster"]
    assert cluster and all("relative to the family's best (0.98" in m.hypothesis for m in cluster)
    done = {canon(fam.complete(old)), canon(fam.complete(old | {"QSIZE": 5}))}
    assert not any(canon(m.knobs) in done for m in cluster)
    base = fam.complete(old)  # each a neighbour of it: one knob moved (two where a constraint needs it)
    assert all(1 <= sum(m.knobs[k] != base[k] for k in m.knobs) <= 2 for m in cluster)


def test_of_moves_the_fit_cannot_tell_apart_those_that_move_fewer_bytes_come_first(space):
    """At 8192×57344×8192 (many waves, at the power limit) the fit rates 128×256 tiles in clusters of one or
    two alike, but a cluster of two along M that multicasts B reads a third fewer operand bytes from L2
    (measured on an H100: 0.978× → 1.008× the best cuBLASLt algorithm): it is the first such move, ahead
    of the moves that read as much; a configuration whose cluster shares nothing reads as a lone block."""
    fam = space.families["wgmma_cluster"]
    harness, campaign = harness_at(8192, 57344, 8192)
    agent = SearchAgent(campaign)
    agent.bind(None, 1, harness, {})
    best = fam.default | {"CTAS": 0}
    order = agent.fits.order(fam, best, agent.neighbours(fam, best))
    lead = [why for _, why in order].index(next(why for _, why in order if "GB of operands" in why))
    assert all("faster" in why for _, why in order[:lead])
    assert order[lead][0] == best | {"CLUSTER": 2} and "60.1 GB" in order[lead][1] and "90.2 GB" in order[lead][1]
    shared = harness.fit(space.render("wgmma_cluster", best | {"CLUSTER": 2}))
    alone = harness.fit(space.render("wgmma_cluster", best))
    along_n = harness.fit(space.render("wgmma_cluster", best | {"CLUSTER": 2, "CLUSTER_DIM": "N"}))
    assert shared.estimate == pytest.approx(alone.estimate, rel=0.01)
    assert shared.l2_gb == pytest.approx(alone.l2_gb * 2 / 3) and along_n.l2_gb == pytest.approx(alone.l2_gb * 5 / 6)


def test_a_warm_start_is_also_tried_at_the_nearest_tile_that_reads_far_fewer_bytes(space):
    """A best recorded at 16 rows with 16-row tiles, warm-starting 32×57344×8192, would read B twice: the
    warm start is followed by the same kernel 32 rows high (measured on an H100: 16×64 tiles 0.963× the
    best cuBLASLt algorithm, 32×64 1.026×); where the tile already covers the rows, nothing is added."""
    fam = space.families["wgmma_splitk"]
    recorded = fam.default | {"BM": 16, "BN": 64, "SPLIT": 1, "SWAP": 1, "QSIZE": 10}
    harness, campaign = harness_at(32, 57344, 8192)
    agent = SearchAgent(campaign)
    agent.bind(None, 1, harness, {})
    moves = warm.refitted([("wgmma_splitk", recorded, "the best of run 20 at 16×28672×4096")], agent.space, agent.fits)
    assert [knobs for _, knobs, _ in moves] == [recorded, recorded | {"BM": 32}]
    assert "refitted" in moves[1][2] and "GB of operands from L2" in moves[1][2]
    harness, campaign = harness_at(16, 28672, 4096)
    agent = SearchAgent(campaign)
    agent.bind(None, 1, harness, {})
    assert [knobs for _, knobs, _ in warm.refitted([("wgmma_splitk", recorded, "run 20")], agent.space, agent.fits)] \
        == [recorded]
