"""monoagent serve and its channels: the OpenAI-compatible API, webhooks, cron, notify destinations."""
