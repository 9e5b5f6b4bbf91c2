// Drives Narwhal with the official OpenAI JavaScript SDK and prints what the SDK saw as one JSON
// line; tests/sdk_test.go starts the router and checks it. Usage: node check.mjs <baseURL> <apiKey>
import OpenAI from "openai";

const client = new OpenAI({ baseURL: process.argv[2], apiKey: process.argv[3], maxRetries: 0 });
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

const rstream = await client.responses.create({
  model: "sim-model",
  input: "hello",
  instructions: "be brief",
  max_output_tokens: 3,
  stream: true,
});
out.responsesStream = "";
out.responsesEvents = [];
for await (const ev of rstream) {
  out.responsesEvents.push(ev.type);
  if (ev.type === "response.output_text.delta") out.responsesStream += ev.delta;
  if (ev.type === "response.completed" || ev.type === "response.incomplete") out.responsesUsage = ev.response.usage.output_tokens;
}

const response = await client.responses.create({
  model: "sim-model",
  input: [{ role: "user", content: [{ type: "input_text", text: "hello" }] }],
});
out.responseText = response.output_text;
out.responseStatus = response.status;

try {
  await client.responses.create({ model: "sim-model", input: "hi", previous_response_id: "resp_earlier" });
} catch (e) {
  out.previousResponse = { status: e.status, param: e.param ?? e.error?.param };
}

const rbroken = await client.responses.create({ model: "sim-model", input: "@sim:decode.close_after=2", stream: true });
out.responsesBrokenText = "";
for await (const ev of rbroken) {
  if (ev.type === "response.output_text.delta") out.responsesBrokenText += ev.delta;
  out.responsesBrokenLast = ev.type;
}

const emb = await client.embeddings.create({ model: "sim-model", input: ["one two", "three"] });
out.embeddings = emb.data.map((d) => Array.from(d.embedding).length);

const model = await client.models.retrieve("sim-model");
out.model = { id: model.id, object: model.object };
try {
  await client.models.retrieve("no-such-model");
} catch (e) {
  out.unknownRetrieve = e.status;
}

try {
  await new OpenAI({ baseURL: process.argv[2], apiKey: "wrong-key", maxRetries: 0 }).models.list();
} catch (e) {
  out.wrongKey = { status: e.status, code: e.code ?? e.error?.code };
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
