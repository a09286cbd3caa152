// A client-tools provider the way loomcycle's ClientToolHost speaks (protocol v1, the `ws`
// package, the bearer token in the subprotocol list), for the end-to-end tests.
//
// Usage: node provider.mjs URL TOKEN [protocol-pongs-only]
// Registers: `empty` (input_schema {}), `props` (properties without a type), `stringly` (a
// schema of a string, which glovebox refuses), `echo` (answers with the input's `text` as a JSON
// string value), `fail` (answers ok: false) and `slow` (answers after `ms` milliseconds). Prints every
// frame it receives as one JSON line; answers `ping` frames, unless `protocol-pongs-only` (as
// loomcycle's unmodified host: only `ws` itself answers, with the WebSocket protocol's pongs).

import WebSocket from "ws";

const [url, token, mode] = process.argv.slice(2);
const answersPings = mode !== "protocol-pongs-only";
const socket = new WebSocket(url, ["loomcycle.client-tools.v1", `bearer.${token}`]);
const emit = (value) => process.stdout.write(JSON.stringify(value) + "\n");
const send = (frame) => socket.send(JSON.stringify(frame));

socket.on("open", () => {
  emit({ type: "open", protocol: socket.protocol });
  send({
    type: "hello",
    client: "loomcycle-e2e",
    tools: [
      { name: "empty", description: "no schema to speak of", input_schema: {} },
      { name: "props", description: "properties, no type", input_schema: { properties: { q: { type: "string" } } } },
      { name: "stringly", description: "a string schema", input_schema: { type: "string" } },
      { name: "echo", description: "echoes text", input_schema: { type: "object", properties: { text: { type: "string" } } } },
      { name: "fail", description: "always fails", input_schema: { type: "object" } },
      { name: "slow", description: "answers late", input_schema: { type: "object", properties: { ms: { type: "integer" } } } },
    ],
  });
});

socket.on("message", (data) => {
  const frame = JSON.parse(data.toString());
  emit(frame);
  if (frame.type === "ping") {
    if (answersPings) send({ type: "pong" });
  } else if (frame.type === "invoke") {
    const answer = (result) => send({ type: "result", call_id: frame.call_id, ...result });
    if (frame.tool === "echo") answer({ ok: true, output: frame.input.text ?? "" });
    else if (frame.tool === "fail") answer({ ok: false, error: "element not found" });
    else if (frame.tool === "slow") setTimeout(() => answer({ ok: true, output: "late" }), frame.input.ms ?? 1000);
    else answer({ ok: true, output: frame.input });
  }
});

socket.on("close", (code) => {
  emit({ type: "closed", code });
  process.exit(0);
});
socket.on("error", (e) => {
  emit({ type: "socket_error", message: String(e.message ?? e) });
  process.exit(1);
});
