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
