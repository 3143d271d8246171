"""Calls tools through the official OpenAI Python client, unchanged.

Usage: openai_tools.py BASE_URL MODEL ANSWER. The model is scripted to
call get_weather for Paris, then to answer ANSWER once it has the result.
Exits non-zero on any mismatch.
"""
import json
import sys

from openai import OpenAI

client = OpenAI(base_url=sys.argv[1], api_key="unused")
model, answer = sys.argv[2], sys.argv[3]
tools = [{
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather of a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}]
messages = [{"role": "user", "content": "What is the weather in Paris?"}]

first = client.chat.completions.create(model=model, messages=messages, tools=tools, tool_choice="auto")
choice = first.choices[0]
assert choice.finish_reason == "tool_calls", first
assert choice.message.content is None, first
(call,) = choice.message.tool_calls
assert call.type == "function" and call.function.name == "get_weather", call
assert json.loads(call.function.arguments) == {"city": "Paris"}, call

# Streamed, the call is put together from its deltas.
calls, finish = {}, None
for chunk in client.chat.completions.create(model=model, messages=messages, tools=tools, stream=True):
    if not chunk.choices:
        continue
    delta = chunk.choices[0].delta
    for d in delta.tool_calls or []:
        entry = calls.setdefault(d.index, {"id": None, "name": "", "arguments": ""})
        if d.id:
            entry["id"] = d.id
        if d.function and d.function.name:
            entry["name"] += d.function.name
        if d.function and d.function.arguments:
            entry["arguments"] += d.function.arguments
    finish = chunk.choices[0].finish_reason or finish
assert finish == "tool_calls", finish
assert list(calls) == [0] and calls[0]["id"] and calls[0]["name"] == "get_weather", calls
assert json.loads(calls[0]["arguments"]) == {"city": "Paris"}, calls

# The response message goes back as it came, then the tool's result.
messages.append(choice.message)
messages.append({"role": "tool", "tool_call_id": call.id, "content": json.dumps({"temp": 21, "sky": "clear"})})
second = client.chat.completions.create(model=model, messages=messages, tools=tools)
assert second.choices[0].finish_reason == "stop", second
assert second.choices[0].message.content == answer, second
assert not second.choices[0].message.tool_calls, second

# A tool_call_id that answers no call is the client's error.
try:
    client.chat.completions.create(model=model, tools=tools, messages=[
        {"role": "user", "content": "hi"}, {"role": "tool", "tool_call_id": "nope", "content": "x"}])
    raise SystemExit("a result of no call accepted")
except Exception as e:  # the client raises BadRequestError for 400
    assert getattr(e, "status_code", None) == 400, e

print("openai client tools ok:", call.id, second.choices[0].message.content)
