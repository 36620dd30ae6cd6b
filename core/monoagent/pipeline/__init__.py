"""The turn pipeline: one turn from request to committed result.

:mod:`~monoagent.pipeline.harness` (lanes, admission, slots, the commit) ->
:mod:`~monoagent.pipeline.assembly` (sections, cache boundary, manifest) ->
:mod:`~monoagent.pipeline.provider_call` (attempts, retries, fallbacks), reading each step with
:mod:`~monoagent.pipeline.stream` (the bounded stream) and retrying with
:mod:`~monoagent.pipeline.stateless` (the snapshot prompt) ->
:mod:`~monoagent.pipeline.tool_loop` (offered tools, each call, the repeated-call guard) with
:mod:`~monoagent.pipeline.bloat` (tool-output guard) -> commit, or on failure
:mod:`~monoagent.pipeline.continuity` (publishing the bounded continuity account of
:mod:`~monoagent.pipeline.continuity_account`), with
:mod:`~monoagent.pipeline.tool_lifecycle` recording every tool call.
"""
