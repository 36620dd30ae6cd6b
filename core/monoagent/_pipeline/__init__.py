"""The turn pipeline: one turn from request to committed result.

:mod:`~monoagent._pipeline.harness` (lanes, admission, slots, the commit) ->
:mod:`~monoagent._pipeline.assembly` (sections, cache boundary, manifest) ->
:mod:`~monoagent._pipeline.provider_call` (attempts, retries, fallbacks), reading each step with
:mod:`~monoagent._pipeline.stream` (the bounded stream) and retrying with
:mod:`~monoagent._pipeline.stateless` (the snapshot prompt) ->
:mod:`~monoagent._pipeline.tool_loop` (offered tools, each call, the repeated-call guard) with
:mod:`~monoagent._pipeline.bloat` (tool-output guard) -> commit, or on failure
:mod:`~monoagent._pipeline.continuity` (publishing the bounded continuity account of
:mod:`~monoagent._pipeline.continuity_account`), with
:mod:`~monoagent._pipeline.tool_lifecycle` recording every tool call.
"""
