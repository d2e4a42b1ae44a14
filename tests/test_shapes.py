"""Shapes: how a configuration's tiles fit a problem (tiles, waves, the busiest block's work, a modelled
time), and what the families' shape variants render and compile to (the search that reads the fit:
test_shape_search.py)."""

from __future__ import annotations

import pytest
from conftest import needs_nvcc
from shapes import MID, SKINNY, harness_at, structural

from autodiscovery.agents.space import Space
from harnesses.hopper_gemm import HopperGemmHarness, ManifestError
from harnesses.hopper_gemm.manifest import parse, resolve


@pytest.fixture(scope="module")
def space():
    return Space("hopper_gemm")

def test_a_fit_counts_tiles_waves_and_the_busiest_block(space):
    harness, _ = harness_at(*SKINNY)
    default = space.families["wgmma_cluster"].default  # 128×256 tiles, at most 128 persistent CTAs
    f = harness.fit(space.render("wgmma_cluster", default))
    assert (f.tile, f.tiles, f.ctas, f.slots, f.per_slot) == ((128, 256), 32, 32, 132, 1)
    assert f.waves == pytest.approx(32 / 132) and f.useful == 1.0
    assert "32 tiles for 132 SMs (0.24 waves)" in f.describe()
    smaller = harness.fit(space.render("wgmma_cluster", default | {"BM": 64, "BN": 128, "SCHEDULE": "pingpong"}))
    assert smaller.tiles == 128 and smaller.estimate < f.estimate / 1.5

    square, _ = harness_at(4096, 4096, 4096)
    f = square.fit(space.render("wgmma_cluster", default))
    assert (f.tiles, f.ctas, f.per_slot) == (512, 128, 4)  # four tiles each for 128 CTAs: no tail
    ragged, _ = harness_at(1000, 4096, 4096)
    assert ragged.fit(space.render("wgmma_cluster", default)).useful == pytest.approx(1000 / 1024)


def test_a_kernel_that_states_no_tile_has_no_fit(space):
    harness, _ = harness_at(*SKINNY)
    source = space.render("wgmma_cluster", space.families["wgmma_cluster"].default)
    assert harness.fit(source.replace("tile: [128, 256]\n", "")) is None
    assert harness.fit(source.replace("K % 8 == 0", "K % 9 == 0")) is None  # a shape it refuses
    with pytest.raises(ManifestError, match="tile"):
        resolve(parse(source.replace("tile: [128, 256]", "tile: [0, 256]")), 4096, 4096, 4096)


def test_split_k_adds_units_and_a_pass_over_the_partials(space):
    harness, _ = harness_at(*SKINNY)
    source = space.render("wgmma_tma", space.families["wgmma_tma"].default)
    one = harness.fit(source)
    four = harness.fit(source.replace("tile: [128, 128]", "tile: [128, 128]\nsplit_k: 4"))
    assert (one.tiles, four.tiles, four.split) == (64, 256, 4)
    assert "× 4 K slices" in four.describe() and "in the cluster" not in four.describe()
    assert not four.cluster_reduce and four.estimate > one.estimate / 4 + 2.0  # the partials' pass through DRAM


def test_a_split_reduced_in_its_cluster_is_modelled_on_chip(space):
    """wgmma_splitk: the blocks of a tile's split form a cluster and add the partials up through
    distributed shared memory, with no pass through DRAM; the same launch told to reduce in DRAM is slower."""
    harness, _ = harness_at(128, 4096, 4096)
    knobs = space.families["wgmma_splitk"].default | {"BM": 64, "BN": 128, "SPLIT": 4}
    source = space.render("wgmma_splitk", knobs)
    launch = harness.check(source)
    assert launch.cluster == (4, 1, 1) and launch.split_k == 4 and launch.grid == (2 * 32 * 4, 1, 1)
    inside = harness.fit(source)
    assert inside.cluster_reduce and (inside.tiles, inside.ctas) == (256, 256)
    assert "64×128 tiles × 4 K slices reduced in the cluster: 256 units" in inside.describe()
    through_dram = harness.fit(source.replace("cluster: [4, 1, 1]", "cluster: [1, 1, 1]"))
    assert not through_dram.cluster_reduce and through_dram.tiles == inside.tiles
    assert inside.estimate < through_dram.estimate - 2.0
    unsplit = harness.fit(space.render("wgmma_splitk", knobs | {"SPLIT": 1}))
    assert not unsplit.cluster_reduce and unsplit.tiles == 64 and "K slices" not in unsplit.describe()


def test_the_split_family_states_shared_memory_for_its_partial(space):
    """The fp32 partial covers the drained ring: the manifest asks for the larger of the two."""
    fam = space.families["wgmma_splitk"]
    for knobs in (fam.default, fam.default | {"BM": 128, "BN": 256, "CONSUMERS": 2, "QSIZE": 2, "SPLIT": 2}):
        launch = resolve(parse(space.render("wgmma_splitk", knobs)), 4096, 4096, 4096)
        ring = knobs["QSIZE"] * (knobs["BM"] + knobs["BN"]) * 64 * 2
        partial = knobs["BM"] * (knobs["BN"] + 8) * 4
        assert launch.smem == max(ring, partial) + 1024 + 16 * knobs["QSIZE"]
    assert partial > ring  # the second: the partial sets the size


def test_a_deeper_ring_is_rated_faster_where_one_tile_an_sm_waits_on_l2(space):
    """At 512×4096×4096 (128 tiles of 128×128, one an SM) four 64-column stages in flight leave the
    MMAs waiting on L2 round trips, six do not (measured on an H100: 0.886× and 0.979× cuBLAS); at
    4096³ with 128×256 tiles the ring depth does not matter to the fit."""
    fam = space.families["wgmma_cluster"]
    small, _ = harness_at(512, 4096, 4096)
    four, six = (small.fit(space.render("wgmma_cluster", fam.default | {"BN": 128, "QSIZE": q})) for q in (4, 6))
    assert four.estimate > six.estimate * 1.15
    square, _ = harness_at(4096, 4096, 4096)
    three, four = (square.fit(space.render("wgmma_cluster", fam.default | {"QSIZE": q})) for q in (3, 4))
    assert three.estimate == four.estimate
    moves = {p.family: p for p in structural(512, 4096, 4096, 8)}
    for name in ("wgmma_tma", "wgmma_cluster", "wgmma_splitk"):
        assert moves[name].knobs["QSIZE"] == 6 and moves[name].knobs["BN"] == 128, name


@needs_nvcc
@pytest.mark.long
def test_tiles_96_and_112_wide_and_deep_rings_compile_without_spills(space, tmp_path):
    """N of 96 and 112 in the MMA; 14 stages of 64×64; a split of 128×96 whose 12 pieces a thread add up
    in batches of 6 (the batch divides each thread's share); swapped tiles of 160, 192 and 224 rows of A
    (the MMA's N: M of 320 in two tiles, of 224 in one) and a split in threes."""
    from harnesses.hopper_gemm.build import Builder

    builder = Builder(tmp_path)
    fam = space.families["wgmma_splitk"]
    for extra in ({"BM": 64, "BN": 96, "SPLIT": 1, "QSIZE": 10}, {"BM": 128, "BN": 112, "SPLIT": 1, "QSIZE": 7},
                  {"BM": 64, "BN": 64, "SPLIT": 1, "QSIZE": 14}, {"BM": 128, "BN": 96, "SPLIT": 2, "QSIZE": 6},
                  {"BM": 160, "BN": 128, "SPLIT": 2, "SWAP": 1, "CONSUMERS": 2, "PRODUCER_REGS": 40,
                   "CONSUMER_REGS": 232, "QSIZE": 5},
                  {"BM": 192, "BN": 64, "SPLIT": 3, "SWAP": 1, "QSIZE": 6},
                  {"BM": 224, "BN": 64, "SPLIT": 1, "SWAP": 1, "QSIZE": 6}):
        knobs = fam.default | extra
        assert not fam.violations(knobs, {}), extra
        report = builder.build(space.render("wgmma_splitk", knobs), "gemm")
        assert report.ok and report.spill_stores == 0 and report.spill_loads == 0, extra
    # 12 stages of 64×96 exceed shared memory; swapped, 96 rows of B are not whole 64-row MMA tiles.
    assert fam.violations(fam.default | {"BM": 64, "BN": 96, "SPLIT": 1, "QSIZE": 12}, {})
    assert fam.violations(fam.default | {"BM": 16, "BN": 96, "SPLIT": 1, "SWAP": 1}, {})


@needs_nvcc
@pytest.mark.long
def test_widths_between_128_and_256_store_their_last_columns_as_a_box_of_their_own(space, tmp_path):
    """BN 176 = two 64-column swizzled boxes and an unswizzled 48-column tail (its own tensor map); the
    split epilogue sends it in three parts of at most 64 columns; every new width compiles without spills."""
    from harnesses.hopper_gemm.build import Builder

    fam = space.families["wgmma_cluster"]
    knobs = fam.default | {"BN": 176, "QSIZE": 5, "CTAS": 0}
    source = space.render("wgmma_cluster", knobs)
    launch = resolve(parse(source), 512, 28672, 4096)
    assert launch.tensor_maps["tmT"]["box"] == [64, 48] and launch.tensor_maps["tmT"]["swizzle"] == 0
    assert launch.tensor_maps["tmC"]["box"] == [64, 64] and launch.args[:4] == ["tmA", "tmB", "tmC", "tmT"]
    assert launch.smem == 5 * (128 + 176) * 64 * 2 + 128 * 64 * 2 + 1024 + 16 * 5
    assert "columns 128 to 176: the 48-column tail" in source and "wgmma.mma_async.sync.aligned.m64n176k16" in source
    whole = space.render("wgmma_cluster", knobs | {"EPILOGUE": "tma", "QSIZE": 3})
    assert "columns 0 to 176: 2 swizzled 64-column boxes and the 48-column tail" in whole
    # Widths that divide by 64 have no tail.
    assert "tmT" not in space.render("wgmma_cluster", fam.default)
    # A pair along M multicasts B in halves of BN / 2 rows: 76 for 256 x 152 tiles, whose second half starts
    # inside a 1024-byte swizzle pattern (TMA swizzles by the shared-memory address; the GPU test gates it).
    assert not fam.violations(knobs | {"BM": 256, "BN": 152, "QSIZE": 4, "EPILOGUE": "tma_slab", "CLUSTER": 2}, {})
    assert "tmB: {tensor: B, box: [76, 64]" in space.render(
        "wgmma_cluster", knobs | {"BM": 256, "BN": 152, "QSIZE": 4, "EPILOGUE": "tma_slab", "CLUSTER": 2})
    assert not fam.violations(knobs | {"CLUSTER": 2}, {})
    builder = Builder(tmp_path)
    for extra in ({"BN": 144, "STREAMK": 1, "PRODUCER_REGS": 40, "CONSUMER_REGS": 232},
                  {"BM": 192, "BN": 176, "CONSUMER_REGS": 160}, {"BN": 208, "EPILOGUE": "tma", "QSIZE": 3},
                  {"BM": 64, "BN": 240, "SCHEDULE": "pingpong", "CLUSTER": 2, "CLUSTER_DIM": "N"},
                  {"BN": 160, "EPILOGUE": "smem", "CLUSTER": 2}, {"BN": 224, "BK": 128, "QSIZE": 2}):
        k = fam.default | extra
        assert not fam.violations(k, {}), extra
        report = builder.build(space.render("wgmma_cluster", k), "gemm")
        assert report.ok and report.spill_stores == 0 and report.spill_loads == 0, extra


@needs_nvcc
@pytest.mark.long
def test_the_slab_epilogue_leaves_room_for_four_stages_of_256_row_tiles(space, tmp_path):
    """EPILOGUE tma_slab stages 64 rows by 64 columns at a time (one 64 x 64 buffer a consumer), so 256 x 152
    tiles (cuBLAS's at 3000×5000×2000: 396 tiles, three whole waves on 132 SMs) keep four stages, where the
    split epilogue's 128-row parts leave room for three; a 256-row tile holds up to 160 accumulators a
    thread, and takes widths of 136 and 152 as well as the other tiles' steps of 16."""
    from harnesses.hopper_gemm.build import Builder

    fam = space.families["wgmma_cluster"]
    knobs = fam.default | {"BM": 256, "BN": 152, "QSIZE": 4, "CTAS": 0, "EPILOGUE": "tma_slab", "INFLIGHT": 0}
    assert not fam.violations(knobs, {"M": 3000, "N": 5000, "K": 2000})
    source = space.render("wgmma_cluster", knobs)
    launch = resolve(parse(source), 3000, 5000, 2000)
    assert launch.tensor_maps["tmC"]["box"] == [64, 64] and launch.tensor_maps["tmT"]["box"] == [64, 24]
    assert launch.smem == 4 * (256 + 152) * 64 * 2 + 2 * 64 * 64 * 2 + 1024 + 16 * 4 <= 232448
    assert "2 slabs of 64 rows, each in 3 column parts" in source
    assert "rows 64 to 128, columns 128 to 152: the 24-column tail" in source and "row0 + 64);" in source
    # The split epilogue's parts of 128 rows do not fit beside four stages; three fit.
    split = knobs | {"EPILOGUE": "tma_split"}
    assert any("227 KB" in r for r in fam.violations(split, {}))
    assert not fam.violations(split | {"QSIZE": 3}, {})
    # At most 160 accumulators a thread: 256 x 168 is refused, as is any 256-row tile past 160 columns.
    assert any("160 at BM 256" in r for r in fam.violations(knobs | {"BN": 168}, {}))
    harness, _ = harness_at(3000, 5000, 2000)
    assert harness.fit(source).tile == (256, 152) and harness.fit(source).waves == 3.0
    builder = Builder(tmp_path)
    # Widths between the steps of 16 are for 256-row tiles only.
    assert any("steps of 16" in r for r in fam.violations(knobs | {"BM": 192, "CONSUMER_REGS": 160}, {}))
    for extra in ({}, {"BN": 160, "INFLIGHT": 1, "CTAS": 128}, {"BN": 136, "CLUSTER": 2, "CLUSTER_DIM": "N"},
                  {"BM": 128, "BN": 208}, {"BM": 64, "BN": 240, "SCHEDULE": "pingpong"},
                  {"BM": 192, "BN": 176, "CONSUMER_REGS": 160}, {"BM": 128, "BN": 240, "CLUSTER": 2},
                  {"BN": 128, "STREAMK": 1, "PRODUCER_REGS": 40, "CONSUMER_REGS": 232}):
        k = knobs | extra
        assert not fam.violations(k, {}), extra
        report = builder.build(space.render("wgmma_cluster", k), "gemm")
        assert report.ok and report.spill_stores == 0 and report.spill_loads == 0, extra


def test_shape_knobs_must_be_knobs():
    from autodiscovery.agents.space import Family

    with pytest.raises(ValueError, match="shape_knobs names TILE"):
        Family(rung=1, summary="s", template="t.j2", knobs={"BM": [64]}, default={"BM": 64}, shape_knobs=["TILE"])


def test_every_measurement_states_the_other_cublas():
    """Beside its objective a run states the other cuBLAS, where its lineage, ladder and reports are read:
    × best Lt beside × cuBLAS (cublasGemmEx), × GemmEx beside × best Lt; never its objective twice."""
    from harnesses.hopper_gemm import HopperGemmHarnessBestLt

    cols = {c.key: c for c in HopperGemmHarness.columns}
    lt = {c.key: c for c in HopperGemmHarnessBestLt.columns}
    vs = {"gemmex": {"median": 1.02}, "best_lt": {"median": 0.97}}
    assert cols["x_best_lt"].value({"baseline": "gemmex", "vs": vs}) == 0.97 and "x_gemmex" not in cols
    assert lt["x_gemmex"].value({"baseline": "best_lt", "vs": vs}) == 1.02 and "x_best_lt" not in lt
    assert lt["x_gemmex"].views == cols["x_best_lt"].views and {"lineage", "ladder"} <= lt["x_gemmex"].views
    assert cols["x_best_lt"].value({"baseline": "gemmex"}) is None  # measured before both were timed
    assert cols["x_best_lt"].named(0.97) == "0.970× best Lt" and lt["x_gemmex"].named(1.02) == "1.020× GemmEx"


def test_three_consumer_warpgroups_cover_a_192_row_tile(space):
    """BM 192 (cooperative) takes three consumer warpgroups of 64 rows, 512 threads, a register split
    of its own; the split epilogue of a 192-column tile goes out in three 64-column parts."""
    fam = space.families["wgmma_cluster"]
    knobs = fam.default | {"BM": 192, "BN": 192, "CONSUMER_REGS": 160, "CTAS": 0}
    assert not fam.violations(knobs, dict(zip("MNK", MID)))
    source = space.render("wgmma_cluster", knobs)
    launch = resolve(parse(source), *MID)
    assert launch.block == (512, 1, 1) and launch.tile == (192, 192) and launch.grid == (132, 1, 1)
    assert "CONSUMERS = 3" in source and "setmaxnreg.inc.sync.aligned.u32 160" in source
    assert "columns 128 to 192: 1 swizzled 64-column box" in source and "to 256" not in source
    assert "tail" not in source and "tmT" not in source
    assert launch.smem == 4 * 384 * 64 * 2 + 192 * 192 * 2 // 3 + 1024 + 16 * 4
    assert any("at most 160 each" in r for r in fam.violations(knobs | {"BN": 256}, {}))
    assert any("64K-register file" in r for r in fam.violations(knobs | {"CONSUMER_REGS": 232}, {}))
    assert any("232 or 240" in r for r in fam.violations(fam.default | {"CONSUMER_REGS": 160}, {}))


STREAM_K = {"STREAMK": 1, "CTAS": 0, "PRODUCER_REGS": 40, "CONSUMER_REGS": 232}


def test_stream_k_states_a_workspace_and_its_fit_counts_the_fixup(space):
    """STREAMK 1: the grid is the CTAs (not the tiles), a workspace holds a partial tile and flags for each,
    and the fit shares the last waves evenly but charges the partials' round trip, which at 3000×5000×2000
    outweighs the 0.36 wave it saves (measured: 0.760× against 0.884× cuBLAS)."""
    fam = space.families["wgmma_cluster"]
    knobs = fam.default | STREAM_K
    harness, _ = harness_at(3000, 5000, 2000)
    source = space.render("wgmma_cluster", knobs)
    launch = harness.check(source)
    assert launch.stream_k and launch.grid == (132, 1, 1) and "W" in launch.args
    assert launch.workspace == 132 * (128 * 256 * 4 + 16)
    sk, dp = harness.fit(source), harness.fit(space.render("wgmma_cluster", fam.default | {"CTAS": 0}))
    assert sk.stream_k and not dp.stream_k and "shared by k-iterations (stream-K), 3.64 tiles' work" in sk.describe()
    assert sk.estimate > dp.estimate
    # Whole waves: nothing to share, the fit is the plain one.
    square, _ = harness_at(4096, 4096, 4224)
    even = square.fit(space.render("wgmma_cluster", fam.default | STREAM_K | {"CTAS": 128}))
    assert not even.stream_k and even.per_slot == 4
    # Refused: clusters of two, ping-pong consumers, a producer of 24 registers.
    assert fam.violations(knobs | {"CLUSTER": 2}, {}) and fam.violations(knobs | {"PRODUCER_REGS": 24}, {})
    assert fam.violations(knobs | {"SCHEDULE": "pingpong", "BM": 64}, {})


@needs_nvcc
@pytest.mark.long
def test_stream_k_variants_compile_without_spills(space, tmp_path):
    from harnesses.hopper_gemm.build import Builder

    builder = Builder(tmp_path)
    fam = space.families["wgmma_cluster"]
    for extra in ({}, {"BM": 192, "BN": 192, "CONSUMER_REGS": 152}, {"EPILOGUE": "regs", "INFLIGHT": 0}):
        report = builder.build(space.render("wgmma_cluster", fam.default | STREAM_K | extra), "gemm")
        assert report.ok and report.spill_stores == 0 and report.spill_loads == 0, extra


SWAPPED = {"SWAP": 1, "QSIZE": 6}


def test_swapped_tiles_put_the_short_side_of_c_in_the_mma_n_dimension(space):
    """SWAP 1: B's rows are the MMA's 64-row slabs and A's BM rows its N dimension (16 to 256), so a tile
    may be as short as M; the manifest's tile stays BM×BN of C. Unswapped, BM stays 64 or 128."""
    fam = space.families["wgmma_splitk"]
    knobs = fam.default | SWAPPED | {"BM": 16, "BN": 64, "SPLIT": 2}
    assert not fam.violations(knobs, {})
    source = space.render("wgmma_splitk", knobs)
    assert "wgmma.mma_async.sync.aligned.m64n16k16" in source and "tmA: {tensor: A, box: [16, 64]" in source
    launch = resolve(parse(source), 16, 4096, 4096)
    assert launch.tile == (16, 64) and launch.grid == (64 * 2, 1, 1) and launch.cluster == (2, 1, 1)
    # Refused: a 16-row tile unswapped; swapped rows of B a consumer cannot own whole; an unsplit 16-row
    # tile's rows do not share out in whole 4-column pieces over 128 threads when they are too few.
    assert fam.violations(knobs | {"SWAP": 0}, {})
    assert fam.violations(knobs | {"BN": 64, "CONSUMERS": 2, "PRODUCER_REGS": 40, "CONSUMER_REGS": 232}, {})
    assert fam.violations(knobs | {"SPLIT": 8}, {})
    # Accumulators: 256 columns of A over 128 rows of B a consumer are 256 a thread, too many.
    assert fam.violations(fam.default | SWAPPED | {"BM": 256, "BN": 128, "SPLIT": 2}, {})
    assert not fam.violations(fam.default | SWAPPED | {"BM": 256, "BN": 128, "SPLIT": 2, "CONSUMERS": 2,
                                                       "PRODUCER_REGS": 40, "CONSUMER_REGS": 232, "QSIZE": 4}, {})


@needs_nvcc
@pytest.mark.long
def test_swapped_variants_compile_without_spills(space, tmp_path):
    from harnesses.hopper_gemm.build import Builder

    builder = Builder(tmp_path)
    fam = space.families["wgmma_splitk"]
    for extra in ({"BM": 16, "BN": 64, "SPLIT": 2}, {"BM": 16, "BN": 256, "SPLIT": 4}, {"BM": 128, "BN": 64, "SPLIT": 1},
                  {"BM": 256, "BN": 128, "SPLIT": 4, "CONSUMERS": 2, "PRODUCER_REGS": 40, "CONSUMER_REGS": 232,
                   "QSIZE": 4}):
        knobs = fam.default | SWAPPED | extra
        assert not fam.violations(knobs, {}), extra
        report = builder.build(space.render("wgmma_splitk", knobs), "gemm")
        assert report.ok and report.spill_stores == 0 and report.spill_loads == 0, extra


def test_a_memory_bound_shape_costs_at_least_one_pass_over_its_operands(space):
    """16×4096×4096 moves 33.8 MB and computes little: no configuration is rated faster than DRAM reads
    that once (2.85 TB/s), and one of 64 blocks is rated slower than one of 128 (a block pulls 40 GB/s)."""
    from harnesses.hopper_gemm.fit import PER_SM_STREAM_GBPS, STREAM_GBPS

    harness, _ = harness_at(16, 4096, 4096)
    fam = space.families["wgmma_splitk"]
    floor = 2 * (16 * 4096 + 4096 * 4096 + 16 * 4096) / (STREAM_GBPS * 1e3)
    few = harness.fit(space.render("wgmma_splitk", fam.default | SWAPPED | {"BM": 16, "BN": 64, "SPLIT": 1}))
    many = harness.fit(space.render("wgmma_splitk", fam.default | SWAPPED | {"BM": 16, "BN": 64, "SPLIT": 2}))
    assert (few.ctas, many.ctas) == (64, 128)
    assert many.estimate >= floor and few.estimate >= floor * STREAM_GBPS / (64 * PER_SM_STREAM_GBPS)
    assert few.estimate > many.estimate
    # At the square shape the floor is far below the MMAs' time: the fit is what it was.
    square, _ = harness_at(4096, 4096, 4096)
    assert square.fit(space.render("wgmma_cluster", space.families["wgmma_cluster"].default)).estimate > 3 * floor


def test_clusters_fill_only_the_slots_whole_clusters_fit_in(space):
    """Where the driver counts fewer blocks resident in clusters of four than SMs (a cluster stays in one
    GPC), 128 blocks of one an SM in clusters of four run in two rounds; in pairs they fit."""
    harness, _ = harness_at(16, 8192, 4096)
    fam = space.families["wgmma_splitk"]
    fours = space.render("wgmma_splitk", fam.default | SWAPPED | {"BM": 16, "BN": 256, "SPLIT": 4})
    pairs = space.render("wgmma_splitk", fam.default | SWAPPED | {"BM": 16, "BN": 256, "SPLIT": 2})
    free = harness.fit(fours)
    harness.cluster_slots = {"2": 132, "4": 120, "8": 112}
    bound = harness.fit(fours)
    assert free.ctas == bound.ctas == 128 and free.slots == 132  # 209 KB of shared memory: one block an SM
    assert (free.per_slot, bound.per_slot, bound.slots) == (1, 2, 120)
    assert bound.estimate > 1.3 * free.estimate  # the last 8 blocks read their share alone
    assert harness.fit(pairs).slots == 132


def test_l2_promotion_is_stated_in_the_operands_tensor_maps_and_rated_by_the_dram_floor(space):
    """L2_PROMO 256 puts l2_promotion 256 on A's and B's tensor maps (0 renders the maps as before); the
    fit's DRAM floor is faster for it, which tells where the operands stream from DRAM (128×28672×4096:
    more than FIT_EDGE) from where the MMAs set the time (4096³: nothing to speak of)."""
    from autodiscovery.agents.shape_order import FIT_EDGE

    fam = space.families["wgmma_cluster"]
    tile = fam.default | {"BM": 128, "BN": 224}
    plain, promoted = (space.render("wgmma_cluster", tile | {"L2_PROMO": p}) for p in (0, 256))
    assert "l2_promotion" not in plain and "brings the next stage's columns" in promoted
    maps = resolve(parse(promoted), 128, 28672, 4096).tensor_maps
    assert [maps[m]["l2_promotion"] for m in ("tmA", "tmB", "tmC")] == [256, 256, 0]
    assert resolve(parse(plain), 128, 28672, 4096).tensor_maps["tmA"]["l2_promotion"] == 0
    skinny, _ = harness_at(128, 28672, 4096)
    assert skinny.fit(plain).estimate > skinny.fit(promoted).estimate * (1 + FIT_EDGE)
    assert skinny.fit(promoted).describe().endswith("inside C, L2 fills promoted to 256 bytes")
    assert "promoted" not in skinny.fit(plain).describe()
    square, _ = harness_at(4096, 4096, 4096)
    square_plain, square_promoted = (space.render("wgmma_cluster", fam.default | {"L2_PROMO": p}) for p in (0, 256))
    assert square.fit(square_plain).estimate < square.fit(square_promoted).estimate * 1.001
    # The split family's shapes stream their operands: it promotes by default.
    assert "l2_promotion: 256" in space.render("wgmma_splitk", space.families["wgmma_splitk"].default)


