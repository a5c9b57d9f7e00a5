"""Shared test helpers."""

from __future__ import annotations

import pytest


@pytest.fixture
def failing_decision():
    """``make(after, message) -> (decision, calls)``: a spec-signature decision that applies every
    codec and raises RuntimeError(message) once it has been called more than ``after`` times;
    ``calls`` lists the chunk indices it saw."""

    def make(after: int, message: str):
        calls: list = []

        def decide(chunk_index, codec, unencoded_chunk):
            calls.append(chunk_index)
            if len(calls) > after:
                raise RuntimeError(message)
            return True

        return decide, calls

    return make
