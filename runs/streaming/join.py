"""The classic thread join stream (``GET /threads/{id}/stream``) read from the thread's log.

The LangGraph Platform's join streams a thread's runs in the shape of their
own ``stream_mode``; the log keeps protocol-v2 events, so each one is turned
back into what the run's classic stream would have carried.
"""

from __future__ import annotations

JOIN_MODES = ("run_modes", "lifecycle", "state_update")
# Log channels a run's classic stream_mode names (messages-tuple arrives as "messages").
_CLASSIC = {
    "values": "values",
    "updates": "updates",
    "custom": "custom",
    "tasks": "tasks",
    "checkpoints": "checkpoints",
}


class JoinTranslator:
    """Turn log events back into the LangGraph Platform's run-stream events, per run's stream_mode."""

    def __init__(self, modes: set[str], run_modes_of) -> None:
        self.modes = modes
        self._run_modes_of = run_modes_of  # async run_id -> set of the run's stream modes
        self._message_ids: dict[tuple, str | None] = {}

    async def frames(self, event: dict, run_id: str) -> list[tuple[str, object]]:
        method, params = event["method"], event["params"]
        if method == "state_update":  # POST /threads/{id}/state, no run's
            return [("state_update", params.get("data"))] if "state_update" in self.modes else []
        data, namespace = params.get("data"), params.get("namespace") or []
        if method == "lifecycle" and not namespace:
            phase = (data or {}).get("event")
            if "lifecycle" not in self.modes and "run_modes" not in self.modes:
                return []
            if phase == "running":
                return [("metadata", {"run_id": run_id, "status": "running"})]
            return [
                (
                    "metadata",
                    {"run_id": run_id, "status": "run_done", "outcome": phase, "error": (data or {}).get("error")},
                )
            ]
        if "run_modes" not in self.modes or namespace:
            return []
        run_modes = await self._run_modes_of(run_id)
        if method in _CLASSIC and method in run_modes:
            return [(method, data)]
        if method == "messages" and {"messages", "messages-tuple"} & run_modes:
            return self._message(tuple(namespace), data or {})
        return []

    def _message(self, namespace: tuple, data: dict) -> list[tuple[str, object]]:
        if data.get("event") == "message-start":
            self._message_ids[namespace] = data.get("id")
        elif (
            data.get("event") == "content-block-delta"
            and (delta := data.get("delta") or {}).get("type") == "text-delta"
        ):
            chunk = {"type": "AIMessageChunk", "content": delta.get("text", ""), "id": self._message_ids.get(namespace)}
            return [("messages", [chunk, {}])]
        return []
