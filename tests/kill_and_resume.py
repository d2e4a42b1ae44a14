"""On a GPU: kill -9 a real run at three points, resume it each time, compare with an uninterrupted run.

    python tests/kill_and_resume.py OUT_DIR [--set ...]

The points: while a candidate is measured, during a head-to-head (measured, not yet decided), and while
a new batch is built. Prints both walks side by side and what each database holds.
"""
import os
import signal
import sqlite3
import subprocess
import sys
import time

OUT = sys.argv[1]
os.makedirs(OUT, exist_ok=True)
ARGS = ["--campaign", "hopper-gemm", "--set", "budget.candidates=10", *sys.argv[2:], "--quiet"]

def cli(db, *args, **kw):
    return subprocess.Popen([sys.executable, "-m", "autodiscovery", "--db", db, "run", *args], **kw)

def q(db, sql):
    try:
        c = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)
        try:
            return c.execute(sql).fetchall()
        finally:
            c.close()
    except sqlite3.Error:
        return []

POINTS = {
    "measuring": "SELECT 1 FROM evaluations e JOIN candidates c ON c.id=e.candidate_id "
                 "WHERE e.status='running' AND e.kind='benchmark' AND c.seq>=2",
    "head_to_head": "SELECT 1 FROM evaluations WHERE status='running' AND kind='head_to_head'",
    "building": "SELECT 1 FROM candidates c WHERE c.status='proposed' AND c.seq>=6 "
                "AND NOT EXISTS (SELECT 1 FROM evaluations e WHERE e.candidate_id=c.id)",
}

def walk(db):
    rows = q(db, "SELECT c.seq, c.family, c.knobs, c.status, d.verdict FROM candidates c "
                 "LEFT JOIN decisions d ON d.candidate_id=c.id ORDER BY c.seq")
    return rows

t0 = time.time()
whole = f"{OUT}/whole.db"
p = cli(whole, *ARGS, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
print("uninterrupted:", p.communicate()[0].strip()[-300:], f"({time.time()-t0:.0f} s)", flush=True)

cut = f"{OUT}/killed.db"
log = []
for i, (name, sql) in enumerate(POINTS.items()):
    args = ARGS if i == 0 else ["--resume", "1", "--quiet"]
    p = cli(cut, *args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    t = time.time()
    while p.poll() is None and not q(cut, sql) and time.time() - t < 150:
        time.sleep(0.05)
    if p.poll() is not None:
        log.append(f"{name}: the run ended before the point was reached")
        continue
    os.kill(p.pid, signal.SIGKILL)
    p.wait()
    time.sleep(1.0)
    left = subprocess.run(["pgrep", "-f", "harnesses.hopper_gemm.worker"], capture_output=True, text=True).stdout.split()
    state = q(cut, "SELECT count(*), sum(status='proposed'), sum(status='measured') FROM candidates")[0]
    running = q(cut, "SELECT kind FROM evaluations WHERE status='running'")
    log.append(f"kill -9 while {name} at {time.time()-t:.1f}s: candidates {state[0]} (proposed {state[1]}, measured {state[2]}), "
               f"evaluations left running {[r[0] for r in running]}, evaluation children alive after 1 s: {len(left)}")
p = cli(cut, "--resume", "1", "--quiet", stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
print("resumed to the end:", p.communicate()[0].strip()[-300:], flush=True)
print("\n".join(log))
a, b = walk(whole), walk(cut)
print(f"{'seq':>3} | {'uninterrupted':<58} | {'killed 3x, resumed':<58}")
for i in range(max(len(a), len(b))):
    fa = f"{a[i][1]} {a[i][3]} {a[i][4] or ''}" if i < len(a) else ""
    fb = f"{b[i][1]} {b[i][3]} {b[i][4] or ''}" if i < len(b) else ""
    same = "  " if i < len(a) and i < len(b) and a[i][1:3] == b[i][1:3] and a[i][3] == b[i][3] else "≠ "
    print(f"{i:>3} | {fa:<58} | {fb:<58} {same}")
for db in (whole, cut):
    r = q(db, "SELECT status, stop_reason, elapsed_s, best_candidate_id, owner FROM runs WHERE id=1")[0]
    best = q(db, f"SELECT seq, family, knobs FROM candidates WHERE id={r[3]}")[0]
    dec = q(db, "SELECT count(*), count(distinct candidate_id) FROM decisions")[0]
    interrupted = q(db, "SELECT count(*) FROM evaluations WHERE status='interrupted'")[0][0]
    counted = q(db, "SELECT count(*) FROM candidates WHERE status!='proposed'")[0][0]
    print(f"{os.path.basename(db)}: {r[0]} ({r[1]}), {r[2]:.0f} s, best #{best[0]} {best[1]} {best[2]}, decisions {dec[0]} "
          f"(distinct {dec[1]}), counted {counted}, interrupted evaluations {interrupted}, lease {r[4]}")
