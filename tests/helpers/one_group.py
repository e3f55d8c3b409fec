"""Enough of torchft's Manager for a loader that needs no quorum: one group that trains
alone (used by the tests and by scripts/crash_with_workers.py)."""


class OneGroup:
    def participating_rank(self):
        return 0

    def num_participants(self):
        return 1

    def is_participating(self):
        return True

    def batches_committed(self):
        return 0

    def current_step(self):
        return 0

    def errored(self):
        return None

    def allreduce(self, tensor, reduce_op=None):
        class Done:
            def wait(self):
                return tensor

        return Done()


class Joined(OneGroup):
    """A group that commits every step it is stepped past (``step += 1``), with
    ``groups(step)`` groups training at each step, this one first: the others join."""

    def __init__(self, groups):
        self.groups = groups
        self.step = 0

    def current_step(self):
        return self.step

    def num_participants(self):
        return self.groups(self.step)

    def allreduce(self, tensor, reduce_op=None):
        tensor[: len(tensor) - 1] = 1.0  # every group trains; the committed count is this one's
        return super().allreduce(tensor, reduce_op)
