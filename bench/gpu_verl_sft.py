"""verl's SFT trainer with the lite engine on one GPU: tokens/s and peak memory of ``mlite run --trainer verl-sft``.

    python3 bench/gpu_verl_sft.py --out DIR                          # on the GPU: DIR/gpu_verl_sft.csv + _raw.json
    python3 bench/gpu_verl_sft.py --report bench/results/gpu_verl_sft_raw.json --csv bench/results/gpu_verl_sft.csv
    python3 bench/gpu_verl_sft.py --out /tmp/x --device cpu --tiny   # the same code path on CPU, a tiny model

The run is the kit's real path: ``python -m mlite run --trainer verl-sft`` (torchrun, ``verl.trainer.sft_trainer``,
``engine=lite``) on the ~1.1 B dense model of the other GPU rows (bench/gpu_configs.py ``DENSE_1B``, random init,
written to ``model_dense1b_from_gpu_configs.json``), the kit's tiny SFT dataset, verl's dynamic batching with
4096-token micro-batches (``data.max_token_len_per_gpu``) and ``--train-batch-size`` conversations a step.

Timing: verl's file logger writes one unbuffered line per step to ``metrics.jsonl``; this script polls it and stamps
each line as it arrives. tokens/s = the tokens verl logged (``train/global_tokens``) of the steps after the warm-up
ones / the wall-clock time between the last warm-up step's line and the last step's line (whole verl steps: data
loading, batching, the engine's forward/backward and optimizer). Peak memory is the run's own record: verl's
``perf/max_memory_allocated_gb`` / ``perf/max_memory_reserved_gb`` (``torch.cuda.max_memory_allocated`` /
``max_memory_reserved`` of rank 0), next to ``mlite.memory``'s estimate of the same run
(:func:`mlite.launch.memory_check.estimate_for` of :func:`run_config`, the RunConfig the run's flags come from),
derived by the report with today's estimator. verl's own ``train/mfu`` is kept as reported. The CSV is a function of
the raw JSON alone (``--report``; ``tests/test_bench_results.py`` re-runs it and fails when the CSV is stale).

Results are written as they come: the raw JSON after every logged step, the CSV as soon as the timed steps are in
(before verl's end-of-run checkpoint), again at the end. A failure (run failed, steps missing, deadline, SIGTERM)
prints one ``gpu_verl_sft: FAILED ...`` line with the run's last log lines and exits 1; the rows measured so far stay.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from gpu_configs import DENSE_1B, cpu_sized  # noqa: E402  (bench/ is not a package)
from result_csv import write_measurements  # noqa: E402

from mlite.rundir import COMPLETED, CONSOLE_FILE, LOG_FILE, METRICS_FILE, STATUS_FILE  # noqa: E402  (after sys.path)
from mlite.units import GIB  # noqa: E402  (after the sys.path lines)

REPORT_CMD = (
    "python3 bench/gpu_verl_sft.py --report bench/results/gpu_verl_sft_raw.json --csv bench/results/gpu_verl_sft.csv"
)
"""The step that turns the raw JSON into the CSV (tests/test_bench_results.py re-runs it)."""
PAIRS_REPORT_CMD = "python3 bench/gpu_verl_sft.py --report bench/results/{stem}_raw.json --csv bench/results/{stem}.csv"
"""The report step of a ``--pairs`` CSV (``stem``: :func:`pairs_stem`)."""
PHASES = ("data", "batch", "pack", "fwd_bwd", "optim", "metrics", "other")
"""The phases of a verl step (bench/verl_sft_pairs.py says what each one times)."""
TINY = cpu_sized(DENSE_1B, intermediate_size=256)
"""The ``--tiny`` model: DENSE_1B's layout (Qwen3, tied embeddings), CPU-sized."""
MODEL_FILES = {"tiny": "model_tiny_from_gpu_configs.json", "dense1b": "model_dense1b_from_gpu_configs.json"}
"""The model config file of each ``params.name``, written beside the run directory."""
LITE_ROW = ("dense", "lite", "mb4")
"""Where bench/results/gpu_speed_raw.json keeps the plain lite runtime's tokens/s of DENSE_1B, 4 x 4096 tokens."""


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", default=None, help="folder for gpu_verl_sft.csv, gpu_verl_sft_raw.json")
    p.add_argument("--report", default=None, metavar="RAW", help="only rewrite the CSV (--csv) from this raw JSON")
    p.add_argument(
        "--run-dir",
        default=None,
        help="the mlite run directory (default OUT/run); the model config and mlite's output go beside it. It "
        "holds verl's end-of-run checkpoint, ~17 GB for the 1 B model: keep it off $OUT on the device",
    )
    p.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    p.add_argument("--tiny", action="store_true", help="a CPU-sized model of the same layout")
    p.add_argument(
        "--pairs",
        type=int,
        default=0,
        help="0: the `mlite run --trainer verl-sft` row; N >= 1: N alternating pairs of bare lite runtime / verl "
        "SFT trials in one process on the same micro-batches (bench/verl_sft_pairs.py; writes gpu_verl_sft_pairs.*)",
    )
    p.add_argument("--trial-steps", type=int, default=2, help="--pairs: optimizer steps a trial")
    p.add_argument(
        "--num-workers",
        type=int,
        default=None,
        help="--pairs: verl's data.num_workers (default: the kit's, mlite.launch.verl_sft.DATA_WORKERS); given, the "
        "files are gpu_verl_sft_pairs_wN.*",
    )
    p.add_argument("--profile", default=None, metavar="PSTATS", help="--pairs: cProfile the worker into this file")
    p.add_argument("--steps", type=int, default=8, help="optimizer steps of the run (--pairs: derived)")
    p.add_argument("--warmup", type=int, default=2, help="first steps left out of the timing")
    p.add_argument("--tokens-per-microbatch", type=int, default=4096)
    p.add_argument(
        "--train-batch-size",
        type=int,
        default=500,
        help="conversations a step (data.train_batch_size; the tiny dataset's 4000 give 8 steps an epoch at 500)",
    )
    p.add_argument("--deadline-s", type=float, default=230.0, help="stop the run after this many seconds")
    p.add_argument("--csv", default=None, help="CSV path (default OUT/gpu_verl_sft.csv)")
    p.add_argument(
        "--lite-raw",
        default=str(REPO / "bench" / "results" / "gpu_speed_raw.json"),
        help="gpu_speed raw JSON holding the plain lite runtime's row of the same model",
    )
    a = p.parse_args(argv)
    if a.report is not None:
        if a.csv is None:
            p.error("--report needs --csv")
        return a
    if a.out is None:
        p.error("--out is required (or --report RAW --csv CSV)")
    if a.pairs < 0 or a.trial_steps < 1:
        p.error(f"--pairs ({a.pairs}) must be >= 0 and --trial-steps ({a.trial_steps}) >= 1")
    if a.pairs:
        a.steps = a.warmup + a.pairs * a.trial_steps + 1  # bench/verl_sft_pairs.py: total_steps
    if a.warmup < 1 or a.steps <= a.warmup:
        p.error(f"--steps ({a.steps}) must be greater than --warmup ({a.warmup}) and --warmup at least 1")
    return a


# ---------------------------------------------------------------------- rows (a function of the raw JSON)
def timed(raw: dict) -> dict | None:
    """Tokens/s etc. of the steps after the warm-up: None until they are all logged."""
    p, steps = raw["params"], raw.get("steps", {})
    want = list(range(p["warmup"] + 1, p["steps"] + 1))
    if str(p["warmup"]) not in steps or any(str(s) not in steps for s in want):
        return None
    span = steps[str(p["steps"])]["t_s"] - steps[str(p["warmup"])]["t_s"]
    tokens = sum(int(steps[str(s)]["train/global_tokens"]) for s in want)
    mfu = [steps[str(s)]["train/mfu"] for s in want if steps[str(s)].get("train/mfu") is not None]
    return {
        "steps": want,
        "span_s": span,
        "tokens": tokens,
        "tokens_per_s": tokens / span if span > 0 else None,
        "step_s": span / len(want),
        "tokens_per_step": tokens / len(want),
        "verl_mfu_mean": sum(mfu) / len(mfu) if mfu else None,
    }


def peaks(raw: dict) -> dict:
    recs = raw.get("steps", {}).values()
    out = {}
    for key, name in (("perf/max_memory_allocated_gb", "allocated"), ("perf/max_memory_reserved_gb", "reserved")):
        vals = [d[key] for d in recs if d.get(key) is not None]
        out[f"peak_{name}_bytes"] = round(max(vals) * GIB) if vals else None
    return out


def rows(raw: dict) -> list[dict]:
    p = raw["params"]
    n = p["name"]
    cuda = p["device"] == "cuda"
    out = []
    t = timed(raw)
    if t is not None:
        first, last = t["steps"][0], t["steps"][-1]
        out += [
            _row(f"verl_sft {n} tokens/s", round(t["tokens_per_s"], 1),
                 f"tokens/s, steps {first}-{last} of verl SFT engine=lite (wall clock between verl's logged steps)"),
            _row(f"verl_sft {n} step time", round(t["step_s"], 4), "s per optimizer step (mean)"),
            _row(f"verl_sft {n} tokens/step", round(t["tokens_per_step"], 1),
                 f"tokens per step (train_batch_size {p['train_batch_size']}, "
                 f"micro-batches <= {p['tokens_per_microbatch']} tokens)"),
        ]  # fmt: skip
        if t["verl_mfu_mean"] is not None:
            out.append(_row(f"verl_sft {n} mfu (verl)", round(t["verl_mfu_mean"], 4),
                            "verl train/mfu mean (verl's FLOPs model and peak table)"))  # fmt: skip
        lite = raw.get("lite_dense_mb4_tokens_per_s")
        if lite:
            out.append(_row(f"verl_sft {n} / lite dense mb4", round(t["tokens_per_s"] / lite, 3),
                            "verl SFT tokens/s / plain lite runtime tokens/s (gpu_speed.csv, same model)"))  # fmt: skip
    pk = peaks(raw)
    mem = "CUDA" if cuda else "CPU (the platform shim's peak RSS)"
    if pk["peak_allocated_bytes"] is not None:
        out.append(_row(f"verl_sft {n} peak allocated", pk["peak_allocated_bytes"],
                        f"bytes, {mem} max_memory_allocated (verl perf/max_memory_allocated_gb)"))  # fmt: skip
    if pk["peak_reserved_bytes"] is not None:
        out.append(_row(f"verl_sft {n} peak reserved", pk["peak_reserved_bytes"],
                        f"bytes, {mem} max_memory_reserved (verl perf/max_memory_reserved_gb)"))  # fmt: skip
    est = estimated_peak(raw)
    out.append(_row(f"verl_sft {n} estimated peak", round(est), "bytes, mlite.memory estimate of the run"))
    if pk["peak_allocated_bytes"] and cuda:
        out.append(_row(f"verl_sft {n} peak/estimate", round(pk["peak_allocated_bytes"] / est, 4),
                        "measured max_memory_allocated / estimated peak"))  # fmt: skip
    if raw.get("status") is not None:
        out.append(_row(f"verl_sft {n} completed", int(raw["status"] == COMPLETED), "1 = completed"))
    return out


def run_config(raw: dict, model: Path, out: Path | None = None):
    """The :class:`~mlite.launch.RunConfig` of the measured run: its model config written at ``model``, the
    parameters of the raw JSON (the flags :meth:`Bench.mlite_argv` passes are this config's)."""
    from mlite.launch import RunConfig

    p = raw["params"]
    return RunConfig(
        trainer="verl-sft",
        model=str(model),
        steps=p["steps"],
        nproc=1,
        device=p["device"],
        tokens_per_microbatch=p["tokens_per_microbatch"],
        train_batch_size=p["train_batch_size"],
        out=None if out is None else str(out),
    )


def estimated_peak(raw: dict) -> float:
    """``mlite.memory``'s peak bytes of the run in ``raw``, with the estimator as it is now."""
    import tempfile

    from mlite.launch.memory_check import estimate_for

    p = raw["params"]
    with tempfile.TemporaryDirectory() as d:
        model = Path(d) / MODEL_FILES[p["name"]]
        model.write_text(json.dumps(p["model"]))
        return estimate_for(run_config(raw, model)).worst.peak


def write_csv(raw: dict, path: Path) -> None:
    write_measurements(raw, rows(raw), path, REPORT_CMD)


def pair_ratios(raw: dict) -> list[dict]:
    """The complete pairs, in order: each one bare and one verl trial, tokens/s of both and their ratio."""
    out, trials = [], raw.get("trials", [])
    for i in range(0, len(trials) - 1, 2):
        t = {d["kind"]: d for d in trials[i : i + 2]}
        if set(t) != {"bare", "verl"}:
            continue
        bare, verl = (t[k]["tokens"] / t[k]["span_s"] for k in ("bare", "verl"))
        out.append({"bare_tokens_per_s": bare, "verl_tokens_per_s": verl, "ratio": verl / bare})
    return out


def _median(xs: list[float]) -> float:
    s = sorted(xs)
    n = len(s)
    return s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2


def pairs_rows(raw: dict) -> list[dict]:
    """The ``--pairs`` rows: median verl / bare ratio of the pairs, its spread, tokens/s of each, the step's shape
    and the median per-phase seconds of the timed verl steps."""
    p, n = raw["params"], raw["params"]["name"]
    pairs = pair_ratios(raw)
    out = []
    if pairs:
        r = [d["ratio"] for d in pairs]
        how = (f"{len(pairs)} alternating pairs, {p['trial_steps']} steps a trial, one process, the same micro-batches, "
               f"verl data.num_workers={p['num_workers']}")  # fmt: skip
        out += [
            _row(f"verl_sft pairs {n} verl/bare median", round(_median(r), 4), f"verl SFT tokens/s / bare lite runtime tokens/s, median of {how}"),
            _row(f"verl_sft pairs {n} verl/bare min", round(min(r), 4), "the lowest pair's ratio"),
            _row(f"verl_sft pairs {n} verl/bare max", round(max(r), 4), "the highest pair's ratio"),
            _row(f"verl_sft pairs {n} verl tokens/s", round(_median([d["verl_tokens_per_s"] for d in pairs]), 1), "tokens/s, median over the verl trials (whole verl steps)"),
            _row(f"verl_sft pairs {n} bare tokens/s", round(_median([d["bare_tokens_per_s"] for d in pairs]), 1), "tokens/s, median over the bare trials (LiteRuntime.train_step)"),
        ]  # fmt: skip
    timed_steps = {s for t in raw.get("trials", []) if t["kind"] == "verl" for s in t["steps"]}
    steps = [d for d in raw.get("verl_steps", []) if d["step"] in timed_steps]
    bare = [d for d in raw.get("bare_steps", []) if d["label"] != "warmup"]
    if bare:
        out += [
            _row(f"verl_sft pairs {n} tokens/step", round(_median([d["tokens"] for d in bare]), 1),
                 f"tokens per step, median (train_batch_size {p['train_batch_size']}; both kinds run these)"),
            _row(f"verl_sft pairs {n} micro-batches/step", _median([d["micro_batches"] for d in bare]),
                 f"micro-batches per step, median (<= {p['tokens_per_microbatch']} tokens each)"),
            _row(f"verl_sft pairs {n} bare step", round(_median([d["total_s"] for d in bare]), 4),
                 "s per bare step, median"),
        ]  # fmt: skip
    if steps:
        total = _median([d["total_s"] for d in steps])
        out.append(_row(f"verl_sft pairs {n} verl step", round(total, 4), "s per verl step, median"))
        for ph in PHASES:
            v = _median([d.get(ph, 0.0) for d in steps])
            out.append(_row(f"verl_sft pairs {n} verl phase {ph}", round(v, 4),
                            f"s per verl step, median ({100 * v / total:.1f} % of the median step)"))  # fmt: skip
    return out


def pairs_stem(num_workers: int | None) -> str:
    """``gpu_verl_sft_pairs`` (the kit's data workers) or ``gpu_verl_sft_pairs_wN`` (``--num-workers N``)."""
    return "gpu_verl_sft_pairs" + ("" if num_workers is None else f"_w{num_workers}")


def write_pairs_csv(raw: dict, path: Path) -> None:
    stem = pairs_stem(raw["params"]["num_workers_given"])
    write_measurements(raw, pairs_rows(raw), path, PAIRS_REPORT_CMD.format(stem=stem))


def _row(measurement: str, value, unit: str) -> dict:
    return {"measurement": measurement, "value": value, "unit": unit}


# ---------------------------------------------------------------------- the measuring run
class Bench:
    """One verl-sft run, polled; results written as they come."""

    def __init__(self, a, argv: list[str]):
        self.a = a
        self.out = Path(a.out).resolve()
        self.out.mkdir(parents=True, exist_ok=True)
        self.run_dir = Path(a.run_dir).resolve() if a.run_dir else self.out / "run"
        self.work = self.run_dir.parent  # the model config and mlite's output beside the run directory
        self.work.mkdir(parents=True, exist_ok=True)
        self.csv_path = Path(a.csv).resolve() if a.csv else self.out / "gpu_verl_sft.csv"
        self.raw_path = self.out / "gpu_verl_sft_raw.json"
        self.raw: dict = {
            "command": shlex.join(["python3", "bench/gpu_verl_sft.py", *argv]),
            "params": {
                "name": "tiny" if a.tiny else "dense1b",
                "device": a.device,
                "steps": a.steps,
                "warmup": a.warmup,
                "train_batch_size": a.train_batch_size,
                "tokens_per_microbatch": a.tokens_per_microbatch,
                "model": TINY if a.tiny else DENSE_1B,
            },
            "status": None,
            "errors": [],
            "steps": {},
        }
        self.raw.update(environment(a.device, with_gpu=False))
        if not a.tiny and a.device == "cuda":
            self.raw["lite_dense_mb4_tokens_per_s"] = _lite_tokens_per_s(a.lite_raw)
        self.proc = None

    def model_file(self) -> Path:
        path = self.work / MODEL_FILES[self.raw["params"]["name"]]
        path.write_text(json.dumps(self.raw["params"]["model"], indent=2) + "\n")
        return path

    def mlite_argv(self, model: Path) -> list[str]:
        """``python -m mlite run`` with the flags of :func:`run_config` (the config the report estimates)."""
        cfg = run_config(self.raw, model, self.run_dir)
        return [sys.executable, "-m", "mlite", "run", *cfg.cli_args(), "--out", str(self.run_dir), "--overwrite",
                "--json"]  # fmt: skip

    def env(self) -> dict:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
        env["PYTHONUNBUFFERED"] = "1"
        env.setdefault("NCCL_NVLS_ENABLE", "0")
        env.setdefault("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1")
        return env

    def poll(self) -> None:
        """Stamp every new complete line of verl's metrics.jsonl."""
        try:
            text = (self.run_dir / METRICS_FILE).read_text(errors="replace")
        except FileNotFoundError:
            return
        now = time.perf_counter() - self.t0
        for line in text.splitlines(keepends=True):
            if not line.endswith("\n"):
                break
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                continue
            step = str(int(rec["step"]))
            if step not in self.raw["steps"]:
                self.raw["steps"][step] = {"t_s": now, **rec["data"]}
                self.write()
                print(f"gpu_verl_sft: step {step} logged at {now:.2f} s", flush=True)

    def write(self) -> None:
        tmp = self.raw_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.raw, indent=1, default=str) + "\n")
        tmp.replace(self.raw_path)
        write_csv(self.raw, self.csv_path)

    def run(self) -> int:
        a = self.a
        if self.run_dir.exists():  # an earlier run's metrics.jsonl would be stamped as this run's steps
            if not (self.run_dir / STATUS_FILE).is_file() and any(self.run_dir.iterdir()):
                print(f"gpu_verl_sft: FAILED: --run-dir {self.run_dir} exists and is no run directory", flush=True)
                return 2
            shutil.rmtree(self.run_dir)
        argv = self.mlite_argv(self.model_file())
        self.raw["mlite_command"] = shlex.join(argv[1:])
        log_path = self.work / "mlite_run_output.log"
        self.t0 = time.perf_counter()
        self.write()
        with open(log_path, "w") as log:
            self.proc = subprocess.Popen(
                argv, stdout=subprocess.PIPE, stderr=log, text=True, env=self.env(), cwd=str(REPO),
                start_new_session=True,
            )  # fmt: skip
            signal.signal(signal.SIGTERM, self.on_sigterm)  # an outer `timeout` must not leave workers on the GPU
            timed_out = False
            while self.proc.poll() is None:
                self.poll()
                if time.perf_counter() - self.t0 > a.deadline_s:
                    timed_out = True
                    self.stop_run()
                    break
                time.sleep(0.002)
            stdout = self.proc.stdout.read() if self.proc.stdout else ""
        self.poll()
        self.raw["wall_s"] = time.perf_counter() - self.t0
        self.raw["exit_code"] = self.proc.returncode
        try:
            self.raw["summary"] = json.loads(stdout) if stdout.strip() else None
        except json.JSONDecodeError:
            self.raw["summary"] = None
            self.raw["stdout_tail"] = stdout[-3000:]
        self.raw["console_tail"] = _tail(self.run_dir / CONSOLE_FILE, 40)
        self.raw["train_log_tail"] = _tail(self.run_dir / LOG_FILE, 10)
        self.raw["mlite_output_tail"] = _tail(log_path, 40)
        self.raw.update(environment(a.device, with_gpu=True))
        status = (self.raw["summary"] or {}).get("status") or _run_status(self.run_dir)
        self.raw["status"] = status
        if timed_out:
            self.raw["errors"].append(f"deadline: stopped after {a.deadline_s:.0f} s (status {status})")
        elif status != COMPLETED:
            self.raw["errors"].append(f"run: status {status}, exit code {self.proc.returncode}")
        if timed(self.raw) is None:
            self.raw["errors"].append(f"steps: logged {sorted(map(int, self.raw['steps']))} of 1..{a.steps}")
        self.write()
        if self.raw["errors"]:
            self.say_failed("; ".join(self.raw["errors"]))
            return 1  # the rows measured so far stay in the CSV (e.g. all steps timed, the end checkpoint late)
        print(f"gpu_verl_sft: wrote {self.csv_path} and {self.raw_path}", flush=True)
        for r in rows(self.raw):
            print(f"  {r['measurement']}: {r['value']} ({r['unit']})", flush=True)
        return 0

    def say_failed(self, why: str) -> None:
        print(f"gpu_verl_sft: FAILED: {why}", flush=True)
        for line in (self.raw.get("mlite_output_tail", []) + self.raw.get("console_tail", []))[-30:]:
            print(f"  | {line}", flush=True)

    def stop_run(self) -> None:
        """End the run the kit's way (``RunHandle.kill``: SIGTERM to the launcher, which ends torchrun and its
        workers, SIGKILL to its process group after a grace period), then the ``mlite run`` process."""
        from mlite.launch.handle import RunHandle

        if (self.run_dir / STATUS_FILE).is_file():
            RunHandle.open(self.run_dir).kill(grace=15.0)
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()

    def on_sigterm(self, signum, frame) -> None:
        self.stop_run()
        self.poll()
        self.raw["status"] = _run_status(self.run_dir)
        self.raw["errors"].append("terminated (SIGTERM) before the run ended")
        self.raw["console_tail"] = _tail(self.run_dir / CONSOLE_FILE, 40)
        self.raw.update(environment(self.a.device, with_gpu=True))
        self.write()
        self.say_failed("terminated (SIGTERM); the rows measured so far are written")
        sys.exit(1)


class PairsBench(Bench):
    """``--pairs N``: torchrun with bench/verl_sft_pairs.py, which runs verl's SFT trainer and the bare trials in one
    process and writes the raw JSON and the CSV after every trial; this process adds the run's exit and labels."""

    def __init__(self, a, argv: list[str]):
        super().__init__(a, argv)
        self.raw.pop("lite_dense_mb4_tokens_per_s", None)
        self.raw.pop("steps")
        self.raw["mode"] = "pairs"
        from mlite.launch.verl_sft import DATA_WORKERS

        workers = DATA_WORKERS.get(a.device, 0) if a.num_workers is None else a.num_workers
        self.raw["params"].update(pairs=a.pairs, trial_steps=a.trial_steps, num_workers=workers,
                                  num_workers_given=a.num_workers)  # fmt: skip
        stem = pairs_stem(a.num_workers)
        self.csv_path = Path(a.csv).resolve() if a.csv else self.out / f"{stem}.csv"
        self.raw_path = self.out / f"{stem}_raw.json"

    def write(self) -> None:
        tmp = self.raw_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.raw, indent=1, default=str) + "\n")
        tmp.replace(self.raw_path)
        write_pairs_csv(self.raw, self.csv_path)

    def worker_argv(self, model: Path) -> tuple[list[str], dict]:
        """torchrun of the worker with the Hydra overrides and environment of ``mlite run --trainer verl-sft``."""
        from mlite.launch.rundir import RunDir
        from mlite.launch.verl_sft import hydra_overrides, verl_env, write_model_dir

        cfg = run_config(self.raw, model, self.run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        write_model_dir(cfg, self.run_dir)
        spec = self.work / "pairs_spec.json"
        p = self.raw["params"]
        spec.write_text(json.dumps({"raw": str(self.raw_path), "csv": str(self.csv_path), "warmup": p["warmup"],
                                    "pairs": p["pairs"], "trial_steps": p["trial_steps"],
                                    "profile": self.a.profile and str(Path(self.a.profile).resolve())}))  # fmt: skip
        env = {**self.env(), **verl_env(cfg, RunDir(self.run_dir))}
        env["PYTHONPATH"] = os.pathsep.join(q for q in (str(REPO), env.get("PYTHONPATH", "")) if q)
        argv = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nnodes", "1", "--nproc-per-node",
                "1", "--max-restarts", "0", str(REPO / "bench" / "verl_sft_pairs.py"), str(spec),
                *hydra_overrides(cfg, self.run_dir)]  # fmt: skip
        if self.a.num_workers is not None:
            argv.append(f"data.num_workers={self.a.num_workers}")  # Hydra: the last value of a key wins
        return argv, env

    def run(self) -> int:
        a = self.a
        if self.run_dir.exists():
            shutil.rmtree(self.run_dir)
        argv, env = self.worker_argv(self.model_file())
        self.raw["worker_command"] = shlex.join(argv[1:])
        log_path = self.work / "verl_sft_pairs_output.log"
        self.t0 = time.perf_counter()
        self.write()
        with open(log_path, "w") as log:
            self.proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=str(REPO),
                                         start_new_session=True)  # fmt: skip
            signal.signal(signal.SIGTERM, self.on_sigterm)
            timed_out = False
            while self.proc.poll() is None:
                if time.perf_counter() - self.t0 > a.deadline_s:
                    timed_out = True
                    self.stop_run()
                    break
                time.sleep(0.5)
        self.raw = json.loads(self.raw_path.read_text())  # the worker's trials
        self.raw["wall_s"] = time.perf_counter() - self.t0
        self.raw["exit_code"] = self.proc.returncode
        self.raw["worker_output_tail"] = _tail(log_path, 40)
        self.raw.update(environment(a.device, with_gpu=True))
        if timed_out:
            self.raw["errors"].append(f"deadline: stopped after {a.deadline_s:.0f} s")
        elif self.proc.returncode != 0:
            self.raw["errors"].append(f"run: exit code {self.proc.returncode}")
        want = 2 * a.pairs
        if len(self.raw.get("trials", [])) < want:
            self.raw["errors"].append(f"trials: {len(self.raw.get('trials', []))} of {want} measured")
        self.raw["status"] = "failed" if self.raw["errors"] else COMPLETED
        self.write()
        if self.raw["errors"]:
            self.say_failed("; ".join(self.raw["errors"]))
            return 1
        print(f"gpu_verl_sft: wrote {self.csv_path} and {self.raw_path}", flush=True)
        for r in pairs_rows(self.raw):
            print(f"  {r['measurement']}: {r['value']} ({r['unit']})", flush=True)
        return 0

    def say_failed(self, why: str) -> None:
        print(f"gpu_verl_sft: FAILED: {why}", flush=True)
        for line in self.raw.get("worker_output_tail", [])[-30:]:
            print(f"  | {line}", flush=True)

    def stop_run(self) -> None:
        """SIGTERM to torchrun's process group (it ends its worker), SIGKILL after 15 s."""
        if self.proc is None or self.proc.poll() is not None:
            return
        os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()

    def on_sigterm(self, signum, frame) -> None:
        self.stop_run()
        self.raw = json.loads(self.raw_path.read_text())
        self.raw["errors"].append("terminated (SIGTERM) before the run ended")
        self.raw.update(environment(self.a.device, with_gpu=True))
        self.write()
        self.say_failed("terminated (SIGTERM); the trials measured so far are written")
        sys.exit(1)


def environment(device: str, with_gpu: bool) -> dict:
    """Labels of the rows: GPU name (asked only at the end, not while the run holds the GPU), versions."""
    from importlib.metadata import PackageNotFoundError, version

    import torch

    doc = {"torch_version": torch.__version__, "gpu": "cpu"}
    if device == "cuda":
        doc["gpu"] = "cuda (name read at the end)"
        if with_gpu:
            try:
                doc["gpu"] = torch.cuda.get_device_name(0)
            except (RuntimeError, AssertionError) as e:  # a label: the measured rows stay
                doc["gpu"] = f"cuda (name not read: {type(e).__name__})"
    for pkg in ("verl", "ray", "transformers", "tensordict", "hydra-core", "datasets"):
        try:
            doc[f"{pkg}_version"] = version(pkg)
        except PackageNotFoundError:
            doc[f"{pkg}_version"] = None
    return doc


def _tail(path: Path, n: int) -> list[str]:
    try:
        return path.read_text(errors="replace").splitlines()[-n:]
    except FileNotFoundError:
        return []


def _run_status(run_dir: Path) -> str | None:
    try:
        return json.loads((run_dir / STATUS_FILE).read_text()).get("status")
    except (OSError, ValueError):
        return None


def _lite_tokens_per_s(raw_path: str) -> float | None:
    try:
        doc = json.loads(Path(raw_path).read_text())
        a, b, c = LITE_ROW
        return float(doc[a][b][c]["tokens_per_s"])
    except (OSError, KeyError, TypeError, ValueError):
        return None


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    a = parse_args(argv)
    if a.report is not None:
        raw = json.loads(Path(a.report).read_text())
        (write_pairs_csv if raw.get("mode") == "pairs" else write_csv)(raw, Path(a.csv))
        return 0
    return (PairsBench if a.pairs else Bench)(a, argv).run()


if __name__ == "__main__":
    sys.exit(main())
