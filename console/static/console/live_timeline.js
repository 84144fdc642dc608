// The run page's live view: follow the run's WebSocket (the staff session
// authenticates it). Streamed message chunks grow into one row per message;
// other events get a row each; status changes are announced (#run-status is
// an aria-live region). When the run ends, the page is fetched once more and
// its content (outcome, failure, saved timeline, usage, the row's fields)
// replaces this one's: no reload, no polling. Stream data is only ever set as
// text (textContent), never as markup; the swapped content is our own page.
(function () {
  "use strict";
  const live = document.getElementById("live");
  if (!live) {
    return;
  }
  let status = document.getElementById("run-status");
  const messages = document.getElementById("live-messages");
  const events = document.querySelector("#live-events tbody");
  const PREVIEW = 160;
  const grown = new Map();
  let current = live.dataset.status;

  function announce(text) {
    status.textContent = text;
  }

  function setStatus(next) {
    if (next !== current) {
      current = next;
      announce("Run " + next);
    }
  }

  function text(value) {
    if (typeof value === "string") {
      return value;
    }
    if (Array.isArray(value)) {
      return value.map(function (block) {
        return block && typeof block === "object" ? block.text || "" : String(block);
      }).join("");
    }
    return value === undefined || value === null ? "" : JSON.stringify(value);
  }

  function short(value) {
    const line = text(value).replace(/\s+/g, " ");
    return line.length > PREVIEW ? line.slice(0, PREVIEW - 1) + "…" : line;
  }

  function growMessage(chunk, meta) {
    const id = chunk.id || "message-" + grown.size;
    let row = grown.get(id);
    if (!row) {
      row = document.createElement("li");
      row.className = "live-message";
      row.dataset.messageId = id;
      const who = document.createElement("span");
      who.className = "role";
      const node = meta && meta.langgraph_node ? " · " + meta.langgraph_node : "";
      who.textContent = String(chunk.type || "message").replace(/MessageChunk$/, "").toLowerCase() + node;
      const body = document.createElement("span");
      body.className = "text";
      row.append(who, body);
      messages.appendChild(row);
      grown.set(id, row);
    }
    const body = row.querySelector(".text");
    body.textContent += text(chunk.content);
    const calls = (chunk.tool_call_chunks || []).map(function (call) { return call.name; }).filter(Boolean);
    if (calls.length) {
      body.textContent += " → " + calls.join(", ") + "()";
    }
  }

  function addEvent(message) {
    const row = document.createElement("tr");
    row.className = "live-event";
    row.dataset.event = message.event;
    for (const cell of [message.id || "", message.event, short(message.data)]) {
      const td = document.createElement("td");
      td.textContent = cell;
      row.appendChild(td);
    }
    events.appendChild(row);
  }

  function showSaved(outcome) {
    announce("Run ended: " + outcome + "; loading its saved timeline…");
    fetch(window.location.href, { credentials: "same-origin" })
      .then(function (response) {
        if (!response.ok) {
          throw new Error("HTTP " + response.status);
        }
        return response.text();
      })
      .then(function (html) {
        const saved = new DOMParser().parseFromString(html, "text/html").getElementById("content");
        if (!saved) {
          throw new Error("no page content");
        }
        document.getElementById("content").replaceWith(saved);
        // The live view's status line was replaced too: announce the end on the
        // new one, with the saved outcome's words ("rolled back" where the end
        // event only says "error"), as a page loaded after the end shows it.
        status = document.getElementById("run-status");
        const savedOutcome = status.textContent.trim().replace(/^Run\s+/, "") || outcome;
        announce("Run ended: " + savedOutcome + ". The saved timeline is below.");
      })
      .catch(function (error) {
        announce("Run ended: " + outcome + "; the saved timeline could not be loaded (" + error.message + "), reload the page.");
      });
  }

  function receive(message) {
    const mode = String(message.event).split("|")[0];
    if (mode === "metadata") {
      announce("Run " + current + ": watching live");
      return;
    }
    if (mode === "end") {
      const outcome = message.data && message.data.status ? message.data.status : "ended";
      live.dataset.outcome = outcome;
      showSaved(outcome);
      return;
    }
    setStatus("running");
    if (mode === "messages" && Array.isArray(message.data) && message.data[0] && typeof message.data[0] === "object") {
      growMessage(message.data[0], message.data[1]);
    } else {
      addEvent(message);
    }
  }

  const scheme = window.location.protocol === "https:" ? "wss" : "ws";
  const socket = new WebSocket(scheme + "://" + window.location.host + live.dataset.wsPath + "?last_event_id=-1");
  socket.addEventListener("message", function (frame) {
    receive(JSON.parse(frame.data));
  });
  socket.addEventListener("close", function (event) {
    if (live.dataset.outcome) {
      return;
    }
    if (event.code === 1000) {
      // The server closes normally without an end marker when the run ended and its stream expired.
      live.dataset.outcome = "ended";
      showSaved("ended");
    } else {
      announce("Live view disconnected (" + event.code + "); reload to reconnect");
    }
  });
})();
