"""Drives the server with the official OpenAI Python client, unchanged.

Usage: openai_client.py BASE_URL. Exits non-zero on any mismatch.
"""
import sys

from openai import OpenAI

client = OpenAI(base_url=sys.argv[1], api_key="unused")

models = [m.id for m in client.models.list()]
assert models == ["stories"], models

full = client.completions.create(model="stories", prompt="Once upon a time", max_tokens=24, temperature=0)
text = full.choices[0].text
assert text and full.choices[0].finish_reason == "length", full
assert full.usage.completion_tokens == 24, full.usage

streamed = ""
usage = None
for chunk in client.completions.create(model="stories", prompt="Once upon a time", max_tokens=24,
                                       temperature=0, stream=True, stream_options={"include_usage": True}):
    if chunk.choices:
        streamed += chunk.choices[0].text
    if chunk.usage:
        usage = chunk.usage
assert streamed == text, (streamed, text)
assert usage is not None and usage.completion_tokens == 24, usage

chat = client.chat.completions.create(model="stories", messages=[{"role": "user", "content": "Once upon a time"}],
                                      max_tokens=16, temperature=0)
assert chat.choices[0].message.role == "assistant" and chat.choices[0].message.content, chat
pieces = []
for chunk in client.chat.completions.create(model="stories", messages=[{"role": "user", "content": "Once upon a time"}],
                                            max_tokens=16, temperature=0, stream=True):
    if chunk.choices and chunk.choices[0].delta.content:
        pieces.append(chunk.choices[0].delta.content)
assert "".join(pieces) == chat.choices[0].message.content, (pieces, chat.choices[0].message.content)

try:
    client.chat.completions.create(model="no-such-model", messages=[{"role": "user", "content": "hi"}])
    raise SystemExit("unknown model accepted")
except Exception as e:  # the client raises NotFoundError for 404
    assert getattr(e, "status_code", None) == 404, e

print("openai client ok:", repr(text[:40]))
