"""Reading GPGPU-Sim / Accel-Sim output: statistics, the echoed configuration, crashes."""

from __future__ import annotations

import re

ECHO_RE = re.compile(r"^(-[\w:]+)\s+(\S+)(?:\s+#.*)?$")
STAT_RE = {
    "cycles": re.compile(r"^gpu_tot_sim_cycle\s*=\s*(\d+)", re.M),
    "insn": re.compile(r"^gpu_tot_sim_insn\s*=\s*(\d+)", re.M),
    "ipc": re.compile(r"^gpu_tot_ipc\s*=\s*([\d.]+)", re.M),
    "smem_bank_conflicts": re.compile(r"^gpgpu_n_shmem_bkconflict\s*=\s*(\d+)", re.M),
    "stall_shd_mem": re.compile(r"^gpgpu_n_stall_shd_mem\s*=\s*(\d+)", re.M),
    "stall_smem_bank": re.compile(r"^gpgpu_stall_shd_mem\[s_mem\]\[bk_conf\]\s*=\s*(\d+)", re.M),
    "stall_gmem_resource": re.compile(r"^gpgpu_stall_shd_mem\[gl_mem\]\[resource_stall\]\s*=\s*(\d+)", re.M),
    "l1_miss_rate": re.compile(r"L1D_total_cache_miss_rate\s*=\s*([\d.]+)"),
    "l2_miss_rate_total": re.compile(r"L2_total_cache_miss_rate\s*=\s*([\d.]+)"),
}
WARP_RE = re.compile(r"^Stall:(\d+)\s+W0_Idle:(\d+)\s+W0_Scoreboard:(\d+)", re.M)
L2_RE = re.compile(r"L2_cache_stats_breakdown\[(GLOBAL_ACC_[RW])\]\[(\w+)\]\s*=\s*(\d+)")
DRAM_RE = re.compile(r"n_rd=(\d+).*?n_write=(\d+)")
LIMIT_RE = re.compile(r"CTA/core = (\d+), limited by: ([\w ]+)")
CHECK_RE = re.compile(r"(?:AUTODISCOVERY_CHECK|->)\s+(PASS|FAIL)")
KERNEL_RE = re.compile(r"^kernel_launch_uid = (\d+)", re.M)
EXIT = "*** exit detected ***"


def echoed_config(log: str) -> dict[str, str]:
    """The option values the simulator printed at start-up (its view of the configuration)."""
    out: dict[str, str] = {}
    started = False
    for line in log.splitlines():
        if "Configuration options:" in line:
            started = True
            continue
        if started and (line.startswith("GPGPU-Sim PTX") or line.startswith("kernel_name")):
            break
        if not started:
            continue
        m = ECHO_RE.match(line.strip())
        if m:
            out.setdefault(m.group(1), m.group(2))
    return out


def echo_mismatches(log: str, requested: dict[str, str]) -> list[str]:
    """Options whose echoed value differs from what the candidate asked for."""
    echo = echoed_config(log)
    bad = []
    for key, want in requested.items():
        got = echo.get(key)
        if got is None or got.split(":")[0] != want.split(":")[0]:
            bad.append(f"{key}: asked {want}, simulator used {got}")
    return bad


def parse(log: str) -> dict:
    stats: dict = {}
    for name, rx in STAT_RE.items():
        found = rx.findall(log)
        if found:
            stats[name] = float(found[-1]) if "." in found[-1] else int(found[-1])
    if m := WARP_RE.findall(log):
        stall, idle, scoreboard = map(int, m[-1])
        stats["warp_stalls"] = {"stall": stall, "idle": idle, "scoreboard": scoreboard}
    l2: dict[str, int] = {}
    for _kind, what, n in L2_RE.findall(log):
        l2[what] = l2.get(what, 0) + int(n)
    if l2.get("TOTAL_ACCESS"):
        stats["l2_accesses"] = l2["TOTAL_ACCESS"]
        stats["l2_miss_rate"] = round((l2.get("MISS", 0) + l2.get("SECTOR_MISS", 0)) / l2["TOTAL_ACCESS"], 4)
    elif "l2_miss_rate_total" in stats:
        stats["l2_miss_rate"] = stats["l2_miss_rate_total"]
    stats.pop("l2_miss_rate_total", None)
    dram = DRAM_RE.findall(log)
    if dram:
        stats["dram_reads"] = sum(int(r) for r, _ in dram)
        stats["dram_writes"] = sum(int(w) for _, w in dram)
    if m := LIMIT_RE.findall(log):
        stats["ctas_per_sm"], stats["occupancy_limiter"] = int(m[-1][0]), m[-1][1].strip()
    if m := CHECK_RE.findall(log):
        stats["check"] = m[-1]
    if uids := KERNEL_RE.findall(log):
        stats["kernels"] = len(set(uids))
    stats["exit_detected"] = EXIT in log
    return stats


DOCTOR_HINT = "; `autodiscovery doctor` checks the simulator for the WMMA operand fix"
"""Said with a segmentation fault: a simulator built without the fix dies so on every WMMA kernel."""


def crashed(returncode: int | None, log: str) -> str | None:
    """Why a simulation counts as crashed, or None."""
    if returncode is not None and returncode != 0:
        sig = f"signal {-returncode}" if returncode < 0 else f"exit code {returncode}"
        if returncode in (139, -11):  # SIGSEGV: as the shell reports it, or as the process died of it
            sig += f" (segmentation fault{DOCTOR_HINT})"
        return f"simulator ended with {sig}"
    if EXIT not in log:
        return "the simulator never printed '*** exit detected ***'"
    return None
