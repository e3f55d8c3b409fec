"""What the test modules share, none of it a test: the plain-Python references of every
algorithm (``reference_*``), the quality battery, the examples' files, process launchers
(``distributed``, ``torchrun``), the functions real ranks run (``*_workers``), torchft's
harness (``torchft_groups``), the native layer past the Python checks (``native``), and
the writer of the golden states of a release (``write_states``)."""
