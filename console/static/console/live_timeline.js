// The run page's live timeline: follow the run's WebSocket (the staff session
// authenticates it) and append each event as it arrives. No build step, no
// polling; text only (textContent), never markup from the stream.
(function () {
  "use strict";
  const table = document.getElementById("live-events");
  if (!table) {
    return;
  }
  const body = table.querySelector("tbody");
  const status = document.getElementById("live-status");
  const PREVIEW = 160;

  function preview(event, data) {
    let value = data;
    if (event === "messages" && Array.isArray(data) && data.length) {
      value = data[0] && typeof data[0] === "object" && "content" in data[0] ? data[0].content : data[0];
    }
    const text = typeof value === "string" ? value : JSON.stringify(value);
    return text && text.length > PREVIEW ? text.slice(0, PREVIEW - 1) + "…" : text || "";
  }

  function append(message) {
    const row = document.createElement("tr");
    row.className = "live-event";
    row.dataset.event = message.event;
    for (const cell of [message.id || "", message.event, preview(message.event, message.data)]) {
      const td = document.createElement("td");
      td.textContent = cell;
      row.appendChild(td);
    }
    body.appendChild(row);
  }

  const scheme = window.location.protocol === "https:" ? "wss" : "ws";
  const socket = new WebSocket(scheme + "://" + window.location.host + table.dataset.wsPath + "?last_event_id=-1");
  socket.addEventListener("open", function () {
    status.textContent = "live";
  });
  socket.addEventListener("message", function (frame) {
    const message = JSON.parse(frame.data);
    append(message);
    if (message.event === "end") {
      const outcome = message.data && message.data.status ? message.data.status : "ended";
      status.textContent = "ended: " + outcome + " (reload for the final timeline)";
      status.dataset.outcome = outcome;
    }
  });
  socket.addEventListener("close", function (event) {
    if (!status.dataset.outcome) {
      status.textContent = event.code === 1000 ? "stream closed" : "disconnected (" + event.code + ")";
    }
  });
})();
