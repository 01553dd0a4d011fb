"""``mlite run --model CONFIG --steps N --nproc P --device cpu|cuda [...] --out DIR [--json]``: a single-node debug
run of the lite runtime (FSDP2 workers under torchrun, or Ray actors with ``--launcher ray``).

Exit 0 when the run completes, 1 when it fails (or was stopped: Ctrl-C asks the workers to stop after the step they
are in), 2 for bad input. ``--json`` prints ``{"status", "steps", "final_loss", "log", "metrics_jsonl",
"peak_memory_bytes", "reason", "run_dir"}`` at the end; without it a line per step goes to stdout. ``--dry-run``
prints the worker command and starts nothing.
"""

from __future__ import annotations

import sys
import time

COMMAND = "run"
ORDER = 35


def add_parser(sub):
    from ..launch.config import DEBUG_MODELS, DEVICES, LAUNCHERS, MOMENT_DTYPES, OPTIMIZERS, PARAM_DTYPES, RECOMPUTE

    p = sub.add_parser(COMMAND, help="start a single-node debug run of the lite runtime and wait for it",
                       description="Train a model config on this machine with the kit's lite runtime (FSDP2, "
                                   "mlite's optimizer and offload modes). Writes a run directory (train.log, "
                                   "metrics.jsonl, config.json, command.txt, status.json) readable by 'mlite logs'. "
                                   "Exit 0: completed; 1: failed or stopped; 2: bad input.")
    p.add_argument("--model", required=True, metavar="CONFIG",
                   help=f"data/models name ({', '.join(DEBUG_MODELS)}) or a config.json path")
    p.add_argument("--steps", type=int, required=True, help="optimizer steps")
    p.add_argument("--nproc", type=int, required=True, help="worker processes: TP*CP*DP (= EP*EDP)")
    p.add_argument("--device", choices=DEVICES, required=True, help="cpu (gloo) or cuda (nccl, one GPU per process)")
    for name, what in (("tp", "tensor parallel size (sequence parallel)"), ("cp", "context parallel size"),
                       ("ep", "expert parallel size"), ("etp", "expert tensor parallel size (1 only)")):
        p.add_argument(f"--{name}", type=int, default=1, help=f"{what}; --nproc = TP*CP*DP (default 1)")
    p.add_argument("--optimizer", choices=OPTIMIZERS, default="fsdp2", help="mlite optimizer backend (default fsdp2)")
    p.add_argument("--pao", action="store_true", help="use_precision_aware_optimizer (bf16 params + int16 remainders)")
    p.add_argument("--moment-dtype", choices=MOMENT_DTYPES, default="fp32", help="Adam moment dtype (bf16 needs --pao)")
    p.add_argument("--offload-fraction", type=float, default=0.0, metavar="F",
                   help="share of optimizer state kept and updated on the CPU (mlite's fsdp2 uses 1.0)")
    p.add_argument("--param-offload", action="store_true", help="move parameters to the CPU between steps")
    p.add_argument("--optimizer-offload", action="store_true", help="move optimizer state to the CPU between steps")
    p.add_argument("--launcher", choices=LAUNCHERS, default="torchrun", help="torchrun (default) or ray actors")
    p.add_argument("--seed", type=int, default=0, help="weight init and data order seed")
    p.add_argument("--out", required=True, metavar="DIR", help="run directory to create")
    p.add_argument("--json", action="store_true", help="print the JSON document at the end")
    g = p.add_argument_group("training details")
    g.add_argument("--lr", type=float, default=3e-3, help="peak learning rate (cosine decay to lr/10)")
    g.add_argument("--lr-warmup-steps", type=int, default=2, help="linear warmup steps")
    g.add_argument("--clip-grad", type=float, default=1.0, help="global grad-norm clip (0: off)")
    g.add_argument("--tokens-per-microbatch", type=int, default=512, help="packed tokens per micro-batch and process")
    g.add_argument("--num-microbatches", type=int, default=1, help="micro-batches per step")
    g.add_argument("--recompute", choices=RECOMPUTE, default="none", help="activation recompute")
    g.add_argument("--param-dtype", choices=PARAM_DTYPES, default="auto",
                   help="parameter dtype (auto: bf16 on CUDA or with --pao, else fp32)")
    g.add_argument("--dataset", default="tiny_sft", help="data/datasets name or verl-format parquet path")
    g.add_argument("--threads", type=int, default=None, help="CPU threads per worker (default cores // nproc)")
    g.add_argument("--crash-at-step", type=int, default=None, metavar="N",
                   help="testing: the last worker raises at step N (the run ends failed)")
    g.add_argument("--overwrite", action="store_true", help="replace the run files of an older run in --out")
    g.add_argument("--dry-run", action="store_true", help="print the worker command, start nothing")
    return p


def _config(args):
    from ..launch import RunConfig

    return RunConfig(model=args.model, steps=args.steps, nproc=args.nproc, device=args.device, tp=args.tp, cp=args.cp,
                     ep=args.ep, etp=args.etp,
                     optimizer=args.optimizer, pao=args.pao, moment_dtype=args.moment_dtype,
                     offload_fraction=args.offload_fraction, param_offload=args.param_offload,
                     optimizer_offload=args.optimizer_offload, launcher=args.launcher, seed=args.seed, lr=args.lr,
                     lr_warmup_steps=args.lr_warmup_steps, clip_grad=args.clip_grad,
                     tokens_per_microbatch=args.tokens_per_microbatch, num_microbatches=args.num_microbatches,
                     recompute=args.recompute, param_dtype=args.param_dtype, dataset=args.dataset,
                     threads=args.threads, out=args.out,
                     crash_at_step=args.crash_at_step)


def _follow(run, quiet: bool) -> None:
    """Wait for the run; print each new step line unless ``quiet``. Ctrl-C asks the workers to stop."""
    shown = 0
    stopping = False
    while True:
        try:
            done = run.status in ("completed", "stopped", "failed")
            if not quiet:
                for step, d in run.rundir.read_metrics():
                    if step > shown:
                        shown = step
                        print(f"step {step}/{run.total_steps}  loss {d.get('train/loss', float('nan')):.4f}  "
                              f"grad_norm {d.get('train/grad_norm', float('nan')):.4f}  lr {d.get('train/lr', 0):.3g}",
                              flush=True)
            if done:
                run.wait(timeout=120)
                return
            time.sleep(0.5)
        except KeyboardInterrupt:
            if stopping:
                print("mlite run: terminating the workers", file=sys.stderr)
                run.kill()
                return
            stopping = True
            print("mlite run: stop requested; the workers finish their step (Ctrl-C again to terminate)",
                  file=sys.stderr)
            run.stop(wait=False)


def run(args) -> int:
    from ..launch import start
    from . import print_json

    cfg = _config(args)
    if args.dry_run:
        h = start(cfg, dry_run=True, overwrite=args.overwrite)
        print(h.command)
        return 0
    h = start(cfg, overwrite=args.overwrite)
    if not args.json:
        print(f"run directory {h.run_dir}\n{h.command}", flush=True)
    _follow(h, quiet=args.json)
    doc = h.summary()
    if args.json:
        print_json(doc)
    else:
        tail = f" ({doc['reason']})" if doc["reason"] else ""
        loss = "n/a" if doc["final_loss"] is None else f"{doc['final_loss']:.4f}"
        peak = "n/a" if doc["peak_memory_bytes"] is None else f"{doc['peak_memory_bytes'] / 2**20:.1f} MiB"
        print(f"{doc['status']}{tail}: {doc['steps']} steps, final loss {loss}, peak memory {peak}\n"
              f"log: {doc['log']}")
    return 0 if doc["status"] == "completed" else 1
