// Structured outputs through the official OpenAI Node client, unchanged:
// chat.completions.parse with zodResponseFormat, then a streamed request
// with the same format.
//
// Usage: node openai_zod.mjs BASE_URL MODEL. Exits non-zero on a mismatch.
import OpenAI from "openai";
import { zodResponseFormat } from "openai/helpers/zod";
import { z } from "zod";

const [baseURL, model] = process.argv.slice(2);
const client = new OpenAI({ baseURL, apiKey: "unused" });
const Pet = z.object({
  name: z.string().max(12),
  legs: z.number().int().min(0).max(8),
  kind: z.enum(["cat", "dog"]),
});
const messages = [{ role: "user", content: "Once upon a time" }];
const format = zodResponseFormat(Pet, "pet");

const done = await client.chat.completions.parse({ model, messages, response_format: format, max_tokens: 200, temperature: 0 });
const choice = done.choices[0];
if (choice.finish_reason !== "stop" || !choice.message.parsed) {
  throw new Error("parse: " + JSON.stringify(done));
}
Pet.parse(choice.message.parsed);
console.log("parsed:", JSON.stringify(choice.message.parsed));

let text = "";
let finish = null;
const stream = await client.chat.completions.create({ model, messages, response_format: format, max_tokens: 200, temperature: 0, stream: true });
for await (const chunk of stream) {
  const c = chunk.choices[0];
  if (c?.delta?.content) text += c.delta.content;
  if (c?.finish_reason) finish = c.finish_reason;
}
if (finish !== "stop") throw new Error(`stream finished with ${finish}: ${text}`);
Pet.parse(JSON.parse(text));
console.log("streamed:", text);
