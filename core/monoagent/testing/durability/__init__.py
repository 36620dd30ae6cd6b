"""The durability contract for history stores (:class:`HistoryDurabilityContract`) and its two harnesses.

:mod:`.contract` holds the tests, :mod:`.crash` the SIGKILL harness (a writer process killed at
a random moment) and :mod:`.filesystem` the Python-level file-system tap that records a commit's
operations, enumerates the states a power cut could leave and fails the k-th operation.
"""

from monoagent.testing.durability.contract import HistoryDurabilityContract

__all__ = ["HistoryDurabilityContract"]
