"""``python -m monoagent.cli``: the same command as the ``monoagent`` console script."""

from monoagent.cli import main

main()
