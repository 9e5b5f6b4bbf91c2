// Drives Narwhal's Messages API with the official Anthropic TypeScript SDK and prints what the SDK
// saw as one JSON line; tests/messages_test.go starts the router and checks it.
// Usage: node messages.mjs <baseURL> <apiKey>
import Anthropic from "@anthropic-ai/sdk";

const base = process.argv[2];
// The SDK sends the key as x-api-key, with its anthropic-version.
const client = new Anthropic({ baseURL: base, apiKey: process.argv[3], maxRetries: 0 });
const out = {};
const user = (content) => [{ role: "user", content }];
const failure = (e) => ({
  name: e.constructor.name, status: e.status ?? 0, type: e.type ?? e.error?.error?.type ?? "", message: e.message,
  requestID: e.requestID ?? "",
});

// Non-streaming, with every sampling field mapped.
const { data: msg, response: raw } = await client.messages
  .create({
    model: "sim-model", max_tokens: 3, system: [{ type: "text", text: "be brief" }], messages: user("hello"),
    temperature: 0.5, top_p: 0.9, top_k: 20, stop_sequences: ["###"], metadata: { user_id: "u-1" },
  })
  .withResponse();
out.message = {
  type: msg.type, role: msg.role, text: msg.content.map((b) => b.text).join(""), stopReason: msg.stop_reason,
  usage: msg.usage, requestID: msg._request_id, header: raw.headers.get("x-request-id"),
};

// Streaming with the SDK's stream helper: its text events and its final message.
const stream = client.messages.stream({ model: "sim-model", max_tokens: 4, messages: user("stream please") });
const events = [];
let streamed = "";
stream.on("streamEvent", (ev) => events.push(ev.type));
stream.on("text", (t) => (streamed += t));
const final = await stream.finalMessage();
out.stream = { text: streamed, events, finalText: final.content[0]?.text, stopReason: final.stop_reason, usage: final.usage };

// A tool use round trip: the model calls the tool, the client answers with its result.
const tools = [{ name: "get_weather", description: "weather in a city",
  input_schema: { type: "object", properties: { city: { type: "string" } }, required: ["city"] } }];
const call = await client.messages.create({
  model: "sim-model", max_tokens: 8, tools, tool_choice: { type: "auto" }, messages: user("@sim:decode.tool_call weather?"),
});
const toolUse = call.content.find((b) => b.type === "tool_use");
const answer = await client.messages.create({
  model: "sim-model", max_tokens: 2, tools,
  messages: [
    ...user("@sim:decode.tool_call weather?"),
    { role: "assistant", content: call.content },
    { role: "user", content: [{ type: "tool_result", tool_use_id: toolUse.id, content: [{ type: "text", text: "sunny" }] }] },
  ],
});
out.tools = { stopReason: call.stop_reason, name: toolUse.name, input: toolUse.input, answerText: answer.content[0]?.text,
  answerStop: answer.stop_reason };
// The same call streamed: the tool's input arrives as input_json_delta.
const toolStream = client.messages.stream({ model: "sim-model", max_tokens: 8, tools, messages: user("@sim:decode.tool_call") });
let partial = "";
toolStream.on("inputJson", (delta) => (partial += delta));
const toolFinal = await toolStream.finalMessage();
out.toolStream = { partial, input: toolFinal.content.find((b) => b.type === "tool_use")?.input, stopReason: toolFinal.stop_reason };

// Failures before the first token: the mapped status in Anthropic's error shape.
try {
  await client.messages.create({ model: "sim-model", max_tokens: 4, messages: user("@sim:decode.status=503") });
} catch (e) {
  out.before503 = failure(e);
}
try {
  const s = client.messages.stream({ model: "sim-model", max_tokens: 4, messages: user("@sim:decode.hang_first_token") });
  await s.finalMessage();
} catch (e) {
  out.before504Stream = failure(e);
}
try {
  await client.messages.create({ model: "sim-model", max_tokens: 4, messages: user("x"), thinking: { type: "enabled", budget_tokens: 1024 } });
} catch (e) {
  out.refused = failure(e);
}

// A failure after the first token ends the stream with Anthropic's error event.
const broken = client.messages.stream({ model: "sim-model", max_tokens: 4, messages: user("@sim:decode.close_after=2") });
let brokenText = "";
broken.on("text", (t) => (brokenText += t));
try {
  await broken.finalMessage();
} catch (e) {
  out.after = { ...failure(e), text: brokenText };
}

// An abort after the first token: the router must abort the engine's leg (the test reads the
// simulator's abort counter).
const slow = client.messages.stream({ model: "sim-model", max_tokens: 4, messages: user("@sim:decode.silence_after=1") });
await new Promise((resolve) => slow.on("text", resolve));
slow.abort();
out.aborted = await slow.done().then(() => false, (e) => e.constructor.name === "APIUserAbortError");

try {
  await client.messages.countTokens({ model: "sim-model", messages: user("hello") });
} catch (e) {
  out.countTokens = failure(e);
}
try {
  await new Anthropic({ baseURL: base, apiKey: "wrong-key", maxRetries: 0 }).messages.create({
    model: "sim-model", max_tokens: 1, messages: user("hi") });
} catch (e) {
  out.wrongKey = failure(e);
}

console.log(JSON.stringify(out));
