import pytest
from pydantic import ValidationError

from tokenmill.config import TrainConfig
from tokenmill.train.budget import BudgetError, resolve_budget, tokens_per_step


def test_step_knobs_pass_through_when_no_token_knob_is_set():
    tc = TrainConfig(micro_batch=4, seq_len=64, grad_accum=3, max_steps=17, warmup_steps=5)
    assert resolve_budget(tc, 2) == tc


def test_global_batch_fixes_the_tokens_per_step_for_any_world_size():
    tc = TrainConfig(micro_batch=4, seq_len=64, global_batch_tokens=4 * 64 * 8)
    for world, accum in ((1, 8), (2, 4), (4, 2), (8, 1)):
        r = resolve_budget(tc, world)
        assert r.grad_accum == accum and tokens_per_step(r, world) == 2048


def test_token_budget_and_warmup_in_tokens():
    tc = TrainConfig(micro_batch=4, seq_len=64, global_batch_tokens=2048, max_tokens=2048 * 100 + 1,
                     warmup_tokens=2048 * 10 + 500)
    r = resolve_budget(tc, 2)
    assert r.max_steps == 101  # ceil: the budget is never cut short
    assert r.warmup_steps == 10


@pytest.mark.parametrize("bad", [1000, 256 * 3 - 1, 100])
def test_a_global_batch_of_no_whole_number_of_micro_batches_is_refused_by_the_config(bad):
    with pytest.raises(ValidationError, match="global_batch_tokens"):  # for any world size
        TrainConfig(micro_batch=4, seq_len=64, global_batch_tokens=bad)


@pytest.mark.parametrize("bad", [256, 256 * 4])
def test_a_global_batch_that_does_not_divide_over_the_ranks_is_a_clear_error(bad):
    tc = TrainConfig(micro_batch=4, seq_len=64, global_batch_tokens=bad)
    with pytest.raises(BudgetError, match="global_batch_tokens"):
        resolve_budget(tc, 3)


def test_a_budget_below_one_step_is_an_error():
    with pytest.raises(BudgetError, match="max_tokens"):
        resolve_budget(TrainConfig(micro_batch=4, seq_len=64, max_tokens=100), 1)
