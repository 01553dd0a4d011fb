"""verl's SFT trainer with the lite engine on one GPU: tokens/s and peak memory of ``mlite run --trainer verl-sft``.

    python3 bench/gpu_verl_sft.py --out DIR                       # on the GPU: DIR/gpu_verl_sft.csv + _raw.json
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
(:func:`mlite.launch.memory_check.estimate_for`). verl's own ``train/mfu`` is kept as reported.

Results are written as they come: the raw JSON after every logged step, the CSV as soon as the timed steps are in
(before verl's end-of-run checkpoint), again at the end. A failure (run failed, no steps, deadline) prints one
``gpu_verl_sft: FAILED ...`` line with the run's last log lines and exits 1; the rows measured so far stay.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from gpu_configs import DENSE_1B  # noqa: E402  (bench/ is not a package)

COLUMNS = ("measurement", "value", "unit", "gpu", "torch_version", "command")
"""The CSV contract of the GPU rows (issue 13)."""
GIB = 2**30
TINY = dict(
    DENSE_1B,
    hidden_size=128,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=32,
    intermediate_size=256,
    vocab_size=512,
)
"""The ``--tiny`` model: DENSE_1B's layout (Qwen3, tied embeddings), CPU-sized."""
LITE_ROW = ("dense", "lite", "mb4")
"""Where bench/results/gpu_speed_raw.json keeps the plain lite runtime's tokens/s of DENSE_1B, 4 x 4096 tokens."""


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", required=True, help="folder for gpu_verl_sft.csv, gpu_verl_sft_raw.json")
    p.add_argument(
        "--run-dir",
        default=None,
        help="the mlite run directory (default OUT/run; it holds verl's "
        "end-of-run checkpoint, ~17 GB for the 1 B model: keep it off \\$OUT on the device)",
    )
    p.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    p.add_argument("--tiny", action="store_true", help="a CPU-sized model of the same layout")
    p.add_argument("--steps", type=int, default=8, help="optimizer steps of the run")
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
    if a.warmup < 1 or a.steps <= a.warmup:
        p.error(f"--steps ({a.steps}) must be greater than --warmup ({a.warmup}) and --warmup at least 1")
    return a


class Bench:
    """One verl-sft run, polled; results written as they come."""

    def __init__(self, a):
        self.a = a
        self.out = Path(a.out).resolve()
        self.out.mkdir(parents=True, exist_ok=True)
        self.run_dir = Path(a.run_dir).resolve() if a.run_dir else self.out / "run"
        self.csv_path = Path(a.csv).resolve() if a.csv else self.out / "gpu_verl_sft.csv"
        self.raw_path = self.out / "gpu_verl_sft_raw.json"
        self.name = "tiny" if a.tiny else "dense1b"
        self.bench_command = shlex.join(["python3", "bench/gpu_verl_sft.py", *sys.argv[1:]])
        self.raw: dict = {"command": self.bench_command, "device": a.device, "tiny": a.tiny, "errors": []}
        self.stamps: dict[int, float] = {}
        self.records: dict[int, dict] = {}

    # ------------------------------------------------------------------ run
    def model_file(self) -> Path:
        path = self.out / ("model_tiny_from_gpu_configs.json" if self.a.tiny else "model_dense1b_from_gpu_configs.json")
        path.write_text(json.dumps(TINY if self.a.tiny else DENSE_1B, indent=2) + "\n")
        return path

    def mlite_argv(self, model: Path) -> list[str]:
        a = self.a
        return [
            sys.executable, "-m", "mlite", "run", "--trainer", "verl-sft", "--model", str(model),
            "--steps", str(a.steps), "--nproc", "1", "--device", a.device,
            "--tokens-per-microbatch", str(a.tokens_per_microbatch), "--train-batch-size", str(a.train_batch_size),
            "--out", str(self.run_dir), "--overwrite", "--json",
        ]  # fmt: skip

    def env(self) -> dict:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
        env["PYTHONUNBUFFERED"] = "1"
        env.setdefault("NCCL_NVLS_ENABLE", "0")
        env.setdefault("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1")
        return env

    def poll(self) -> None:
        """Stamp every new complete line of verl's metrics.jsonl."""
        path = self.run_dir / "metrics.jsonl"
        try:
            text = path.read_text(errors="replace")
        except FileNotFoundError:
            return
        now = time.perf_counter()
        for line in text.splitlines(keepends=True):
            if not line.endswith("\n"):
                break
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                continue
            step = int(rec["step"])
            if step not in self.stamps:
                self.stamps[step] = now
                self.records[step] = rec["data"]
                self.on_step(step)

    def on_step(self, step: int) -> None:
        self.raw["steps"] = {str(s): {"t_s": self.stamps[s] - self.t0, **self.records[s]} for s in sorted(self.records)}
        self.write_raw()
        if step >= self.a.steps:
            self.write_csv(self.rows())
        print(f"gpu_verl_sft: step {step} logged at {self.stamps[step] - self.t0:.2f} s", flush=True)

    def run(self) -> int:
        a = self.a
        model = self.model_file()
        argv = self.mlite_argv(model)
        self.raw["mlite_command"] = shlex.join(argv[1:])
        log_path = self.out / "mlite_run_output.log"
        self.t0 = time.perf_counter()
        with open(log_path, "w") as log:
            proc = subprocess.Popen(
                argv, stdout=subprocess.PIPE, stderr=log, text=True, env=self.env(), cwd=str(REPO),
                start_new_session=True,
            )  # fmt: skip
            timed_out = False
            while proc.poll() is None:
                self.poll()
                if time.perf_counter() - self.t0 > a.deadline_s:
                    timed_out = True
                    os.killpg(proc.pid, signal.SIGTERM)
                    try:
                        proc.wait(timeout=20)
                    except subprocess.TimeoutExpired:
                        os.killpg(proc.pid, signal.SIGKILL)
                        proc.wait()
                    break
                time.sleep(0.002)
            stdout = proc.stdout.read() if proc.stdout else ""
        self.poll()
        self.raw["wall_s"] = time.perf_counter() - self.t0
        self.raw["exit_code"] = proc.returncode
        try:
            self.raw["summary"] = json.loads(stdout) if stdout.strip() else None
        except json.JSONDecodeError:
            self.raw["summary"] = None
            self.raw["stdout_tail"] = stdout[-3000:]
        self.raw["console_tail"] = _tail(self.run_dir / "console.log", 40)
        self.raw["train_log_tail"] = _tail(self.run_dir / "train.log", 10)
        self.raw["mlite_output_tail"] = _tail(log_path, 40)
        self.raw.update(self.environment())
        rows = self.rows()
        status = (self.raw["summary"] or {}).get("status")
        done = len([s for s in self.stamps if s > a.warmup and s <= a.steps]) == a.steps - a.warmup
        if timed_out:
            self.raw["errors"].append(f"deadline: stopped after {a.deadline_s:.0f} s (status {status})")
        elif status != "completed":
            self.raw["errors"].append(f"run: status {status}, exit code {proc.returncode}")
        rows.append(_row(f"verl_sft {self.name} completed", int(status == "completed"), "1 = completed"))
        self.write_raw()
        self.write_csv(rows)
        if self.raw["errors"] or not done:
            why = "; ".join(self.raw["errors"]) or f"only steps {sorted(self.stamps)} logged"
            print(f"gpu_verl_sft: FAILED: {why}", flush=True)
            for line in (self.raw["mlite_output_tail"] + self.raw["console_tail"])[-30:]:
                print(f"  | {line}", flush=True)
            return 1  # the rows measured so far stay in the CSV (e.g. all steps timed, the end checkpoint late)
        print(f"gpu_verl_sft: wrote {self.csv_path} and {self.raw_path}", flush=True)
        return 0

    # ------------------------------------------------------------------ results
    def timed(self) -> dict | None:
        a = self.a
        steps = list(range(a.warmup + 1, a.steps + 1))
        if a.warmup not in self.stamps or any(s not in self.stamps for s in steps):
            return None
        span = self.stamps[a.steps] - self.stamps[a.warmup]
        tokens = sum(int(self.records[s]["train/global_tokens"]) for s in steps)
        mfu = [self.records[s].get("train/mfu") for s in steps]
        mfu = [m for m in mfu if m is not None]
        return {
            "steps": steps,
            "span_s": span,
            "tokens": tokens,
            "tokens_per_s": tokens / span if span > 0 else None,
            "step_s": span / len(steps),
            "tokens_per_step": tokens / len(steps),
            "verl_mfu_mean": sum(mfu) / len(mfu) if mfu else None,
        }

    def peaks(self) -> dict:
        alloc = [
            d["perf/max_memory_allocated_gb"] for d in self.records.values() if "perf/max_memory_allocated_gb" in d
        ]
        res = [d["perf/max_memory_reserved_gb"] for d in self.records.values() if "perf/max_memory_reserved_gb" in d]
        return {
            "peak_allocated_bytes": round(max(alloc) * GIB) if alloc else None,
            "peak_reserved_bytes": round(max(res) * GIB) if res else None,
        }

    def estimate(self) -> dict | None:
        """mlite.memory's figures for the run's own RunConfig (as the run view shows them)."""
        if "estimate" in self.raw:
            return self.raw["estimate"]
        from mlite.errors import MliteError

        try:
            from mlite.launch.memory_check import estimate_for
            from mlite.launch.rundir import RunDir

            w = estimate_for(RunDir(self.run_dir).read_config()).worst
            est = {"peak": w.peak, "params": w.params, "grads": w.grads, "optimizer": w.optimizer}
        except (MliteError, ValueError, KeyError, TypeError, OSError) as e:  # the measured rows stay
            self.raw["errors"].append(f"estimate: {type(e).__name__}: {e}")
            est = None
        self.raw["estimate"] = est
        return est

    def rows(self) -> list[dict]:
        n = self.name
        t = self.timed()
        rows = []
        if t is not None:
            self.raw["timed"] = t
            first, last = t["steps"][0], t["steps"][-1]
            rows += [
                _row(f"verl_sft {n} tokens/s", round(t["tokens_per_s"], 1),
                     f"tokens/s, steps {first}-{last} of verl SFT engine=lite (wall clock between verl's logged steps)"),
                _row(f"verl_sft {n} step time", round(t["step_s"], 4), "s per optimizer step (mean)"),
                _row(f"verl_sft {n} tokens/step", round(t["tokens_per_step"], 1),
                     f"tokens per step (train_batch_size {self.a.train_batch_size}, "
                     f"micro-batches <= {self.a.tokens_per_microbatch} tokens)"),
            ]  # fmt: skip
            if t["verl_mfu_mean"] is not None:
                rows.append(_row(f"verl_sft {n} mfu (verl)", round(t["verl_mfu_mean"], 4),
                                 "verl train/mfu mean (verl's FLOPs model and peak table)"))  # fmt: skip
            lite = _lite_tokens_per_s(self.a.lite_raw) if not self.a.tiny and self.a.device == "cuda" else None
            if lite:
                self.raw["lite_dense_mb4_tokens_per_s"] = lite
                rows.append(_row(f"verl_sft {n} / lite dense mb4", round(t["tokens_per_s"] / lite, 3),
                                 "verl SFT tokens/s / plain lite runtime tokens/s (gpu_speed.csv, same model)"))  # fmt: skip
        pk = self.peaks()
        self.raw["peaks"] = pk
        mem = "CUDA" if self.a.device == "cuda" else "CPU (the platform shim's peak RSS)"
        if pk["peak_allocated_bytes"] is not None:
            rows.append(_row(f"verl_sft {n} peak allocated", pk["peak_allocated_bytes"],
                             f"bytes, {mem} max_memory_allocated (verl perf/max_memory_allocated_gb)"))  # fmt: skip
        if pk["peak_reserved_bytes"] is not None:
            rows.append(_row(f"verl_sft {n} peak reserved", pk["peak_reserved_bytes"],
                             f"bytes, {mem} max_memory_reserved (verl perf/max_memory_reserved_gb)"))  # fmt: skip
        if (self.run_dir / "config.json").is_file():
            est = self.estimate()
            if est is not None:
                rows.append(_row(f"verl_sft {n} estimated peak", int(est["peak"]), "bytes, mlite.memory estimate"))
                if pk["peak_allocated_bytes"] and self.a.device == "cuda":
                    rows.append(_row(f"verl_sft {n} peak/estimate", round(pk["peak_allocated_bytes"] / est["peak"], 4),
                                     "measured max_memory_allocated / estimated peak"))  # fmt: skip
        return rows

    def environment(self) -> dict:
        doc = {}
        try:
            import torch

            doc["torch_version"] = torch.__version__
            doc["gpu"] = (
                torch.cuda.get_device_name(0) if self.a.device == "cuda" and torch.cuda.is_available() else "cpu"
            )
        except (ImportError, RuntimeError, AssertionError) as e:  # labels only: the measured rows stay
            doc["torch_version"] = doc["gpu"] = f"unknown ({type(e).__name__})"
        from importlib.metadata import PackageNotFoundError, version

        for pkg in ("verl", "ray", "transformers", "tensordict", "hydra-core", "datasets"):
            try:
                doc[f"{pkg}_version"] = version(pkg)
            except PackageNotFoundError:
                doc[f"{pkg}_version"] = None
        return doc

    def write_raw(self) -> None:
        tmp = self.raw_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.raw, indent=1, default=str) + "\n")
        tmp.replace(self.raw_path)

    def write_csv(self, rows: list[dict]) -> None:
        if "gpu" not in self.raw:
            self.raw.update(self.environment())
        tmp = self.csv_path.with_suffix(".tmp")
        with open(tmp, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=COLUMNS)
            w.writeheader()
            for r in rows:
                w.writerow({**r, "gpu": self.raw["gpu"], "torch_version": self.raw["torch_version"],
                            "command": self.bench_command})  # fmt: skip
        tmp.replace(self.csv_path)


def _row(measurement: str, value, unit: str) -> dict:
    return {"measurement": measurement, "value": value, "unit": unit}


def _tail(path: Path, n: int) -> list[str]:
    try:
        return path.read_text(errors="replace").splitlines()[-n:]
    except FileNotFoundError:
        return []


def _lite_tokens_per_s(raw_path: str) -> float | None:
    try:
        doc = json.loads(Path(raw_path).read_text())
        a, b, c = LITE_ROW
        return float(doc[a][b][c]["tokens_per_s"])
    except (OSError, KeyError, TypeError, ValueError):
        return None


def main(argv=None) -> int:
    return Bench(parse_args(argv)).run()


if __name__ == "__main__":
    sys.exit(main())
