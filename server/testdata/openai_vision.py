"""Sends images through the official OpenAI Python client, unchanged.

Usage: openai_vision.py BASE_URL MODEL, with two image data URLs (red,
then blue) on stdin, one per line. Exits non-zero on any mismatch.
"""
import sys

from openai import OpenAI

client = OpenAI(base_url=sys.argv[1], api_key="unused")
model = sys.argv[2]
red, blue = sys.stdin.read().split()


def ask(url, stream=False):
    messages = [{"role": "user", "content": [
        {"type": "text", "text": "What colour is this?"},
        {"type": "image_url", "image_url": {"url": url, "detail": "auto"}},
    ]}]
    args = dict(model=model, messages=messages, max_tokens=10, temperature=0, logprobs=True,
                extra_body={"ignore_eos": True})
    if not stream:
        answer = client.chat.completions.create(**args)
        choice = answer.choices[0]
        assert choice.finish_reason == "length", answer
        assert answer.usage.completion_tokens == 10, answer.usage
        return choice.message.content, [t.logprob for t in choice.logprobs.content]
    pieces, logprobs = [], []
    for chunk in client.chat.completions.create(stream=True, **args):
        if chunk.choices and chunk.choices[0].delta.content:
            pieces.append(chunk.choices[0].delta.content)
        if chunk.choices and chunk.choices[0].logprobs and chunk.choices[0].logprobs.content:
            logprobs += [t.logprob for t in chunk.choices[0].logprobs.content]
    return "".join(pieces), logprobs


# The tiny model's weights are random: its greedy text may not tell the
# images apart, its log-probabilities do.
r = ask(red)
assert r[0] and len(r[1]) == 10, r
assert ask(red, stream=True) == r, "streamed answer differs"
b = ask(blue)
assert b != r, ("red and blue gave the same answer", r)
print("openai client with images ok:", repr(r[0]), repr(b[0]), r[1][0], b[1][0])
