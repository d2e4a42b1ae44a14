#!/usr/bin/env python3
"""Stands in for a simulated program: replays a recorded GPGPU-Sim log, echoing ./gpgpusim.config.

Usage (as the harness runs a program): standin_sim.py M N K [TILES], with STANDIN_LOG naming the recorded log,
STANDIN_RC the exit code to end with (negative: the signal to die of), and STANDIN_STALE=1 to echo the
recorded configuration instead of the one in the working folder (a simulator that ignored the overrides). Like the real program it
reads A.bin and B.bin and writes C.bin = A B^T; STANDIN_OUTPUT=wrong changes one output, =none writes
none. Given TILES (a sample of the grid's first tiles), it adds STANDIN_TILE_CYCLES cycles a tile to the
recorded count and leaves the lower half of C unwritten (NaN), as a sample's untouched tiles are;
STANDIN_CTAS says the SM held that many blocks at once (`CTA/core`).
"""
import os
import re
import sys
from pathlib import Path

log = Path(os.environ["STANDIN_LOG"]).read_text(errors="replace").splitlines()
config = {}
for line in Path("gpgpusim.config").read_text().splitlines():
    line = line.split("#", 1)[0].strip()
    if line.startswith("-"):
        key, _, value = line.partition(" ")
        config[key] = value.strip()
out, in_echo = [], False
for line in log:
    if "Configuration options:" in line:
        in_echo = True
    elif in_echo and line.startswith("GPGPU-Sim PTX"):
        in_echo = False
    if in_echo and line.startswith("-") and not os.environ.get("STANDIN_STALE"):
        key = line.split()[0]
        if key in config:
            line = f"{key} {config[key]} # replayed"
    out.append(line)
rounds = int(sys.argv[4]) if len(sys.argv) > 4 else 0  # the tiles asked for
if rounds and os.environ.get("STANDIN_TILE_CYCLES"):
    extra = rounds * int(os.environ["STANDIN_TILE_CYCLES"])
    out = [f"gpu_tot_sim_cycle = {int(line.split('=')[1]) + extra}" if line.startswith("gpu_tot_sim_cycle") else line
           for line in out]
if os.environ.get("STANDIN_CTAS"):
    out = [re.sub(r"CTA/core = \d+", f"CTA/core = {os.environ['STANDIN_CTAS']}", line) for line in out]
print("\n".join(out))
print(f"argv={' '.join(sys.argv[1:])} ld_library_path={os.environ.get('LD_LIBRARY_PATH', '')}")
print("runtime=" + ",".join(os.environ.get(k, "-") for k in ("PTX_SIM_USE_PTX_FILE", "PTX_SIM_KERNELFILE",
                                                             "CUOBJDUMP_SIM_FILE")))
M, N, K = (int(x) for x in sys.argv[1:4])
if Path("A.bin").exists() and os.environ.get("STANDIN_OUTPUT", "right") != "none":
    import numpy as np

    a = np.fromfile("A.bin", dtype=np.float16).reshape(M, K).astype(np.float32)
    b = np.fromfile("B.bin", dtype=np.float16).reshape(N, K).astype(np.float32)
    c = a @ b.T
    if os.environ.get("STANDIN_OUTPUT") == "wrong":
        c[3, 5] += 0.25
    if rounds:
        c[M // 2:] = np.nan
    c.astype(np.float32).tofile("C.bin")
rc = int(os.environ.get("STANDIN_RC", "0"))
if rc < 0:  # die of that signal, as a crashing simulator does
    import signal

    sys.stdout.flush()
    signal.signal(-rc, signal.SIG_DFL)
    os.kill(os.getpid(), -rc)
sys.exit(rc)
