"""The torchrun worker of ``bench/gpu_verl_sft.py --pairs N``: verl's own SFT trainer (``engine=lite``) and the bare
lite runtime, in one process, on the same model and the same micro-batches, in alternating trials.

    torchrun --nproc-per-node 1 bench/verl_sft_pairs.py SPEC.json HYDRA_OVERRIDES...   (gpu_verl_sft.py builds it)

verl's ``SFTTrainer.fit`` runs as it is (``python -m verl.trainer.sft_trainer``'s entry, with the overrides the kit's
``mlite run --trainer verl-sft`` gives); this module only wraps, with timers, the objects it calls:

* the train dataloader: a verl step is the wall-clock time from the start of its ``next(dataloader)`` to the start of
  the next one (the whole body of verl's loop: batching, ``train_batch``, metrics, logging, tqdm);
* between two verl steps, where the schedule says so, a *bare* trial: ``LiteRuntime.train_step`` (forward/backward,
  optimizer step, zero_grad, lr step) on the CPU ``PackedBatch`` micro-batches the engine built in the last verl
  steps (fresh copies, none of the caches the verl step filled): the same tokens, micro-batch count and token count
  per micro-batch;
* the phases of a verl step: ``data`` (``next(dataloader)``: dataset ``__getitem__`` + collate), ``batch``
  (``train_batch``'s start minus the data's end: tensordict, seqlens), ``pack`` (``LiteEngine.forward_backward_batch``
  minus the runtime's ``forward_backward``: ``prepare_micro_batches`` + packing), ``fwd_bwd``
  (``LiteRuntime.forward_backward``), ``optim`` (zero_grad, ``optimizer_step``, ``lr_scheduler_step``), ``metrics``
  (``TrainingWorker._postprocess_output`` + ``Tracking.log``), ``other`` (the rest of the step). The runtime's
  ``forward_backward`` and ``optimizer_step`` end on a host read of the loss / grad norm, so these are device times
  too, without added syncs.

Schedule: ``warmup`` verl steps and one bare warm-up step, then ``pairs`` pairs of trials of ``trial_steps`` steps each,
in the order bare, verl | verl, bare | bare, verl ... (alternating, so drift cancels over the pairs), then one last verl
step that is not timed (verl saves its checkpoint there; the worker skips the save: no checkpoint is measured). The
raw JSON (``SPEC['raw']``) is rewritten after every trial with the CSV (gpu_verl_sft.py's ``write_pairs_csv``).
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def schedule(pairs: int) -> list[str]:
    """The trial order: ``bare, verl`` for even pairs, ``verl, bare`` for odd ones."""
    out: list[str] = []
    for i in range(pairs):
        out += ["bare", "verl"] if i % 2 == 0 else ["verl", "bare"]
    return out


def total_steps(spec: dict) -> int:
    """verl steps of the run: the warm-up, the verl trials, one untimed last step."""
    return spec["warmup"] + spec["pairs"] * spec["trial_steps"] + 1


class Recorder:
    """The timers and the schedule; the raw JSON written as trials end."""

    def __init__(self, spec: dict):
        self.spec = spec
        self.raw_path = Path(spec["raw"])
        self.raw = json.loads(self.raw_path.read_text())
        self.raw.setdefault("trials", [])
        self.raw.setdefault("verl_steps", [])
        self.raw.setdefault("bare_steps", [])
        self.plan = schedule(spec["pairs"])
        self.cur: dict | None = None  # the phases of the verl step in progress
        self.step = 0
        self.captured: list[list] = []  # the PackedBatch lists of the recent verl steps
        self.runtime = self.handle = None
        self.bare = False
        self.verl_done = 0  # verl steps ended
        self.verl_start: int | None = None  # verl_done when the verl trial in progress began

    # --------------------------------------------------------------- phases
    def add(self, phase: str, dt: float) -> None:
        if self.cur is not None and not self.bare:
            self.cur[phase] = self.cur.get(phase, 0.0) + dt

    def timed(self, phase: str, fn):
        rec = self

        def wrapper(*args, **kwargs):
            t0 = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                rec.add(phase, time.perf_counter() - t0)

        return wrapper

    # --------------------------------------------------------------- the step boundary
    def loader(self, inner):
        rec = self

        class Timed:
            def __len__(self):
                return len(inner)

            def __getattr__(self, name):
                return getattr(inner, name)

            def __iter__(self):
                it = iter(inner)
                while True:
                    rec.end_step()
                    rec.between_steps()
                    t0 = time.perf_counter()
                    try:
                        data = next(it)
                    except StopIteration:
                        return
                    t1 = time.perf_counter()
                    rec.step += 1
                    rec.cur = {"t0": t0, "data": t1 - t0, "t_data_end": t1, "tokens": _tokens(data)}
                    yield data

        return Timed()

    def end_step(self) -> None:
        if self.cur is None:
            return
        c, self.cur = self.cur, None
        total = time.perf_counter() - c.pop("t0")
        t_data_end, t_tb = c.pop("t_data_end"), c.pop("t_train_batch", None)
        if t_tb is not None:
            c["batch"] = t_tb - t_data_end
        fb_all = c.pop("fwd_bwd_batch", 0.0)
        c["pack"] = fb_all - c.get("fwd_bwd", 0.0)
        c["metrics"] = c.pop("postprocess", 0.0) + c.pop("log", 0.0)
        c["optim"] = c.pop("zero_grad", 0.0) + c.pop("optimizer_step", 0.0) + c.pop("lr_step", 0.0)
        known = sum(c.get(k, 0.0) for k in ("data", "batch", "pack", "fwd_bwd", "optim", "metrics"))
        c["other"] = total - known
        self.raw["verl_steps"].append({"step": self.step, "total_s": total, **c})
        self.verl_done += 1

    def between_steps(self) -> None:
        """Close a verl trial that has its steps; run the bare trials the schedule puts here."""
        s = self.spec
        k = s["trial_steps"]
        if self.verl_done == s["warmup"] and not self.raw["bare_steps"] and self.captured:
            self.bare_steps("warmup", 1)
        while self.plan and self.verl_done >= s["warmup"]:
            kind = self.plan[0]
            if kind == "bare":
                self.plan.pop(0)
                self.bare_steps(f"trial{len(self.raw['trials'])}", k)
                self.close_trial("bare", self.raw["bare_steps"][-k:])
                continue
            # a verl trial: its steps are the next k verl steps after the trial began
            if self.verl_start is None:
                self.verl_start = self.verl_done
                return
            if self.verl_done - self.verl_start < k:
                return
            self.plan.pop(0)
            self.verl_start = None
            self.close_trial("verl", self.raw["verl_steps"][-k:])

    def close_trial(self, kind: str, steps: list[dict]) -> None:
        span = sum(d["total_s"] for d in steps)
        tokens = sum(d["tokens"] for d in steps)
        self.raw["trials"].append({"kind": kind, "steps": [d["step"] for d in steps], "span_s": span, "tokens": tokens})
        self.write()

    def bare_steps(self, label: str, n: int) -> None:
        """``n`` bare steps of ``LiteRuntime.train_step`` on the captured micro-batches (cycled, oldest first)."""
        src = self.captured[-n:]
        self.bare = True
        try:
            for i in range(n):
                mbs = [dataclasses.replace(m) for m in src[i % len(src)]]  # fresh: no caches of the verl step
                t0 = time.perf_counter()
                out = self.runtime.train_step(self.handle, mbs)
                t1 = time.perf_counter()
                self.raw["bare_steps"].append(
                    {"label": label, "step": len(self.raw["bare_steps"]) + 1, "total_s": t1 - t0,
                     "tokens": sum(int(m.num_tokens) for m in mbs), "micro_batches": len(mbs),
                     "loss": out["loss"], "grad_norm": out["grad_norm"]}
                )  # fmt: skip
        finally:
            self.bare = False

    def write(self) -> None:
        if os.environ.get("RANK", "0") != "0":
            return
        from gpu_verl_sft import write_pairs_csv

        tmp = self.raw_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.raw, indent=1, default=str) + "\n")
        tmp.replace(self.raw_path)
        write_pairs_csv(self.raw, Path(self.spec["csv"]))
        print(f"verl_sft_pairs: trial {len(self.raw['trials'])} ({self.raw['trials'][-1]['kind']}) written", flush=True)


def _tokens(data) -> int:
    ids = data["input_ids"]
    return int(ids.offsets()[-1]) if ids.is_nested else int(data["attention_mask"].sum())


def install(rec: Recorder) -> None:
    """Wrap verl's loop objects and the lite engine with the recorder's timers (this process only)."""
    from verl.trainer import sft_trainer
    from verl.utils import tracking
    from verl.utils.checkpoint.checkpoint_handler import CheckpointHandler
    from verl.workers import engine_workers

    from mlite.verl_engine import engine as lite

    fit = sft_trainer.SFTTrainer.fit

    def timed_fit(trainer):
        trainer.train_dataloader = rec.loader(trainer.train_dataloader)
        eng = trainer.engine
        rec.runtime, rec.handle = eng.runtime, eng.handle
        rt = eng.runtime
        inner_fb = rt.forward_backward

        def forward_backward(handle, batch, *args, **kwargs):
            if not rec.bare:
                rec.captured = [*rec.captured[-(rec.spec["trial_steps"] - 1) :], list(batch)]
            return inner_fb(handle, batch, *args, **kwargs)

        rt.forward_backward = rec.timed("fwd_bwd", forward_backward)
        return fit(trainer)

    sft_trainer.SFTTrainer.fit = timed_fit
    tb = engine_workers.TrainingWorker.train_batch

    def train_batch(self, data):
        if rec.cur is not None:
            rec.cur["t_train_batch"] = time.perf_counter()
        return tb(self, data)

    engine_workers.TrainingWorker.train_batch = train_batch
    pp = engine_workers.TrainingWorker._postprocess_output
    engine_workers.TrainingWorker._postprocess_output = rec.timed("postprocess", pp)
    tracking.Tracking.log = rec.timed("log", tracking.Tracking.log)
    for name, phase in (("forward_backward_batch", "fwd_bwd_batch"), ("optimizer_step", "optimizer_step"),
                        ("optimizer_zero_grad", "zero_grad"), ("lr_scheduler_step", "lr_step")):  # fmt: skip
        setattr(lite.LiteEngine, name, rec.timed(phase, getattr(lite.LiteEngine, name)))
    CheckpointHandler.save_checkpoint = lambda self, step: None  # the bench measures no checkpoint


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    spec = json.loads(Path(argv[0]).read_text())
    if os.environ.get("MLITE_VERL_CPU") == "1":
        from mlite.verl_engine.platform import install as cpu_platform

        cpu_platform()
    from mlite.verl_engine import register

    register()
    rec = Recorder(spec)
    install(rec)
    from verl.trainer import sft_trainer

    sys.argv = [sft_trainer.__file__, *argv[1:]]  # hydra.main reads the overrides from sys.argv
    if spec.get("profile"):
        import cProfile

        cProfile.runctx("sft_trainer.main()", globals(), {"sft_trainer": sft_trainer}, spec["profile"])
    else:
        sft_trainer.main()  # the imported module: the class install() wrapped (runpy would re-create it)
    if rec.plan:
        print(f"verl_sft_pairs: FAILED: trials left {rec.plan} after {rec.verl_done} verl steps", flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
