"""Every error a user meets names the problem and the fix, and every warning points at the
user's own line: the messages a new user hit, each as it must read now."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from torch.utils.data import DataLoader

import permshard
from permshard import ShardedSampler, TokenBudgetBatchSampler
from permshard.data import MixedDataset


def test_check_loader_of_something_that_is_not_a_loader():
    with pytest.raises(TypeError, match=r"check_loader needs the DataLoader.*got list"):
        permshard.check_loader([1, 2, 3])


def test_check_loader_of_a_dataset_without_a_length_names_total():
    loader = DataLoader(iter(range(3)), batch_size=None)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"pass total=len\(full_dataset\)"):
        permshard.check_loader(loader)


def test_verify_with_a_misspelt_field_names_it_and_the_fields():
    with pytest.raises(TypeError, match=r"verify\(\) got unexpected keyword argument\(s\) \['bogus'\]") as e:
        permshard.verify(10, 2, bogus=1)
    assert "EpochConfig" not in str(e.value) and "'seed'" in str(e.value)


def test_an_empty_token_budget_says_empty():
    with pytest.raises(ValueError, match="lengths is empty"):
        TokenBudgetBatchSampler([], 100, 1, 0)


def test_a_negative_length_is_not_called_empty():
    with pytest.raises(ValueError, match=r"at least 1, got -5: pass the number of samples"):
        ShardedSampler(-5, 1, 0)


def test_numpy_integers_are_lengths_as_they_are_seeds():
    assert list(ShardedSampler(np.int64(10), 1, 0, seed=np.int64(3))) == list(
        ShardedSampler(10, 1, 0, seed=3)
    )


def test_a_data_path_of_an_odd_number_of_words_names_the_pairs():
    with pytest.raises(ValueError, match=r"starts with a weight, so it must be pairs.*3 words"):
        MixedDataset.from_data_path("0.3 web 0.7", 128)


def test_a_state_of_another_sampler_is_called_so():
    budget = TokenBudgetBatchSampler(np.full(100, 3), 12, 1, 0, check_consensus=False)
    with pytest.raises(
        ValueError, match=r"saved by a TokenBudgetBatchSampler.*Load it into a TokenBudgetBatchSampler"
    ):
        ShardedSampler(100, 1, 0).load_state_dict(budget.state_dict())
    with pytest.raises(ValueError, match=r"saved by a ShardedSampler.*Load it into a ShardedSampler"):
        budget.load_state_dict(ShardedSampler(100, 1, 0).state_dict())


@pytest.mark.parametrize("saved, now", [(True, False), (False, True)])
def test_a_state_of_another_shuffle_names_the_fix(saved, now):
    state = ShardedSampler(100, 1, 0, shuffle=saved).state_dict()
    with pytest.raises(ValueError, match=rf"Build the sampler with shuffle={saved} to resume"):
        ShardedSampler(100, 1, 0, shuffle=now).load_state_dict(state)


def test_the_missing_set_epoch_warning_points_at_the_users_line():
    sampler = ShardedSampler(64, 1, 0)
    loader = DataLoader(range(64), batch_size=8, sampler=sampler)
    list(loader)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        list(loader)  # the same epoch again
    repeats = [w for w in caught if "without set_epoch()" in str(w.message)]
    assert len(repeats) == 1 and repeats[0].filename == __file__
