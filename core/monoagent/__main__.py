"""``python -m monoagent``: the same command as the ``monoagent`` console script."""

from monoagent._cli import main

main()
