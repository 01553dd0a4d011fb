"""Rows one token puts on the wire in an expert-parallel dispatch (and its combine), by dispatcher and routing.

* ``alltoall`` (Megatron-Core's ``MoEAlltoAllTokenDispatcher``, the lite runtime's AllToAll): the tokens are permuted
  by expert first, so a token routed to ``topk`` experts is sent ``topk`` times, once per (token, expert) pair.
* ``deepep`` (DeepEP and HybridEP, Megatron-Core's ``flex`` dispatcher, NeMo AutoModel's ``dispatcher: deepep``):
  the layout step marks which *ranks* a token goes to (``get_dispatch_layout`` returns ``is_token_in_rank:
  [num_tokens, num_ranks]``, deepseek-ai/DeepEP ``deep_ep/buffer.py`` @ dcfd954851157f0bf683e1c3f1a7778f78344759),
  the dispatch sends the token once to each such rank and the receiving rank feeds it to its local experts; the
  combine sends back one already-reduced row per (token, rank) ("x: [num_tokens, hidden], the tokens to send for
  reducing to its original ranks", the same file). AutoModel calls these (``nemo_automodel/components/moe/megatron/
  fused_a2a.py`` L141-167 @ e45812012456b0a6fb6b8d02eb9b29e2b5884d5a).

So a DeepEP-style dispatch moves ``D`` rows per token, ``D`` the distinct ranks among its experts, with each rank
holding ``experts / EP`` consecutive experts (Megatron-Core's expert placement; AutoModel shards the expert dimension,
``ExpertParallel`` ``Shard(0)``, ``nemo_automodel/components/moe/parallelizer.py`` L50-66 @ e45812012). ``D`` depends on
the routing:

* ``balanced``: each token's ``topk`` experts drawn uniformly without replacement (Megatron-Core's
  ``moe_router_force_load_balancing``, random logits, which Megatron-Bridge's performance recipes switch on), so
  ``D = EP x (1 - C(E - E/EP, k) / C(E, k))``; group-limited routing is not modelled;
* ``round_robin``: NeMo AutoModel's ``FakeBalancedGate`` (``fake_balanced_gate: true``, noise 0): token ``i`` goes to
  experts ``(i * k + j) mod E``, ``j < k`` (``nemo_automodel/components/moe/layers.py`` L116-190 @ e45812012); ``D``
  is the exact mean over one period of that pattern.
"""

from __future__ import annotations

from math import comb, gcd

DISPATCHERS = ("alltoall", "deepep")
"""The EP dispatchers the time model knows (``deepep`` also stands for HybridEP)."""
ROUTINGS = ("balanced", "round_robin")
"""The routings the time model knows."""


def dispatch_rows_per_token(num_experts: int, topk: int, ep: int, dispatcher: str, routing: str) -> float:
    """Rows per token that the dispatch (and the combine) moves between the ``ep`` ranks of an expert group."""
    if dispatcher == "alltoall" or ep <= 1 or num_experts < ep or num_experts % ep:
        return float(topk)
    per = num_experts // ep
    k = min(topk, num_experts)
    if routing == "round_robin":
        period = num_experts // gcd(num_experts, k)
        hit = sum(len({((i * k + j) % num_experts) // per for j in range(k)}) for i in range(period))
        return hit / period
    return ep * (1.0 - comb(num_experts - per, k) / comb(num_experts, k))
