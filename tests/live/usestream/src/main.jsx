// A small chat page on @langchain/react's useStream, pointed at the gateway by query parameters:
//   ?api=http://127.0.0.1:8000/api&key=dfk_…&transport=sse|websocket[&thread=<id>]
// The thread id goes into the URL once the first run starts, so a reload rehydrates that thread.
import { useState } from "react";
import { createRoot } from "react-dom/client";
import { useStream } from "@langchain/react";

const params = new URLSearchParams(window.location.search);
const apiUrl = params.get("api") ?? import.meta.env.VITE_API_URL ?? "http://127.0.0.1:8000/api";
const apiKey = params.get("key") ?? import.meta.env.VITE_API_KEY ?? "";
const transport = params.get("transport") === "websocket" ? "websocket" : "sse";
const initialThreadId = params.get("thread");

// Browsers cannot put headers on a WebSocket, and the library refuses client-wide
// headers on its WebSocket transport: the key goes on the socket URL (?api_key=)
// and on the HTTP calls it still makes (state, history, cancel) through `fetch`.
const auth =
  transport === "websocket"
    ? {
        callerOptions: {
          fetch: (input, init = {}) => {
            const headers = new Headers(init.headers);
            headers.set("x-api-key", apiKey);
            return fetch(input, { ...init, headers });
          },
        },
        webSocketFactory: (url) => new WebSocket(`${url}?api_key=${encodeURIComponent(apiKey)}`),
      }
    : { apiKey };

function rememberThread(threadId) {
  const url = new URL(window.location.href);
  url.searchParams.set("thread", threadId);
  window.history.replaceState(null, "", url);
}

function textOf(message) {
  return typeof message.content === "string" ? message.content : message.text;
}

function App() {
  const stream = useStream({
    apiUrl,
    assistantId: "lead_agent",
    transport,
    threadId: initialThreadId,
    onThreadId: rememberThread,
    ...auth,
  });
  const [prompt, setPrompt] = useState("");
  const [answer, setAnswer] = useState("");

  const send = (event) => {
    event.preventDefault();
    if (!prompt.trim()) return;
    stream.submit({ messages: [{ type: "human", content: prompt }] });
    setPrompt("");
  };

  return (
    <main>
      <h1>useStream ({transport})</h1>
      <p>
        <span data-testid="status">{stream.isThreadLoading ? "loading" : stream.isLoading ? "running" : "idle"}</span>{" "}
        thread <span data-testid="thread-id">{stream.threadId ?? ""}</span>
      </p>
      <ol data-testid="messages">
        {stream.messages.map((message, index) => (
          <li key={message.id ?? index} data-testid={`message-${index}`} data-type={message.type}>
            {textOf(message)}
          </li>
        ))}
      </ol>
      {stream.interrupt && (
        <form
          data-testid="interrupt"
          onSubmit={(event) => {
            event.preventDefault();
            stream.respond(answer);
            setAnswer("");
          }}
        >
          <span data-testid="interrupt-payload">{JSON.stringify(stream.interrupt.value)}</span>
          <input data-testid="answer" value={answer} onChange={(e) => setAnswer(e.target.value)} />
          <button data-testid="respond" type="submit">
            Answer
          </button>
        </form>
      )}
      <form onSubmit={send}>
        <input data-testid="prompt" value={prompt} onChange={(e) => setPrompt(e.target.value)} />
        <button data-testid="send" type="submit">
          Send
        </button>
      </form>
      {stream.error != null && <pre data-testid="error">{String(stream.error?.message ?? stream.error)}</pre>}
    </main>
  );
}

createRoot(document.getElementById("root")).render(<App />);
