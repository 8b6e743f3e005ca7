#!/usr/bin/env node
// A small ACP client built on the official TypeScript SDK (@agentclientprotocol/sdk, pinned in
// package.json beside this file), written the way the SDK's README and migration guide show
// (2.x has no ClientSideConnection: `client().connectWith(ndJsonStream(...), ctx => ...)`),
// with the care an editor should take over the systemPrompt RFD. acp-fuzz runs it
// (tests/realagent/test_sdk_clients.py, docs/findings.md) to see what the SDK puts on the wire.
//
//   node client.mjs [--override] [--ungated] [--system-prompt TEXT] [session|new|reattach] PROMPT...
//
// The agent is the command line in $ACP_FUZZ_AGENT (run by /bin/sh, as `--agent CMD` clients
// do). `session` (the default): initialize, session/new (with the system prompt where
// sessionCapabilities.systemPrompt is advertised; `override` only with --override and only
// where mode.override is advertised, else append), prompt; then, as after an editor restart,
// a second agent process: initialize, reattach (session/load where loadSession is advertised,
// else session/resume where sessionCapabilities.resume is), re-sending the prompt the session
// was created with, prompt again, and session/close where advertised. `new` does the first
// half and keeps the session in $HOME/.acp-fuzz-ts-sdk-client.json; `reattach` the second.
// `--ungated` is the careless client, kept to show what the SDK does with it: it sends the
// system prompt (append) whether or not the agent advertised it, and the SDK neither strips it
// nor refuses it (its client side validates no outgoing request).
// The /unstable entrypoint: systemPrompt and its capability are unstable features of 2.4.0
// (MIGRATION_STABLE_UNSTABLE.md), and `fork` too.

import { spawn } from "node:child_process";
import { readFileSync, writeFileSync } from "node:fs";
import { homedir } from "node:os";
import { join } from "node:path";
import { Readable, Writable } from "node:stream";

import * as acp from "@agentclientprotocol/sdk/unstable";

const STATE = join(homedir(), ".acp-fuzz-ts-sdk-client.json");

function parseArgs(argv) {
  const opts = { override: false, ungated: false, system: "You are a careful assistant. Answer in one short sentence.",
    command: "session", words: [] };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    if (a === "--override") opts.override = true;
    else if (a === "--ungated") opts.ungated = true;
    else if (a === "--system-prompt") opts.system = argv[++i] ?? "";
    else opts.words.push(a);
  }
  if (["session", "new", "reattach"].includes(opts.words[0])) opts.command = opts.words.shift();
  opts.text = opts.words.join(" ") || "hello";
  return opts;
}

// One agent process and one SDK connection, for the length of `op(ctx)`.
async function withAgent(op) {
  const command = process.env.ACP_FUZZ_AGENT;
  if (!command) throw new Error("$ACP_FUZZ_AGENT is not set");
  const child = spawn(command, { shell: true, stdio: ["pipe", "pipe", "inherit"] });
  const stream = acp.ndJsonStream(Writable.toWeb(child.stdin), Readable.toWeb(child.stdout));
  try {
    return await acp
      .client({ name: "acp-fuzz-ts-sdk-client" })
      .onNotification(acp.methods.client.session.update, ({ params }) => {
        const u = params.update;
        if (u.sessionUpdate === "agent_message_chunk" && u.content.type === "text") {
          process.stdout.write(u.content.text + "\n");
        }
      })
      .connectWith(stream, op);
  } finally {
    child.kill();
  }
}

async function initialize(ctx) {
  const init = await ctx.request(acp.methods.agent.initialize, {
    protocolVersion: acp.PROTOCOL_VERSION,
    clientCapabilities: { fs: { readTextFile: false, writeTextFile: false }, terminal: false },
    clientInfo: { name: "acp-fuzz-ts-sdk-client", version: "1.0.0" },
  });
  return init.agentCapabilities ?? {};
}

// The systemPrompt to send to an agent with these capabilities, or undefined.
function systemPromptFor(caps, opts) {
  const advertised = caps.sessionCapabilities?.systemPrompt;
  if (opts.ungated) return { mode: "append", content: [{ type: "text", text: opts.system }] };
  if (advertised == null) return undefined;
  const mode = opts.override && advertised.mode?.override != null ? "override" : "append";
  return { mode, content: [{ type: "text", text: opts.system }] };
}

async function create(opts) {
  return withAgent(async (ctx) => {
    const caps = await initialize(ctx);
    const systemPrompt = systemPromptFor(caps, opts);
    const request = { cwd: process.cwd(), mcpServers: [] };
    if (systemPrompt) request.systemPrompt = systemPrompt;
    const session = await ctx.buildSession(request).start();
    try {
      await session.prompt(opts.text);
    } finally {
      session.dispose();
    }
    // What the editor keeps: the prompt the session was created with (none if none was sent).
    return { sessionId: session.sessionId, cwd: request.cwd, systemPrompt: systemPrompt ?? null };
  });
}

async function reattach(state, opts) {
  return withAgent(async (ctx) => {
    const caps = await initialize(ctx);
    const params = { sessionId: state.sessionId, cwd: state.cwd, mcpServers: [] };
    // Re-send the session's own prompt (SP-CLIENT-RESEND-SHOULD), where the field is advertised.
    if (state.systemPrompt && (opts.ungated || caps.sessionCapabilities?.systemPrompt != null)) {
      params.systemPrompt = state.systemPrompt;
    }
    if (caps.loadSession) {
      await ctx.request(acp.methods.agent.session.load, params);
    } else if (caps.sessionCapabilities?.resume != null) {
      await ctx.request(acp.methods.agent.session.resume, params);
    } else {
      process.stderr.write("the agent can neither load nor resume a session\n");
      return false;
    }
    await ctx.request(acp.methods.agent.session.prompt, {
      sessionId: state.sessionId,
      prompt: [{ type: "text", text: opts.text }],
    });
    if (caps.sessionCapabilities?.close != null) {
      await ctx.request(acp.methods.agent.session.close, { sessionId: state.sessionId });
    }
    return true;
  });
}

async function main() {
  const opts = parseArgs(process.argv.slice(2));
  if (opts.command === "new") {
    writeFileSync(STATE, JSON.stringify(await create(opts)));
  } else if (opts.command === "reattach") {
    await reattach(JSON.parse(readFileSync(STATE, "utf8")), opts);
  } else {
    await reattach(await create(opts), opts);
  }
}

main().then(
  () => process.exit(0),
  (error) => {
    process.stderr.write(`acp-fuzz-ts-sdk-client: ${error?.message ?? error}\n`);
    process.exit(1);
  },
);
