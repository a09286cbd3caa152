// A real MCP client (the official TypeScript SDK) that the end-to-end tests drive line by line.
//
// Usage: node driver.mjs http URL TOKEN
//        node driver.mjs stdio GLOVEBOX_BIN STATE_DIR   (launches `glovebox mcp` as a stdio server)
//        node driver.mjs direct COMMAND_JSON CWD        (launches a server itself, no glovebox between)
//
// The same commands as driver.py, one JSON line each on stdin, one JSON line each on stdout:
//   {"op":"list"}, {"op":"call","id","tool","args"}, {"op":"cancel","id"} (aborts that call: the
//   SDK sends notifications/cancelled), {"op":"wait_change"}, {"op":"instructions"},
//   {"op":"quit"} (http: ends the session with DELETE first, and reports a failure to).
// The SDK validates what it receives: tool lists against its schema, and each result's
// structuredContent against the tool's outputSchema.

import { createInterface } from "node:readline";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { ToolListChangedNotificationSchema } from "@modelcontextprotocol/sdk/types.js";

const [mode, a, b] = process.argv.slice(2);
const emit = (value) => process.stdout.write(JSON.stringify(value) + "\n");

function startTransport() {
  if (mode === "http") {
    return new StreamableHTTPClientTransport(new URL(a), {
      requestInit: { headers: { Authorization: `Bearer ${b}` } },
    });
  }
  if (mode === "direct") {
    const [command, ...args] = JSON.parse(a);
    return new StdioClientTransport({ command, args, cwd: b, stderr: "inherit" });
  }
  return new StdioClientTransport({ command: a, args: ["mcp", "--state-dir", b], stderr: "inherit" });
}
const transport = startTransport();

const client = new Client({ name: "glovebox-e2e", version: "1.0.0" });
let changed = 0;
let onChange = null;
client.setNotificationHandler(ToolListChangedNotificationSchema, () => {
  changed += 1;
  if (onChange) onChange();
});
await client.connect(transport);

const calls = new Map();
const running = [];

// As driver.py prints a call: the content blocks as the SDK parsed them, and their kinds.
function callLine(id, result) {
  const content = result.content ?? [];
  const text = content.map((c) => c.text ?? "").join("");
  return {
    op: "call",
    id,
    is_error: Boolean(result.isError),
    text,
    structured: result.structuredContent ?? null,
    types: content.map((c) => c.type ?? null),
    content,
  };
}

for await (const line of createInterface({ input: process.stdin })) {
  if (!line.trim()) continue;
  const command = JSON.parse(line);
  if (command.op === "list") {
    const { tools } = await client.listTools();
    const facts = Object.fromEntries(
      tools.map((t) => [
        t.name,
        { read_only: t.annotations?.readOnlyHint ?? null, output_schema: t.outputSchema !== undefined, input_schema: t.inputSchema },
      ]),
    );
    emit({ op: "list", names: tools.map((t) => t.name), tools: facts });
  } else if (command.op === "call") {
    const abort = new AbortController();
    calls.set(command.id, abort);
    running.push(
      client
        .callTool({ name: command.tool, arguments: command.args ?? {} }, undefined, { signal: abort.signal, timeout: 60000 })
        .then((result) => emit(callLine(command.id, result)))
        .catch((e) => emit({ op: "call", id: command.id, exception: String(e?.message ?? e) })),
    );
  } else if (command.op === "cancel") {
    calls.get(command.id)?.abort("cancelled by the test");
  } else if (command.op === "wait_change") {
    if (changed === 0) {
      await new Promise((resolve, reject) => {
        const timer = setTimeout(() => reject(new Error("no tools/list_changed within 20 s")), 20000);
        onChange = () => {
          clearTimeout(timer);
          resolve();
        };
      });
      onChange = null;
    }
    changed = 0;
    emit({ op: "changed" });
  } else if (command.op === "instructions") {
    emit({ op: "instructions", text: client.getInstructions() ?? null });
  } else if (command.op === "quit") {
    break;
  }
}
await Promise.all(running);
if (mode === "http") {
  try {
    await transport.terminateSession();
    emit({ op: "terminated", session: transport.sessionId ?? null });
  } catch (e) {
    emit({ op: "terminated", error: String(e?.message ?? e) });
  }
}
await client.close();
emit({ op: "closed" });
// stdin's reader would keep the process alive
process.exit(0);
