// Drive the server with the official JS SDK; print one JSON object of observations.
import { Client } from "@langchain/langgraph-sdk";

const client = new Client({ apiUrl: process.env.DEERFLOW_URL, apiKey: process.env.DEERFLOW_KEY });
const human = (text) => ({ messages: [{ role: "user", content: text }] });
const out = {};

const thread = await client.threads.create({ metadata: { sdk: "js" } });
out.thread_id = thread.thread_id;

const waited = await client.runs.wait(thread.thread_id, "lead_agent", { input: human("from js") });
out.wait_last = waited.messages.at(-1).content;

let created = null;
const events = [];
for await (const part of client.runs.stream(thread.thread_id, "lead_agent", {
  input: human("stream js"),
  streamMode: ["values", "messages-tuple"],
  onRunCreated: (meta) => { created = meta; },
})) {
  events.push(part.event);
}
out.stream_events = [...new Set(events)];
out.created = created;

const joined = [];
for await (const part of client.runs.joinStream(thread.thread_id, created.run_id, { lastEventId: "-1" })) {
  joined.push(part.event);
}
out.join_events = joined;

const history = await client.threads.getHistory(thread.thread_id, { limit: 2 });
const older = await client.threads.getHistory(thread.thread_id, { limit: 2, before: history.at(-1).checkpoint });
out.history_ids = history.map((s) => s.checkpoint.checkpoint_id);
out.older_ids = older.map((s) => s.checkpoint.checkpoint_id);

const found = await client.threads.search({ metadata: { sdk: "js" }, limit: 100 });
out.found = found.map((t) => t.thread_id).includes(thread.thread_id);

const slow = await client.runs.create(thread.thread_id, "lead_agent", { input: human("/slow 6") });
for (let i = 0; i < 100 && (await client.runs.get(thread.thread_id, slow.run_id)).status !== "running"; i++) {
  await new Promise((r) => setTimeout(r, 50));
}
await client.runs.cancel(thread.thread_id, slow.run_id, true, "interrupt");
out.cancelled_status = (await client.runs.get(thread.thread_id, slow.run_id)).status;

await client.threads.delete(thread.thread_id);
try {
  await client.threads.get(thread.thread_id);
  out.deleted = false;
} catch (error) {
  out.deleted = String(error).includes("404") || error.status === 404;
}
console.log(JSON.stringify(out));
