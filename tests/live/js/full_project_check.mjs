// tests/fixtures/full_project through the official JS SDK: custom auth, a run, semantic Store search, sealed state.
import { Client } from "@langchain/langgraph-sdk";

const client = new Client({
  apiUrl: process.env.DEERFLOW_URL,
  defaultHeaders: { Authorization: process.env.DEERFLOW_AUTH },
});
const human = (text) => ({ messages: [{ role: "user", content: text }] });
const out = {};

const thread = await client.threads.create();
out.org_id = thread.metadata.org_id;
const said = await client.runs.wait(thread.thread_id, "whoami", { input: human("who?") });
out.whoami = said.messages.at(-1).content;
await client.runs.wait(thread.thread_id, "agent", { input: human("/remember the js-7 review is on Monday") });
const found = await client.store.searchItems(["memories"], { query: "when is the js-7 review" });
out.top_memory = found.items[0].value.text;
out.top_score = found.items[0].score;
const state = await client.threads.getState(thread.thread_id);
out.state_text = JSON.stringify(state.values.messages);
console.log(JSON.stringify(out));
