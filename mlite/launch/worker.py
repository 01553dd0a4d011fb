"""The training loop of one worker process (the same code under torchrun and in a Ray actor).

``python -m mlite.launch.worker RUN_DIR`` (torchrun sets ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_*``) or
:func:`run_worker` (a Ray actor sets them first). Per step: ``forward_backward`` over the step's packed micro-batches
from ``sft_iterator``, ``optimizer_step`` -> ``(ok, grad_norm, num_zeros)``, ``zero_grad``, ``lr_scheduler_step``
(only after an update), and with runtime context offload ``to(handle, "cpu", ...)`` after the step and back before
the next. Rank 0 writes the step's line to ``train.log`` and ``metrics.jsonl`` right away.

Stopping: every rank looks for the run's ``STOP`` file after each step and the ranks agree with one all-reduce
(max), so all of them leave the loop after the same step, then tear the process group down cleanly.

Failure: a worker that raises writes ``[mlite] worker R raised:`` and its traceback to ``train.log`` (an
:class:`~mlite.errors.MliteError` as one line, no traceback; a worker whose peer failed first and that only lost the
connection, one line naming the peer) and ``error_rankR.json``, then exits non-zero; the launcher process turns
that into ``[mlite] status: failed (...)``. A step whose gradient norm is not finite is skipped (no update, lr
unchanged) and says so in a ``[mlite] step N: update skipped`` line.

Metrics (verl names): ``train/loss`` (mean token loss over the global batch), ``train/grad_norm`` (global, before
clipping), ``train/lr`` (the lr of this step's update), ``perf/max_memory_allocated_gb`` (rank 0's peak so far, see
:class:`MemoryProbe`: ``torch.cuda.max_memory_allocated`` on CUDA, the tracked tensor peak on CPU),
``perf/cpu_memory_used_gb`` (``psutil.virtual_memory().used``, as verl), ``perf/throughput`` (tokens per second of
rank 0, packed positions) and ``timing_s/step`` (the step's wall time on rank 0).
"""

from __future__ import annotations

import os
import sys
import time
import traceback

from ..errors import MliteError
from ..rundir import COMPLETED, LIFECYCLE_PREFIX, STOPPED
from ..units import GIB
from .rundir import RunDir


class MemoryProbe:
    """Peak memory of this process.

    CUDA: the caching allocator's ``max_memory_allocated``. CPU has no allocator statistics, so one step (the
    second: the first allocates the optimizer state; the only one in a 1-step run) runs under PyTorch's
    ``MemTracker`` (a dispatch mode that accounts every tensor storage: parameters, gradients, optimizer state,
    activations, temporaries, FSDP2's all-gather buffers); its peak is the measured figure. Before that step the
    figure is the tally of parameter, gradient and optimizer-state tensors. The resident-set growth of the
    process (imports, libraries and allocator caches included) is kept besides, for information.
    """

    def __init__(self, device, steps: int):
        import psutil

        self.device = device
        self.proc = psutil.Process()
        self.baseline_rss = self.proc.memory_info().rss
        self.peak_rss = self.baseline_rss
        self.tracked_step = 2 if steps >= 2 else 1
        self.tracked_peak: int | None = None
        self.static_peak = 0
        self.detail: dict = {}
        """The tracked peak by kind (MemTracker's Parameter, Gradient, Activation, Temp, Optstate, Other)."""
        self.kind = "cuda_max_memory_allocated" if device.type == "cuda" else "cpu_tensor_peak"
        if device.type == "cuda":
            import torch

            torch.cuda.reset_peak_memory_stats(device)

    def sample_rss(self) -> None:
        rss = self.proc.memory_info().rss
        if rss > self.peak_rss:
            self.peak_rss = rss

    def note_static(self, stats: dict) -> None:
        """Tally of the tensors a step leaves (before ``zero_grad``): a lower bound of the step's peak."""
        self.static_peak = max(
            self.static_peak, stats["params"]["bytes"] + stats["grads"]["bytes"] + stats["optimizer_bytes"]
        )

    def track(self, step: int, handle):
        """A context manager around ``step``: MemTracker on CPU for the tracked step, else nothing."""
        from contextlib import nullcontext

        if self.device.type == "cuda" or step != self.tracked_step:
            return nullcontext()
        try:
            from torch.distributed._tools.mem_tracker import MemTracker
        except ImportError:  # pragma: no cover - private API of torch >= 2.5
            self.kind = "cpu_static_tally"
            return nullcontext()
        probe = self

        class _Tracked:
            def __enter__(self):
                self.mt = MemTracker()
                state = [t for s in handle.optimizer.slots for t in s.state.values()]
                grads = [p.grad for p in handle.model.parameters() if p.grad is not None]
                ddp = handle.runtime.ddp  # dist_opt: the gradient buffers (the parameters are views of theirs)
                grads += [b.grad_data for b in ddp.buffers] if ddp is not None else []
                self.mt.track_external(handle.model, *state, *grads)
                self.mt.__enter__()
                return self

            def __exit__(self, *exc):
                self.mt.__exit__(*exc)
                if exc[0] is None:
                    snap = self.mt.get_tracker_snapshot("peak")
                    probe.tracked_peak = int(sum(v.get("Total", 0) for v in snap.values()))
                    probe.detail = {
                        str(getattr(k, "value", k)): int(b)
                        for v in snap.values()
                        for k, b in v.items()
                        if str(getattr(k, "value", k)) != "Total"
                    }
                return False

        return _Tracked()

    def peak_bytes(self) -> int:
        if self.device.type == "cuda":
            import torch

            return int(torch.cuda.max_memory_allocated(self.device))
        return max(self.tracked_peak or 0, self.static_peak)

    def rss_growth(self) -> int:
        return max(0, self.peak_rss - self.baseline_rss)


def _agree(flag: bool, device) -> bool:
    """True on every rank when ``flag`` is True on any rank (one all-reduce)."""
    import torch
    import torch.distributed as dist

    t = torch.tensor([1.0 if flag else 0.0], device=device)
    if dist.is_initialized() and dist.get_world_size() > 1:
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return bool(t.item() > 0)


def _gather(obj) -> list:
    import torch.distributed as dist

    if not dist.is_initialized() or dist.get_world_size() == 1:
        return [obj]
    out = [None] * dist.get_world_size()
    dist.all_gather_object(out, obj)
    return out


def _memory_record(stats: dict, probe: MemoryProbe, step: int) -> dict:
    """What ``memory.json`` keeps per rank (bytes)."""
    opt = {k: stats[k]["bytes"] for k in ("master", "remainder", "exp_avg", "exp_avg_sq") if k in stats}
    return {
        "step": step,
        "params": stats["params"]["bytes"],
        "grads": stats["grads"]["bytes"],
        "optimizer": stats["optimizer_bytes"],
        "optimizer_detail": opt,
        "params_by_device": stats["params"]["by_device"],
        "peak": probe.peak_bytes(),
        "peak_kind": probe.kind,
        "param_dtype": stats["param_dtype"],
        "device": stats["device"],
        "mesh": stats.get("mesh"),
    }


def _announce_cut(rd: RunDir, cfg) -> None:
    """Rank 0's lifecycle lines before the model is built: what the cut changed, where the weights come from."""
    for change in cfg.cut_changes():
        rd.lifecycle(f"model cut: {change}")
    if cfg.hf_checkpoint:
        rd.lifecycle(f"weights: {cfg.hf_checkpoint} (Hugging Face checkpoint, loaded before sharding)")


def _announce_world(rd: RunDir, cfg, rt, h, threads: int) -> None:
    """Rank 0's lifecycle lines once the model is built: the world, the model and optimizer, the mesh, GDN's path."""
    from ..runtime import gdn
    from ..runtime.models.deltanet import GatedDeltaNet

    ps, dev = rt.pstate, rt.device
    n = sum(p.numel() for p in h.model.parameters())
    rd.lifecycle(
        f"world: {rt.world_size} process(es), {rt.info.backend} on {dev.type}, {threads} thread(s) each; "
        f"model {cfg.model}: {n:,} parameters in {rt.param_dtype_name}; optimizer {cfg.optimizer}"
        f"{' + PAO' if cfg.pao else ''}, moments {cfg.moment_dtype}, offload_fraction "
        f"{cfg.offload_fraction:g}, param_offload {cfg.param_offload}, optimizer_offload "
        f"{cfg.optimizer_offload}"
    )
    rd.lifecycle(f"mesh: tp {ps.tp}, cp {ps.cp}, ep {ps.ep}, etp 1, dp {ps.dp}, edp {ps.edp}")
    deltanet = next((m for m in h.model.modules() if isinstance(m, GatedDeltaNet)), None)
    if deltanet is not None:
        rd.lifecycle(f"gated deltanet: {gdn.backend_note(dev, next(deltanet.parameters()).dtype)}")


def _write_peaks(rd: RunDir, probe: MemoryProbe, rank: int, outcome: str, step: int) -> None:
    """Gather every rank's peak into ``memory.json`` and write the result (rank 0)."""
    peaks = _gather((probe.peak_bytes(), probe.kind, probe.rss_growth(), probe.detail))
    if rank != 0:
        return
    mem = rd.read_memory() or {"ranks": []}
    for r, (p, kind, rss, detail) in zip(mem.get("ranks", []), peaks):
        r.update(peak=int(p), peak_kind=kind, peak_detail=detail, rss_growth=int(rss))
    mem["peak"] = int(max(p[0] for p in peaks))
    mem["peak_kind"] = peaks[0][1]
    mem["steps"] = step
    rd.write_json(rd.memory_file, mem)
    rd.write_result(outcome, step)


def train(rd: RunDir) -> dict:
    """Run the training loop of ``rd``'s config in this process; returns ``{"outcome", "steps"}``."""
    import psutil
    import torch

    from ..runtime.data import sft_iterator
    from ..runtime.dist import destroy_distributed
    from ..runtime.runtime import (
        create_runtime,
        forward_backward,
        lr_scheduler_step,
        memory_stats,
        optimizer_step,
        to,
        zero_grad,
    )

    cfg = rd.read_config()
    threads = cfg.worker_threads()
    torch.set_num_threads(threads)
    rt = create_runtime(cfg.runtime_config())
    rank, world, dev = rt.rank, rt.world_size, rt.device
    if world != cfg.nproc:
        raise MliteError(f"nproc: the config asks for {cfg.nproc} processes but {world} joined the process group")
    # data rank = DP rank: the TP and CP ranks of one DP replica read the same micro-batches (the runtime splits
    # them over CP), so the global batch is tokens_per_microbatch x num_microbatches x DP whatever the mesh
    ps = rt.pstate
    data = sft_iterator(
        dataset=cfg.dataset,
        tokens_per_microbatch=cfg.tokens_per_microbatch,
        num_microbatches=cfg.num_microbatches,
        rank=ps.dp_rank,
        world=ps.dp,
        seed=cfg.seed,
    )
    probe = MemoryProbe(dev, cfg.steps)
    if rank == 0:
        _announce_cut(rd, cfg)
    h = rt.build_model()
    if rank == 0:
        _announce_world(rd, cfg, rt, h, threads)
    offload = cfg.param_offload or cfg.optimizer_offload
    moves = dict(model=cfg.param_offload, optimizer=cfg.optimizer_offload, grad=cfg.param_offload)
    outcome, step = COMPLETED, 0
    for step in range(1, cfg.steps + 1):
        if cfg.crash_at_step == step and rank == world - 1:
            raise RuntimeError(f"crash_at_step={step}: worker {rank} raises on purpose (testing the failure path)")
        micro = next(data)
        if offload and step > 1:
            to(h, dev, **moves)
        lr = h.lr
        t0 = time.perf_counter()
        with probe.track(step, h):
            out = forward_backward(h, micro, num_microbatches=len(micro))
            ok, grad_norm, _zeros = optimizer_step(h)
        probe.sample_rss()
        if step == 1 or step == probe.tracked_step:
            stats = memory_stats(h)
            probe.note_static(stats)
            if step == 1:
                first = _memory_record(stats, probe, step)
        zero_grad(h)
        if ok:
            lr_scheduler_step(h)
        if offload:
            to(h, "cpu", **moves)
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)
        dt = time.perf_counter() - t0
        stop = _agree(rd.stop_requested(), dev)
        if rank == 0:
            rd.log_step(
                step,
                {
                    "train/loss": out["loss"],
                    "train/grad_norm": float(grad_norm),
                    "train/lr": float(lr),
                    "perf/max_memory_allocated_gb": probe.peak_bytes() / GIB,
                    "perf/cpu_memory_used_gb": psutil.virtual_memory().used / GIB,
                    "perf/throughput": sum(mb.num_tokens for mb in micro) / dt,
                    "timing_s/step": dt,
                },
            )
        if rank == 0 and not ok:
            rd.lifecycle(f"step {step}: update skipped (grad norm {float(grad_norm)!r})")
        if step == 1:
            ranks = _gather(first)
            if rank == 0:
                rd.write_json(rd.memory_file, {"ranks": ranks})
        if stop and step < cfg.steps:
            outcome = STOPPED
            if rank == 0:
                rd.lifecycle(f"stop requested: the workers stopped after step {step} of {cfg.steps}")
            break
    _write_peaks(rd, probe, rank, outcome, step)
    destroy_distributed()
    return {"outcome": outcome, "steps": step}


def report_failure(rd: RunDir, rank: int, exc: BaseException) -> None:
    """Write what a failing worker knows to ``train.log`` and ``error_rankR.json`` (never raises)."""
    try:
        if isinstance(exc, MliteError):
            line, tb = f"MliteError: {exc.message}", ""
            text = f"{LIFECYCLE_PREFIX}worker {rank} error: {exc.message}\n"
        else:
            tb = "".join(traceback.format_exception(exc))
            line = traceback.format_exception_only(exc)[-1].strip()
            earlier = [e for e in rd.read_errors() if e.get("rank") != rank]
            if earlier:  # a peer failed first; this one only lost its connection: one line, no second traceback
                text = f"{LIFECYCLE_PREFIX}worker {rank} ended after worker {earlier[0].get('rank')} failed: {line[:200]}\n"
            else:
                text = f"{LIFECYCLE_PREFIX}worker {rank} raised:\n{tb}"
        rd.append_log(text)
        rd.write_error(rank, line, tb)
    except Exception:  # noqa: BLE001 -- the log folder itself is gone: nothing more to do (the exception re-raises)
        pass


def run_worker(run_dir) -> dict:
    """Train (see :func:`train`); on an exception, report it into the run directory and re-raise."""
    rd = RunDir(run_dir)
    try:
        return train(rd)
    except Exception as e:
        report_failure(rd, int(os.environ.get("RANK", "0")), e)
        raise


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print("usage: python -m mlite.launch.worker RUN_DIR", file=sys.stderr)
        return 2
    try:
        run_worker(argv[0])
    except MliteError as e:
        print(f"mlite worker: {e.message}", file=sys.stderr)
        return 1
    except Exception:  # noqa: BLE001 -- process boundary: the traceback goes to stderr (console.log), exit 1
        traceback.print_exc()
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
