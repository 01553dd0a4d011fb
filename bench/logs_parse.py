"""Log parsing speed against ``grep -c 'step:'`` on the same file, in the same run.

Generates >= 1 GB (``--size-mb``) of realistic noisy multi-node verl GRPO console output (Ray prefixes, ANSI,
vLLM chatter, rollout dumps, tqdm bars, ``[repeated Nx across cluster]``; 3-decimal, repr and ``np.float64``
values) into a temporary directory (``--tmp``, default the system's: never the repository), reads it once to
warm the page cache, then times, each in its own process with its peak RSS (GNU ``time -f %M`` when installed,
else the child's rusage):

* ``grep -c 'step:' FILE`` (the baseline) and **parse**: every record of the file read into float64 values
  (``mlite.logs.iter_records``, what every command does before anything else), in ``--pairs`` alternating pairs
  (default 3), their medians compared;
* ``mlite logs export FILE --csv OUT`` (the CLI: parse, then one ``repr(float)`` CSV row per value);
* with ``--check``: ``mlite logs check FILE --json`` (parse, plus every event rule and failure keyword).

Prints wall and CPU seconds, each ratio to grep's (the CPU ratio is the one to read on a shared machine) and the
goals (parse within 3x grep's CPU time, issue #31; under 300 MB RSS), then deletes the directory (``--keep`` leaves
it). The Python children run with their bytecode compiled once beforehand (into the temporary directory, as an
installed package has it): with ``PYTHONDONTWRITEBYTECODE=1`` set, as on the lab's machines, every run would
compile every module again (~0.1 s CPU each).

    .venv/bin/python bench/logs_parse.py                 # 1 GB
    .venv/bin/python bench/logs_parse.py --size-mb 100   # quick
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from mlite.synth import write_bench_log  # noqa: E402 - after the sys.path line (a script run from bench/)

PARSE_CODE = (
    "import sys\n"
    "from mlite.logs import iter_records, resolve_inputs\n"
    "[src] = resolve_inputs([sys.argv[1]])\n"
    "n = v = 0\n"
    "for rec in iter_records(src):\n"
    "    n += 1\n"
    "    v += len(rec.values)\n"
    "print(n, v)\n"
)
"""The parse pass: every record, every value as float64, nothing written."""

GOAL_RATIO = 3.0
GOAL_RSS_MB = 300.0


TIME = shutil.which("time") or ("/usr/bin/time" if os.path.exists("/usr/bin/time") else None)


def _run(cmd: list[str], work: Path, stdout=subprocess.DEVNULL, env=None) -> tuple[float, float, float, bytes]:
    """Wall seconds, CPU seconds (user + system), peak RSS in MB and captured stdout of ``cmd``.

    The RSS comes from GNU time (``%M``) when installed: ``os.wait4`` on a child that Python forked would
    count the parent's pages the child had before its ``exec``. The CPU time is the child's with what it
    waited for (GNU time's own child), the figure to compare on a machine shared with other jobs, where the
    wall time mostly measures the others."""
    rss_file = work / "rss.txt"
    full = [TIME, "-f", "%M", "-o", str(rss_file), *cmd] if TIME else cmd
    t0 = time.perf_counter()
    p = subprocess.Popen(full, stdout=stdout, stderr=subprocess.PIPE, cwd=REPO, env=env)
    out = p.stdout.read() if p.stdout else b""
    err = p.stderr.read()
    _, status, usage = os.wait4(p.pid, 0)
    wall = time.perf_counter() - t0
    code = os.waitstatus_to_exitcode(status)
    p.returncode = code
    if code:
        sys.exit(f"{' '.join(cmd[:4])}... failed ({code}): {err.decode(errors='replace')[-500:]}")
    rss_kib = float(rss_file.read_text().split()[-1]) if TIME else usage.ru_maxrss  # KiB; see above
    return wall, usage.ru_utime + usage.ru_stime, rss_kib / 1024, out


def _line(what: str, wall: float, cpu: float, rss: float, size_mb: float, extra: str) -> None:
    print(
        f"{what:<21}{wall:8.2f} s wall {cpu:8.2f} s cpu  {size_mb / cpu:8.0f} MB/cpu-s  peak RSS {rss:7.1f} MB  "
        f"({extra})"
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size-mb", type=float, default=1024.0, help="log size to generate (default 1024)")
    ap.add_argument("--tmp", default=None, help="directory for the temporary files (default: system temp)")
    ap.add_argument("--keep", action="store_true", help="keep the generated log and CSV")
    ap.add_argument(
        "--noise",
        type=float,
        default=4.0,
        help="chatter per step (default 4: ~17%% of the bytes are metric lines; 40: ~2%%, like an agent-loop GRPO log)",
    )
    ap.add_argument("--check", action="store_true", help="also time `mlite logs check` (events too)")
    ap.add_argument("--pairs", type=int, default=3, help="alternating grep / parse pairs (default 3; medians)")
    args = ap.parse_args()

    grep = shutil.which("grep")
    if grep is None:
        sys.exit("grep not found: the baseline needs it")
    work = Path(tempfile.mkdtemp(prefix="mlite-bench-", dir=args.tmp))
    try:
        log = work / "verl_grpo_bench.log"
        t0 = time.perf_counter()
        info = write_bench_log(log, args.size_mb, noise=args.noise)
        gen_s = time.perf_counter() - t0
        size_mb = info["bytes"] / 1e6
        print(
            f"generated {size_mb:.0f} MB in {gen_s:.1f} s: {info['metric_lines']} metric lines "
            f"({100 * info['metric_bytes'] / info['bytes']:.1f}% of the bytes), the rest Ray/vLLM/tqdm noise"
        )
        with open(log, "rb") as f:  # warm the page cache so both tools read from memory
            while f.read(16 << 20):
                pass

        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        env["PYTHONPYCACHEPREFIX"] = str(work / "pyc")
        _run([sys.executable, "-c", "import mlite.cli, mlite.logs, numpy, msgspec"], work, env=env)  # compile once
        print(f"bytecode compiled once into {work / 'pyc'} (untimed); {args.pairs} alternating grep / parse pairs")
        pairs = []
        for _ in range(max(1, args.pairs)):
            g = _run([grep, "-c", "step:", str(log)], work, stdout=subprocess.PIPE)
            p = _run([sys.executable, "-c", PARSE_CODE, str(log)], work, stdout=subprocess.PIPE, env=env)
            pairs.append((g, p))
            print(f"  pair: grep {g[1]:.2f} s cpu, parse {p[1]:.2f} s cpu ({p[1] / g[1]:.2f}x)", flush=True)
        g_s, g_cpu, g_rss = (statistics.median(g[i] for g, _ in pairs) for i in range(3))
        p_s, p_cpu, p_rss = (statistics.median(p[i] for _, p in pairs) for i in range(3))
        g_out, p_out = pairs[0][0][3], pairs[0][1][3]
        _line("grep -c 'step:'", g_s, g_cpu, g_rss, size_mb, f"{int(g_out or 0)} lines; medians")
        _line(
            "parse (iter_records)",
            p_s,
            p_cpu,
            p_rss,
            size_mb,
            f"{int(p_out.split()[0])} records, {int(p_out.split()[1])} values; medians",
        )
        pair_ratio = statistics.median(p[1] / g[1] for g, p in pairs)
        csv = work / "out.csv"
        e_s, e_cpu, e_rss, _ = _run(
            [sys.executable, "-m", "mlite.cli", "logs", "export", str(log), "--csv", str(csv), "--no-progress"],
            work,
            env=env,
        )
        with open(csv, "rb") as fh:
            rows = sum(1 for _ in fh) - 1
        _line("mlite logs export", e_s, e_cpu, e_rss, size_mb, f"{rows} rows, CSV {csv.stat().st_size / 1e6:.0f} MB")
        timed = [("parse", p_s, p_cpu, "every value to float64"), ("export", e_s, e_cpu, "+ one repr(float) per value")]
        if args.check:
            c_s, c_cpu, c_rss, _ = _run(
                [sys.executable, "-m", "mlite.cli", "logs", "check", str(log), "--json", "--no-progress"],
                work,
                env=env,
            )
            _line("mlite logs check", c_s, c_cpu, c_rss, size_mb, "events too")
            timed.append(("check", c_s, c_cpu, "+ every failure keyword and event rule"))
        for what, wall, cpu, why in timed:
            goal = (
                f"  goal <= {GOAL_RATIO:.0f}x: {'met' if cpu / g_cpu <= GOAL_RATIO else 'NOT met'}"
                if what == "parse"
                else ""
            )
            print(f"ratio {what} / grep: {wall / g_s:5.1f}x wall, {cpu / g_cpu:5.1f}x cpu  ({why}){goal}")
        print(f"parse / grep cpu, median of the {len(pairs)} pairs' ratios: {pair_ratio:.2f}x")
        for what, rss in (("parse", p_rss), ("export", e_rss)):
            print(
                f"{what} peak RSS: {rss:.0f} MB (goal < {GOAL_RSS_MB:.0f} MB: {'met' if rss < GOAL_RSS_MB else 'NOT met'})"
            )
    finally:
        if args.keep:
            print(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
