// Drives Narwhal with the official OpenAI JavaScript SDK and prints what the SDK saw as one JSON
// line; tests/sdk_test.go starts the router and checks it. Usage: node check.mjs <baseURL>
import OpenAI from "openai";

const client = new OpenAI({ baseURL: process.argv[2], apiKey: "unused", maxRetries: 0 });
const out = {};

const chat = await client.chat.completions.create({
  model: "sim-model",
  messages: [{ role: "user", content: "hello" }],
  max_completion_tokens: 4,
  stream: true,
  stream_options: { include_usage: true },
});
out.chatStream = "";
for await (const chunk of chat) {
  out.chatStream += chunk.choices[0]?.delta?.content ?? "";
  if (chunk.usage) out.chatUsage = chunk.usage.completion_tokens;
}

const completion = await client.completions.create({ model: "sim-model", prompt: "hello", max_tokens: 3 });
out.completionText = completion.choices[0].text;
out.completionFinish = completion.choices[0].finish_reason;

try {
  await client.completions.create({ model: "no-such-model", prompt: "hello" });
} catch (e) {
  out.unknownModel = { status: e.status, code: e.code ?? e.error?.code };
}

const broken = await client.chat.completions.create({
  model: "sim-model",
  messages: [{ role: "user", content: "@sim:decode.close_after=2" }],
  stream: true,
});
out.brokenText = "";
try {
  for await (const chunk of broken) out.brokenText += chunk.choices[0]?.delta?.content ?? "";
} catch (e) {
  out.brokenError = { name: e.constructor.name, message: e.message };
}

// A 9 MiB prompt is over server.max_body_bytes (8 MiB): the SDK must read the 413, not see the
// connection reset while it is still uploading.
try {
  await client.completions.create({ model: "sim-model", prompt: "x".repeat(9 << 20), max_tokens: 1 });
  out.oversized = { name: "no error" };
} catch (e) {
  out.oversized = { name: e.constructor.name, status: e.status ?? 0, code: e.code ?? e.error?.code ?? "",
    cause: e.cause?.code ?? "" };
}

console.log(JSON.stringify(out));
