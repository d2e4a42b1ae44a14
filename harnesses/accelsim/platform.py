"""The whole simulated GPU: every gpgpusim.config option of the 32-SM A100-class platform, as a model.

The values are those of GPGPU-Sim's public SM80_A100 configuration (configs/tested-cfgs/SM80_A100 in
gpgpu-sim_distribution), with these deliberate changes: 32 SMs instead of 108, the edge part this
campaign designs, and two statistics the harness does not read switched off (they cost a quarter of
the simulation time and no cycle). Each section is a model and each field one option, documented where it is declared; the
searched knobs (`Architecture`) replace their fields before the file is written, so a run needs no
config file of anyone's. A user's own file (`harness.base_config`) stays an option: the knobs are then
appended to it as overrides.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field


def opt(default: Any, option: str) -> Any:
    return Field(default, json_schema_extra={"option": option})


class Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    def options(self) -> list[tuple[str, str, str]]:
        """(option, value as written, description) in declaration order."""
        out = []
        for name, field in type(self).model_fields.items():
            value = getattr(self, name)
            extra = field.json_schema_extra
            assert isinstance(extra, dict), f"{name}: every field of the platform model names its option"
            out.append((str(extra["option"]), str(value), (field.description or "").strip()))
        return out


class Functional(Section):
    """Functional simulation"""

    instruction_classification: int = opt(0, "-gpgpu_ptx_instruction_classification")
    """Per-instruction-class statistics: off (they slow the simulation and nothing reads them)."""
    sim_mode: int = opt(0, "-gpgpu_ptx_sim_mode")
    """0: performance (cycle-level) simulation; 1 would be functional only, with no cycle counts."""
    force_max_capability: int = opt(80, "-gpgpu_ptx_force_max_capability")
    """Use the PTX of compute capability 8.0 from the program's fat binary."""
    convert_to_ptxplus: int = opt(0, "-gpgpu_ptx_convert_to_ptxplus")
    """Simulate the PTX itself, not SASS converted to PTXPlus."""
    save_converted_ptxplus: int = opt(0, "-gpgpu_ptx_save_converted_ptxplus")
    """No PTXPlus file is written."""


class Limits(Section):
    """Device limits and launch"""

    stack_size_limit: int = opt(1024, "-gpgpu_stack_size_limit")
    """Per-thread stack in bytes (cudaLimitStackSize)."""
    heap_size_limit: int = opt(8388608, "-gpgpu_heap_size_limit")
    """Device malloc heap in bytes (8 MiB, CUDA's default)."""
    runtime_sync_depth_limit: int = opt(2, "-gpgpu_runtime_sync_depth_limit")
    """Dynamic-parallelism sync depth."""
    runtime_pending_launch_count_limit: int = opt(2048, "-gpgpu_runtime_pending_launch_count_limit")
    """Dynamic-parallelism pending launches."""
    kernel_launch_latency: int = opt(5000, "-gpgpu_kernel_launch_latency")
    """Cycles from a kernel's launch to its first block. They are counted inside gpu_sim_cycle (a launch
    latency of 0 gives exactly 5,000 fewer cycles for the same kernel), so the harness reports kernel
    cycles without them beside the total."""
    tb_launch_latency: int = opt(0, "-gpgpu_TB_launch_latency")
    """Cycles to launch each thread block."""
    max_concurrent_kernel: int = opt(128, "-gpgpu_max_concurrent_kernel")
    """Kernels resident at once (A100: 128)."""
    compute_capability_major: int = opt(8, "-gpgpu_compute_capability_major")
    """Compute capability reported to the program: 8.0."""
    compute_capability_minor: int = opt(0, "-gpgpu_compute_capability_minor")
    """Compute capability, minor number."""


class Chip(Section):
    """High-level organisation and clocks"""

    n_clusters: int = opt(32, "-gpgpu_n_clusters")
    """SM clusters: 32 for this edge part (the A100 has 108); the `sms` knob sets it."""
    n_cores_per_cluster: int = opt(1, "-gpgpu_n_cores_per_cluster")
    """One SM per cluster, as in the A100 configuration."""
    n_mem: int = opt(40, "-gpgpu_n_mem")
    """Memory channels (A100: 5 HBM2 stacks of 8 channels)."""
    n_sub_partition_per_mchannel: int = opt(4, "-gpgpu_n_sub_partition_per_mchannel")
    """L2 slices per memory channel (160 slices in all)."""
    clock_domains: str = opt("1410:1410:1410:1512", "-gpgpu_clock_domains")
    """Core:interconnect:L2:DRAM clocks in MHz (the A100's 1410 MHz boost clock; 1512 MHz HBM2 command
    clock)."""


class Core(Section):
    """SM pipeline"""

    shader_registers: int = opt(65536, "-gpgpu_shader_registers")
    """32-bit registers per SM (256 KB; A100: 64K); the `registers_per_sm` knob sets it."""
    registers_per_block: int = opt(65536, "-gpgpu_registers_per_block")
    """Registers one block may use."""
    occupancy_sm_number: int = opt(80, "-gpgpu_occupancy_sm_number")
    """The SM version whose occupancy rules apply (sm_80)."""
    shader_core_pipeline: str = opt("2048:32", "-gpgpu_shader_core_pipeline")
    """Threads per SM : warp size (2048 threads, 64 warps)."""
    shader_cta: int = opt(32, "-gpgpu_shader_cta")
    """Resident blocks per SM."""
    simd_model: int = opt(1, "-gpgpu_simd_model")
    """SIMT stack with post-dominator reconvergence."""
    pipeline_widths: str = opt("4,4,4,4,4,4,4,4,4,4,8,4,4", "-gpgpu_pipeline_widths")
    """Widths of ID_OC_SP, DP, INT, SFU, MEM, OC_EX_SP, DP, INT, SFU, MEM, EX_WB, ID_OC_TENSOR, OC_EX_TENSOR."""
    num_sp_units: int = opt(4, "-gpgpu_num_sp_units")
    """FP32 units: one per sub-core."""
    num_sfu_units: int = opt(4, "-gpgpu_num_sfu_units")
    """Special-function units."""
    num_dp_units: int = opt(4, "-gpgpu_num_dp_units")
    """FP64 units."""
    num_int_units: int = opt(4, "-gpgpu_num_int_units")
    """Integer units."""
    tensor_core_avail: int = opt(1, "-gpgpu_tensor_core_avail")
    """The SM has tensor cores."""
    num_tensor_core_units: int = opt(4, "-gpgpu_num_tensor_core_units")
    """Tensor cores per SM: one per sub-core (A100: 4 third-generation tensor cores per SM)."""


class Latencies(Section):
    """Instruction latencies and initiation intervals (ADD, MAX, MUL, MAD, DIV)"""

    latency_int: str = opt("4,4,4,4,21", "-ptx_opcode_latency_int")
    """Integer latencies."""
    initiation_int: str = opt("2,2,2,2,2", "-ptx_opcode_initiation_int")
    """Integer initiation intervals."""
    latency_fp: str = opt("4,4,4,4,39", "-ptx_opcode_latency_fp")
    """FP32 latencies."""
    initiation_fp: str = opt("2,2,2,2,4", "-ptx_opcode_initiation_fp")
    """FP32 initiation intervals."""
    latency_dp: str = opt("6,6,6,6,330", "-ptx_opcode_latency_dp")
    """FP64 latencies."""
    initiation_dp: str = opt("4,4,4,4,130", "-ptx_opcode_initiation_dp")
    """FP64 initiation intervals."""
    latency_sfu: int = opt(23, "-ptx_opcode_latency_sfu")
    """SFU latency."""
    initiation_sfu: int = opt(8, "-ptx_opcode_initiation_sfu")
    """SFU initiation interval."""
    latency_tensor: int = opt(25, "-ptx_opcode_latency_tesnor")
    """Tensor-core (WMMA) latency; the option is spelled so by the simulator. The `tensor_latency` knob."""
    initiation_tensor: int = opt(16, "-ptx_opcode_initiation_tensor")
    """Cycles between two MMAs on one tensor unit; the `tensor_initiation` knob (must not exceed the latency)."""


class OperandCollector(Section):
    """Sub-cores, operand collectors and register banks"""

    sub_core_model: int = opt(1, "-gpgpu_sub_core_model")
    """Each scheduler has its own register file slice and units (Volta and later)."""
    specialized_operand_collector: int = opt(0, "-gpgpu_enable_specialized_operand_collector")
    """Generic operand collectors instead of per-unit ones."""
    collector_units_gen: int = opt(8, "-gpgpu_operand_collector_num_units_gen")
    """Generic collector units."""
    collector_in_ports_gen: int = opt(8, "-gpgpu_operand_collector_num_in_ports_gen")
    """Their input ports."""
    collector_out_ports_gen: int = opt(8, "-gpgpu_operand_collector_num_out_ports_gen")
    """Their output ports."""
    num_reg_banks: int = opt(32, "-gpgpu_num_reg_banks")
    """Register-file banks."""
    reg_file_port_throughput: int = opt(2, "-gpgpu_reg_file_port_throughput")
    """Register-file port throughput."""


class Scheduling(Section):
    """Warp scheduling"""

    num_sched_per_core: int = opt(4, "-gpgpu_num_sched_per_core")
    """Warp schedulers per SM."""
    scheduler: str = opt("lrr", "-gpgpu_scheduler")
    """Policy: lrr (loose round robin), gto (greedy then oldest), two_level_active; the `scheduler` knob."""
    max_insn_issue_per_warp: int = opt(1, "-gpgpu_max_insn_issue_per_warp")
    """Instructions a warp may issue per cycle."""
    dual_issue_diff_exec_units: int = opt(1, "-gpgpu_dual_issue_diff_exec_units")
    """Dual issue only to different execution units."""


class L1Shared(Section):
    """L1 data cache and shared memory (one 192 KB array per SM)"""

    adaptive_cache_config: int = opt(1, "-gpgpu_adaptive_cache_config")
    """What a kernel's shared memory leaves of the array is L1 cache."""
    shmem_option: str = opt("0,8,16,32,64,164", "-gpgpu_shmem_option")
    """Shared-memory carve-outs in KB."""
    unified_l1d_size: int = opt(192, "-gpgpu_unified_l1d_size")
    """The unified L1/shared array in KB."""
    l1_banks: int = opt(4, "-gpgpu_l1_banks")
    """L1 banks."""
    cache_dl1: str = opt("S:4:128:64,L:T:m:L:L,A:512:64,16:0,32", "-gpgpu_cache:dl1")
    """L1D: sectored, 4 sets x 64 ways x 128 B lines, 512 MSHRs."""
    l1_latency: int = opt(34, "-gpgpu_l1_latency")
    """L1 hit latency in cycles."""
    gmem_skip_l1d: int = opt(0, "-gpgpu_gmem_skip_L1D")
    """Global loads go through L1."""
    flush_l1_cache: int = opt(1, "-gpgpu_flush_l1_cache")
    """L1 flushed between kernels."""
    ejection_buffer_size: int = opt(32, "-gpgpu_n_cluster_ejection_buffer_size")
    """Cluster ejection buffer entries."""
    l1_cache_write_ratio: int = opt(0, "-gpgpu_l1_cache_write_ratio")
    """Share of L1 for writes (%)."""
    shmem_size: int = opt(167936, "-gpgpu_shmem_size")
    """Shared memory per SM in bytes (164 KB)."""
    shmem_size_default: int = opt(167936, "-gpgpu_shmem_sizeDefault")
    """The default carve-out in bytes."""
    shmem_per_block: int = opt(49152, "-gpgpu_shmem_per_block")
    """Static shared memory per block (48 KB)."""
    smem_latency: int = opt(28, "-gpgpu_smem_latency")
    """Shared-memory access latency in cycles."""
    shmem_num_banks: int = opt(32, "-gpgpu_shmem_num_banks")
    """Shared-memory banks; the `shmem_banks` knob."""
    shmem_limited_broadcast: int = opt(0, "-gpgpu_shmem_limited_broadcast")
    """Broadcast of one word to many lanes is not limited."""
    shmem_warp_parts: int = opt(1, "-gpgpu_shmem_warp_parts")
    """A warp's shared-memory access is handled whole."""
    coalesce_arch: int = opt(80, "-gpgpu_coalesce_arch")
    """Coalescing rules of sm_80."""


class L2(Section):
    """L2 cache and memory partitions"""

    cache_dl2: str = opt("S:128:128:16,L:B:m:L:X,A:192:4,32:0,32", "-gpgpu_cache:dl2")
    """Per slice: sectored, 128 sets x 16 ways x 128 B (256 KB; 40 MB over 160 slices)."""
    dl2_texture_only: int = opt(0, "-gpgpu_cache:dl2_texture_only")
    """L2 caches all data, not only textures."""
    dram_partition_queues: str = opt("64:64:64:64", "-gpgpu_dram_partition_queues")
    """Queue depths between interconnect, L2 and DRAM."""
    perf_sim_memcpy: int = opt(1, "-gpgpu_perf_sim_memcpy")
    """Host-to-device copies fill the L2, as on hardware."""
    memory_partition_indexing: int = opt(0, "-gpgpu_memory_partition_indexing")
    """Plain address-to-partition indexing."""
    l2_rop_latency: int = opt(200, "-gpgpu_l2_rop_latency")
    """Cycles through the L2 raster-op queue; the `l2_rop_latency` knob."""
    dram_latency: int = opt(190, "-dram_latency")
    """Fixed DRAM latency in cycles; the `dram_latency` knob."""


class OtherCaches(Section):
    """Instruction, texture and constant caches"""

    cache_il1: str = opt("N:64:128:16,L:R:f:N:L,S:2:48,4", "-gpgpu_cache:il1")
    """Instruction cache, 128 KB."""
    inst_fetch_throughput: int = opt(4, "-gpgpu_inst_fetch_throughput")
    """Instructions fetched per cycle."""
    tex_cache_l1: str = opt("N:4:128:256,L:R:m:N:L,T:512:8,128:2", "-gpgpu_tex_cache:l1")
    """Texture cache, 128 KB (legacy)."""
    const_cache_l1: str = opt("N:128:64:8,L:R:f:N:L,S:2:64,4", "-gpgpu_const_cache:l1")
    """Constant cache, 64 KB."""
    perfect_inst_const_cache: int = opt(1, "-gpgpu_perfect_inst_const_cache")
    """Instruction and constant caches always hit."""


class Interconnect(Section):
    """Interconnect (the simulator's built-in local crossbar)"""

    network_mode: int = opt(2, "-network_mode")
    """2: built-in local crossbar, so no .icnt file is read."""
    in_buffer_limit: int = opt(512, "-icnt_in_buffer_limit")
    """Input buffer entries."""
    out_buffer_limit: int = opt(512, "-icnt_out_buffer_limit")
    """Output buffer entries."""
    subnets: int = opt(2, "-icnt_subnets")
    """Request and reply networks."""
    flit_size: int = opt(40, "-icnt_flit_size")
    """Flit size in bytes."""
    arbiter_algo: int = opt(1, "-icnt_arbiter_algo")
    """iSLIP arbitration."""


class Dram(Section):
    """DRAM (HBM2)"""

    dram_scheduler: int = opt(1, "-gpgpu_dram_scheduler")
    """FR-FCFS."""
    frfcfs_queue_size: int = opt(64, "-gpgpu_frfcfs_dram_sched_queue_size")
    """FR-FCFS queue entries."""
    return_queue_size: int = opt(192, "-gpgpu_dram_return_queue_size")
    """Return queue entries."""
    n_mem_per_ctrlr: int = opt(1, "-gpgpu_n_mem_per_ctrlr")
    """Chips per controller."""
    buswidth: int = opt(16, "-gpgpu_dram_buswidth")
    """Bytes per channel per transfer (128-bit channels)."""
    burst_length: int = opt(2, "-gpgpu_dram_burst_length")
    """Burst length."""
    data_command_freq_ratio: int = opt(2, "-dram_data_command_freq_ratio")
    """Data rate over command rate (double data rate)."""
    mem_address_mask: int = opt(1, "-gpgpu_mem_address_mask")
    """Address mask scheme."""
    mem_addr_mapping: str = opt("dramid@8;00000000.00000000.00000000.00000000.0000RRRR.RRRRRRRR.RBBBCCCC.BCCSSSSS",
                                "-gpgpu_mem_addr_mapping")
    """Address bits to channel, row, bank, column."""
    timing_opt: str = opt("nbk=16:CCD=1:RRD=7:RCD=22:RAS=50:RP=22:RC=72:CL=22:WL=4:CDLR=5:WR=19:nbkgrp=4:CCDL=4:RTPL=7",
                          "-gpgpu_dram_timing_opt")
    """HBM2 timing: 16 banks in 4 groups, tRCD 22, tRAS 50, tRP 22, CL 22 ..."""
    dual_bus_interface: int = opt(1, "-dram_dual_bus_interface")
    """Separate row and column command buses."""
    bnk_indexing_policy: int = opt(0, "-dram_bnk_indexing_policy")
    """Bank indexing: plain."""
    bnkgrp_indexing_policy: int = opt(1, "-dram_bnkgrp_indexing_policy")
    """Bank groups from the lower bits, for bank-group parallelism."""


class Statistics(Section):
    """Statistics and power"""

    memlatency_stat: int = opt(0, "-gpgpu_memlatency_stat")
    """Memory-latency histograms off (A100 file: 14). Statistics only: with the per-line statistics below
    also off, the baseline simulates to the same 35,422 cycles in three quarters of the time."""
    runtime_stat: int = opt(500, "-gpgpu_runtime_stat")
    """Progress statistics every 500 cycles."""
    ptx_file_line_stats: int = opt(0, "-enable_ptx_file_line_stats")
    """Per-PTX-line statistics off (A100 file: 1); statistics only, like the histograms above."""
    visualizer_enabled: int = opt(0, "-visualizer_enabled")
    """No AerialVision log."""
    power_simulation_enabled: int = opt(0, "-power_simulation_enabled")
    """No power model in the simulator (the campaign's own cost estimates are in costs.py)."""


class Platform(BaseModel):
    """The simulated GPU, section by section."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    functional: Functional = Functional()
    limits: Limits = Limits()
    chip: Chip = Chip()
    core: Core = Core()
    latencies: Latencies = Latencies()
    operand_collector: OperandCollector = OperandCollector()
    scheduling: Scheduling = Scheduling()
    l1_shared: L1Shared = L1Shared()
    l2: L2 = L2()
    other_caches: OtherCaches = OtherCaches()
    interconnect: Interconnect = Interconnect()
    dram: Dram = Dram()
    statistics: Statistics = Statistics()

    def sections(self) -> list[Section]:
        return [getattr(self, name) for name in type(self).model_fields]

    def options(self) -> dict[str, str]:
        return {o: v for s in self.sections() for o, v, _ in s.options()}

    def with_options(self, values: dict[str, str]) -> Platform:
        """A copy with some options (by their simulator names) set; an unknown option is an error."""
        left = dict(values)
        parts = {}
        for name in type(self).model_fields:
            section = getattr(self, name)
            update = {}
            for field, info in type(section).model_fields.items():
                option = info.json_schema_extra["option"]
                if option in left:
                    kind = type(getattr(section, field))
                    update[field] = kind(left.pop(option))
            parts[name] = section.model_copy(update=update) if update else section
        if left:
            raise KeyError(f"not an option of the platform: {', '.join(sorted(left))}")
        return self.model_copy(update=parts)

    def render(self, title: str = "") -> str:
        """The whole gpgpusim.config: each section headed, each option with its description above it."""
        lines = ["# gpgpusim.config rendered by autodiscovery from the 32-SM A100-class platform model",
                 "# (harnesses/accelsim/platform.py; values of GPGPU-Sim's public SM80_A100 configuration)."]
        if title:
            lines.append(f"# {title}")
        for section in self.sections():
            lines += ["", f"# ==== {type(section).__doc__} ===="]
            for option, value, doc in section.options():
                lines += [f"# {' '.join(doc.split())}", f"{option} {value}"]
        return "\n".join(lines) + "\n"


STOCK = Platform()
