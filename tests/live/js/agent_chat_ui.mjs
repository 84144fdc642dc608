// Call the server the way the Agent Chat UI does; print one JSON object of observations.
//
// The UI's package asks for @langchain/langgraph-sdk ^1.0.0: "ui" is 1.0.0 (it sends
// a list-valued query parameter as one JSON array, ?stream_mode=["values","messages-tuple"]),
// "client" the pinned 1.15.0 (it repeats the parameter). See tests/live/test_agent_chat_ui.py.
import { Client } from "@langchain/langgraph-sdk";
import { Client as UiClient } from "langgraph-sdk-v1-0";

const options = { apiUrl: process.env.DEERFLOW_URL, apiKey: process.env.DEERFLOW_KEY };
const client = new Client(options);
const ui = new UiClient(options);
const human = (text) => ({ messages: [{ role: "user", content: text }] });
const out = {};

// Consume a stream; return its events and the last `values` seen (never throws: a refusal is recorded).
async function drain(stream, stopAt = () => false) {
  const seen = { events: [], values: null, error: null };
  try {
    for await (const part of stream) {
      seen.events.push(part.event);
      if (part.event === "values") seen.values = part.data;
      if (part.event === "error") seen.error = part.data;
      if (stopAt(part)) break;
    }
  } catch (error) {
    seen.error = String(error);
  }
  return seen;
}

// Human in the loop: the inbox's Approve resumes the interrupt with `input: {}` beside the command.
const hitl = await ui.threads.create();
await ui.runs.wait(hitl.thread_id, "lead_agent", { input: human("/interrupt please") });
const approve = await drain(
  ui.runs.stream(hitl.thread_id, "lead_agent", {
    input: {},
    command: { resume: "yes" },
    streamMode: ["values", "messages-tuple"],
  }),
);
out.approve = { error: approve.error, last: approve.values?.messages?.at(-1)?.content ?? null };

// The inbox's buttons appear for LangChain's HITL request shape (`/review`): Approve and Edit
// resume with `{decisions: [...]}`, as the UI sends them, beside `input: {}`.
const reviews = {};
for (const [name, decision] of [
  ["approve", { type: "approve" }],
  ["edit", { type: "edit", edited_action: { name: "send_reply", args: { text: "a kinder draft" } } }],
  ["reject", { type: "reject", message: "too blunt" }],
]) {
  const thread = await ui.threads.create();
  await ui.runs.wait(thread.thread_id, "lead_agent", { input: human("/review a blunt draft") });
  const state = await ui.threads.getState(thread.thread_id);
  const resumed = await drain(
    ui.runs.stream(thread.thread_id, "lead_agent", {
      input: {},
      command: { resume: { decisions: [decision] } },
      streamMode: ["values", "messages-tuple"],
    }),
  );
  reviews[name] = {
    request: state.tasks?.[0]?.interrupts?.[0]?.value ?? null,
    error: resumed.error,
    last: resumed.values?.messages?.at(-1)?.content ?? null,
  };
}
out.reviews = reviews;

// The history sidebar set to an assistant UUID searches threads by metadata.assistant_id.
const mine = await client.assistants.create({ graphId: "lead_agent", name: "chat-ui" });
const system = (await client.assistants.search({ graphId: "lead_agent", limit: 100 })).find(
  (a) => a.metadata?.created_by === "system",
);
const byUuid = await client.threads.create();
await client.runs.wait(byUuid.thread_id, mine.assistant_id, { input: human("by uuid") });
const createdByRun = crypto.randomUUID();
await client.runs.wait(createdByRun, "lead_agent", { input: human("by name"), ifNotExists: "create" });
const searchIds = async (assistantId) =>
  (await client.threads.search({ metadata: { assistant_id: assistantId }, limit: 100 })).map((t) => t.thread_id);
out.assistants = { mine: mine.assistant_id, system: system?.assistant_id ?? null };
out.search_mine = await searchIds(mine.assistant_id);
out.search_system = await searchIds(system?.assistant_id);
out.by_uuid_thread = byUuid.thread_id;
out.created_by_run_thread = createdByRun;
out.by_uuid_metadata = (await client.threads.get(byUuid.thread_id)).metadata;
out.created_by_run_metadata = (await client.threads.get(createdByRun)).metadata;
// A later run by graph name moves the thread to the system assistant (each run merges both keys).
await client.runs.wait(byUuid.thread_id, "lead_agent", { input: human("by name now") });
out.after_rerun_metadata = (await client.threads.get(byUuid.thread_id)).metadata;

// joinStream with streamMode arrays on both join routes, with both SDKs.
const joins = await client.threads.create();
let created = null;
await drain(
  client.runs.stream(joins.thread_id, "lead_agent", {
    input: human("join me"),
    streamMode: ["values", "messages-tuple"],
    onRunCreated: (meta) => {
      created = meta;
    },
  }),
);
const runModes = { lastEventId: "-1", streamMode: ["values", "messages-tuple"] };
const threadModes = { lastEventId: "-1", streamMode: ["run_modes", "lifecycle"] };
const runDone = (part) => part.event === "metadata" && part.data?.status === "run_done";
out.run_join = {};
out.thread_join = {};
for (const [name, sdk] of [["ui", ui], ["client", client]]) {
  out.run_join[name] = await drain(sdk.runs.joinStream(joins.thread_id, created.run_id, runModes));
  out.thread_join[name] = await drain(sdk.threads.joinStream(joins.thread_id, threadModes), runDone);
}
console.log(JSON.stringify(out));
// The thread join streams never end, and SDK 1.0.0's threads.joinStream takes no signal to abort its
// fetch: leaving the loop keeps the connection, and Node, alive.
process.exit(0);
