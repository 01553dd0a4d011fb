"""The Slurm job: allocate ``nodes x gpus_per_node`` with one task per node, start Ray (head on the first node,
workers on the others), wait until every GPU has joined, then run the launcher on the head node — the hand-over
to Slurm and Ray that verl expects (its ``examples/slurm/ray_on_slurm.slurm`` does the same by hand).

SFT runs on torchrun, not Ray: the job starts one torchrun per node (``srun --ntasks-per-node=1``) with the first
node as ``MASTER_ADDR``; the launcher takes its node rank from ``SLURM_NODEID``.

Output goes to ``<log_dir>/%x-%j.out`` (``runs/slurm/`` by default, where the analysis notebook looks) and verl's
JSONL metrics to ``<log_dir>/<job name>-<job id>.jsonl`` next to it.
"""

from __future__ import annotations

from .header import mesh_accounting, options_summary

NCCL_HINTS = [
    "Site-specific network settings (uncomment and adjust to your fabric):",
    "  export NCCL_SOCKET_IFNAME=ib0 GLOO_SOCKET_IFNAME=eth0 NCCL_IB_HCA=mlx5",
]


def filename(target: str) -> str:
    return f"job_{target.removeprefix('verl-').replace('-', '_')}.sbatch"


def _sbatch_lines(plan) -> list[str]:
    lines = [
        f"#SBATCH --job-name={plan.name}",
        f"#SBATCH --nodes={plan.nodes}",
        "#SBATCH --ntasks-per-node=1",
        f"#SBATCH --gpus-per-node={plan.gpus_per_node}",
        f"#SBATCH --cpus-per-task={plan.cpus_per_task}",
        "#SBATCH --mem=0",
        "#SBATCH --exclusive",
        f"#SBATCH --output={plan.log_dir.rstrip('/')}/%x-%j.out",
    ]
    for opt, value, hint in (
        ("partition", plan.partition, "<partition>"),
        ("account", plan.account, "<account>"),
        ("time", plan.time_limit, "24:00:00"),
    ):
        lines.append(f"#SBATCH --{opt}={value}" if value else f"##SBATCH --{opt}={hint}")
    return lines


def render(plan, spec, mp, launcher) -> str:
    """The sbatch script for ``launcher`` (a :class:`mlite.export.launcher.Launcher`)."""
    ray = not plan.is_sft
    head = (
        [
            f"Slurm job for {launcher.filename}: {spec.name} on {plan.nodes} node(s) x {plan.gpus_per_node} GPUs, "
            + (
                "Ray cluster (head on the first node, workers on the others) for verl's workers."
                if ray
                else "one torchrun per node (SFT runs without Ray)."
            ),
            "Written by `mlite export` (mlite-lab). Submit from the folder holding both files; Slurm does not create",
            f"the output folder: mkdir -p {plan.log_dir} && sbatch {filename(plan.target)}",
            "",
        ]
        + mesh_accounting(plan, mp)
        + [""]
        + options_summary(plan.options)
        + [""]
        + NCCL_HINTS
    )
    out = ["#!/bin/bash"] + _sbatch_lines(plan) + [f"# {h}".rstrip() for h in head]
    out += [
        "",
        "set -euo pipefail",
        "",
        f"LAUNCHER=${{LAUNCHER:-${{SLURM_SUBMIT_DIR:-$PWD}}/{launcher.filename}}}",
        f"GPUS_PER_NODE=${{SLURM_GPUS_ON_NODE:-{plan.gpus_per_node}}}",
        f"RAY_PORT=${{RAY_PORT:-{plan.ray_port}}}" if ray else "MASTER_PORT=${MASTER_PORT:-29500}",
    ]
    if ray:
        out += [
            f"RAY_WAIT_TIMEOUT=${{RAY_WAIT_TIMEOUT:-{plan.ray_wait_timeout}}}  # seconds for every GPU to join",
            "RAY_HEAD_STARTUP=${RAY_HEAD_STARTUP:-10}  # seconds the head gets before workers connect",
            "RAY_POLL=${RAY_POLL:-5}  # seconds between checks of the GPUs joined",
        ]
    out += [""]
    if plan.setup:
        out += ["# setup on every node (inherited by srun steps)"] + list(plan.setup) + [""]
    out += ["# environment: exported before Ray / torchrun start so that every worker inherits it"]
    out += [f'export {n}="${{{n}:-{v}}}"' for n, v in launcher.env]
    out += [
        f"LOG_DIR=${{LOG_DIR:-{plan.log_dir}}}",
        'mkdir -p "${LOG_DIR}"',
        'LOG_DIR=$(cd "${LOG_DIR}" && pwd)',
        'export VERL_FILE_LOGGER_PATH="${LOG_DIR}/${SLURM_JOB_NAME}-${SLURM_JOB_ID}.jsonl"',
        "export LOG_DIR",
        'export NNODES="${SLURM_JOB_NUM_NODES}"',
        'export NDEVICES_PER_NODE="${GPUS_PER_NODE}"',
        "",
        'mapfile -t nodes < <(scontrol show hostnames "${SLURM_JOB_NODELIST}")',
        "head_node=${nodes[0]}",
        'read -ra head_addrs <<< "$(srun --nodes=1 --ntasks=1 -w "${head_node}" hostname --ip-address)"',
        "head_ip=${head_addrs[0]:-}",
        'for addr in "${head_addrs[@]}"; do  # prefer an IPv4 address',
        '    if [[ "${addr}" == *.*.*.* ]]; then head_ip=${addr}; break; fi',
        "done",
        'if [[ -z "${head_ip}" ]]; then',
        '    echo "Could not read the address of the head node ${head_node} (srun hostname --ip-address)" >&2',
        "    exit 1",
        "fi",
        'echo "Nodes: ${nodes[*]}; head ${head_node} (${head_ip}); metrics: ${VERL_FILE_LOGGER_PATH}"',
        "",
    ]
    out += _ray_lines() if ray else _torchrun_lines()
    return "\n".join(out) + "\n"


def _ray_lines() -> list[str]:
    return [
        'echo "Starting the Ray head on ${head_node}"',
        'srun --nodes=1 --ntasks=1 -w "${head_node}" \\',
        '    ray start --head --node-ip-address="${head_ip}" --port="${RAY_PORT}" \\',
        '    --num-cpus="${SLURM_CPUS_PER_TASK}" --num-gpus="${GPUS_PER_NODE}" --block &',
        'sleep "${RAY_HEAD_STARTUP}"',
        'for node in "${nodes[@]:1}"; do',
        '    echo "Starting a Ray worker on ${node}"',
        '    srun --nodes=1 --ntasks=1 -w "${node}" \\',
        '        ray start --address="${head_ip}:${RAY_PORT}" \\',
        '        --num-cpus="${SLURM_CPUS_PER_TASK}" --num-gpus="${GPUS_PER_NODE}" --block &',
        "done",
        'export RAY_ADDRESS="${head_ip}:${RAY_PORT}"',
        "",
        "# wait until every GPU has joined the cluster",
        "want=$((NNODES * GPUS_PER_NODE))",
        "deadline=$((SECONDS + RAY_WAIT_TIMEOUT))",
        "have=0",
        "while true; do",
        '    have=$(python3 -c \'import ray; ray.init(logging_level="ERROR"); '
        'print(int(ray.cluster_resources().get("GPU", 0)))\' 2>/dev/null | tail -n 1 || true)',
        '    if [[ "${have}" =~ ^[0-9]+$ ]] && (( have >= want )); then',
        "        break",
        "    fi",
        "    if (( SECONDS >= deadline )); then",
        '        echo "Ray cluster incomplete: ${have:-0} of ${want} GPUs joined within ${RAY_WAIT_TIMEOUT}s;" \\',
        '            "see the ray start output above (node, port ${RAY_PORT}, GPUs per node)" >&2',
        "        exit 1",
        "    fi",
        '    sleep "${RAY_POLL}"',
        "done",
        'echo "Ray cluster ready: ${have} GPUs on ${NNODES} node(s); starting ${LAUNCHER}"',
        "",
        'srun --overlap --nodes=1 --ntasks=1 -w "${head_node}" bash "${LAUNCHER}" "$@"',
    ]


def _torchrun_lines() -> list[str]:
    return [
        'export MASTER_ADDR="${head_ip}" MASTER_PORT',
        'echo "Starting torchrun on ${NNODES} node(s), master ${MASTER_ADDR}:${MASTER_PORT}"',
        'srun --nodes="${NNODES}" --ntasks-per-node=1 bash "${LAUNCHER}" "$@"',
    ]
