"""EP dispatch rows per token (mlite.time.routing) against direct enumeration of the routings."""

from itertools import combinations

import pytest

from mlite.time.routing import dispatch_rows_per_token


def _ranks(experts, per):
    return len({e // per for e in experts})


@pytest.mark.parametrize(("e", "k", "ep"), [(8, 2, 4), (12, 3, 4), (16, 6, 8), (10, 4, 2)])
def test_balanced_is_the_mean_over_every_expert_choice(e, k, ep):
    """Uniform top-k without replacement: the mean count of distinct ranks over all C(E, k) choices."""
    choices = list(combinations(range(e), k))
    want = sum(_ranks(c, e // ep) for c in choices) / len(choices)
    assert dispatch_rows_per_token(e, k, ep, "deepep", "balanced") == pytest.approx(want, rel=1e-12)


@pytest.mark.parametrize(("e", "k", "ep"), [(128, 8, 8), (128, 6, 8), (64, 6, 8), (16, 3, 4)])
def test_round_robin_follows_the_fake_balanced_gate(e, k, ep):
    """AutoModel's FakeBalancedGate: token i to experts (i*k + j) mod E; the mean over many tokens."""
    tokens = 4096
    want = sum(_ranks([(i * k + j) % e for j in range(k)], e // ep) for i in range(tokens)) / tokens
    assert dispatch_rows_per_token(e, k, ep, "deepep", "round_robin") == pytest.approx(want, rel=1e-12)


def test_alltoall_sends_one_row_per_expert_and_one_rank_sends_nothing_apart():
    assert dispatch_rows_per_token(128, 8, 8, "alltoall", "round_robin") == 8
    assert dispatch_rows_per_token(128, 8, 1, "deepep", "balanced") == 8
    assert dispatch_rows_per_token(128, 8, 8, "deepep", "round_robin") == 1  # 8 consecutive experts, 16 per rank
