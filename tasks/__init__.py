"""The shipped multi-robot task files (data: ``onboard.collab.taskfile`` reads them)."""
