// One WebSocket to the broker with K calls in flight: prints calls/s and the p50, p99 and worst
// latency of an allowed `file_read`. Driven by ws_pipelined.py; uses `ws` from tests/node_modules
// (`npm ci --prefix tests`).
//   node ws_pipelined.mjs URL TOKEN PATH CALLS IN_FLIGHT
import WebSocket from "../node_modules/ws/wrapper.mjs";

const [url, token, path] = process.argv.slice(2, 5);
const [calls, inFlight] = process.argv.slice(5, 7).map(Number);
const ws = new WebSocket(url, { headers: { Authorization: `Bearer ${token}` } });
await new Promise((opened, failed) => {
  ws.on("open", opened);
  ws.on("error", failed);
});
ws.send(JSON.stringify({ type: "hello", role: "agent" }));
await new Promise((said) => ws.once("message", said));

const sentAt = new Map();
const latencies = [];
let sent = 0;
let finish;
const finished = new Promise((done) => (finish = done));
function send() {
  const id = `c${sent++}`;
  sentAt.set(id, process.hrtime.bigint());
  ws.send(JSON.stringify({ type: "invoke", call_id: id, tool: "file_read", params: { path } }));
}
ws.on("message", (data) => {
  const frame = JSON.parse(data.toString());
  const start = frame.type === "result" ? sentAt.get(frame.call_id) : undefined;
  if (start === undefined) return;
  if (!frame.ok) {
    console.error(JSON.stringify(frame.error));
    process.exit(1);
  }
  sentAt.delete(frame.call_id);
  latencies.push(Number(process.hrtime.bigint() - start) / 1e6);
  if (sent < calls) send();
  else if (latencies.length === calls) finish();
});
const started = process.hrtime.bigint();
for (let i = 0; i < inFlight; i++) send();
await finished;
const seconds = Number(process.hrtime.bigint() - started) / 1e9;
latencies.sort((a, b) => a - b);
const at = (q) => latencies[Math.min(latencies.length - 1, Math.floor(latencies.length * q))];
console.log(
  `${(calls / seconds).toFixed(0)} calls/s, p50 ${at(0.5).toFixed(3)} ms, ` +
    `p99 ${at(0.99).toFixed(3)} ms, worst ${latencies.at(-1).toFixed(1)} ms`,
);
ws.close();
