"""Structured outputs through the official OpenAI Python client, unchanged:
client.chat.completions.parse with a pydantic model, and a streamed
json_schema request.

Usage: openai_parse.py BASE_URL MODEL. Exits non-zero on any mismatch.
"""
import json
import sys
from typing import Literal

from openai import OpenAI
from pydantic import BaseModel, Field

client = OpenAI(base_url=sys.argv[1], api_key="unused")
model = sys.argv[2]


class Pet(BaseModel):
    name: str = Field(max_length=12)
    legs: int = Field(ge=0, le=8)
    kind: Literal["cat", "dog"]


messages = [{"role": "user", "content": "Once upon a time"}]
done = client.chat.completions.parse(model=model, messages=messages, response_format=Pet, max_tokens=200, temperature=0)
choice = done.choices[0]
assert choice.finish_reason == "stop", done
pet = choice.message.parsed
assert isinstance(pet, Pet), done
print("parsed:", pet)

# As strict mode asks: no properties beyond the model's.
strict = Pet.model_json_schema() | {"additionalProperties": False}
schema = {"type": "json_schema", "json_schema": {"name": "pet", "strict": True, "schema": strict}}
text, finish = "", None
for chunk in client.chat.completions.create(model=model, messages=messages, response_format=schema, max_tokens=200,
                                            temperature=0, stream=True):
    if chunk.choices and chunk.choices[0].delta.content:
        text += chunk.choices[0].delta.content
    if chunk.choices and chunk.choices[0].finish_reason:
        finish = chunk.choices[0].finish_reason
assert finish == "stop", (finish, text)
Pet.model_validate(json.loads(text))
print("streamed:", text)
