"""Another process reads and extends what this one wrote: the stored form, not one process's state.

A store may set up once per process what it reads records with (a converter, a compiled schema,
a cache of parsed records), so a test inside one process sees that set-up only as it was made
there. :func:`load_and_extend` runs a fresh interpreter (the parent's ``sys.path`` as
``PYTHONPATH``, so that it imports exactly the code under test, mutated modules included, like
the crash harness's writers) that builds the store from the factory, loads each conversation it
is given, commits the given messages to it and reports what it loaded.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from collections.abc import Sequence

from monoagent._kernel.model import Message
from monoagent.testing.durability.crash import same_code_env

SCRIPT = textwrap.dedent(
    r"""
    import asyncio, importlib, json, sys
    from monoagent._kernel.model import Message
    from monoagent._kernel.serial import converter

    module, _, attribute = sys.argv[1].partition(":")
    factory = getattr(importlib.import_module(module), attribute)
    job = json.loads(sys.stdin.read())

    async def main():
        store = factory(job["directory"])
        loaded = []
        try:
            for conversation, messages in job["steps"]:
                loaded.append([converter.unstructure(m) for m in await store.load(conversation)])
                if messages:
                    await store.commit(conversation, converter.structure(messages, list[Message]))
        finally:
            await store.close()
        return loaded

    sys.stdout.write(json.dumps(asyncio.run(main())))
    """
)

DEADLINE = 120.0
"""Seconds the other process may take (a bound that turns a hang into a failure, never a measure of speed)."""


def load_and_extend(factory: str, directory: str, steps: Sequence[tuple[str, Sequence[Message]]]) -> list[list[Message]]:
    """In a fresh process: for each ``(conversation, messages)``, load the conversation, then commit ``messages`` (if any).

    Returns what that process loaded at each step. Fails naming the other process's error when it fails.
    """
    from monoagent._kernel.serial import converter

    job = {"directory": directory, "steps": [(conversation, converter.unstructure(list(messages))) for conversation, messages in steps]}
    done = subprocess.run([sys.executable, "-c", SCRIPT, factory], input=json.dumps(job), capture_output=True, text=True,
                          env=same_code_env(), timeout=DEADLINE, check=False)
    if done.returncode != 0:
        raise AssertionError(f"the other process failed (status {done.returncode}): {done.stderr.strip()[-2000:]}")
    return [converter.structure(messages, list[Message]) for messages in json.loads(done.stdout)]
