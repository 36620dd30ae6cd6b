"""What a run leaves and hides: run artifacts, the logs command, redaction."""
