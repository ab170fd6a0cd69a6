"""The LLM over HTTP: chat client, prompts and schemas, reply parsing, the local server."""
