"""Turn case results into the two tables, the correctness checks and the targets."""

from __future__ import annotations

import math
import statistics
from typing import Any

WARMUP_TURNS = 2  # compile, first connections: not part of the first window
TARGETS = {
    "bytes": ("delta bytes <= 1/10 of full at N=200", 0.10),
    "state": ("delta GET /state within 1.2x of full", 1.2),
    "history_100": ("delta history limit 100 (cache on) within 1.5x of full", 1.5),
    "write_flat": ("delta per-turn write flat (last/first window <= 1.3)", 1.3),
}


def median(values: list[float]) -> float:
    return statistics.median(values) if values else math.nan


def windows(write_ms: list[float]) -> tuple[float, float]:
    """Return the medians of the first and last windows (10% of the turns, at least 5)."""
    size = max(5, len(write_ms) // 10)
    first = write_ms[WARMUP_TURNS : WARMUP_TURNS + size]
    return median(first), median(write_ms[-size:])


def ratio(a: float, b: float) -> float:
    return a / b if b and not math.isnan(a) and not math.isnan(b) else math.nan


def summarize(mode_result: dict[str, Any] | None) -> dict[str, Any]:
    """Return the medians of one mode's cases (or {} when the mode was skipped)."""
    if not mode_result:
        return {}
    write = mode_result["write"]
    first, last = windows(write["write_ms"])
    store_first, store_last = windows(write["saver_store_ms"])
    read_first, read_last = windows(write["saver_read_ms"])
    out = {
        "bytes": write["bytes"]["stored"],
        "write_first": first,
        "write_last": last,
        "store_first": store_first,
        "store_last": store_last,
        "read_first": read_first,
        "read_last": read_last,
    }
    for cache in ("off", "on"):
        if read := mode_result.get(f"read_cache_{cache}"):
            for route, samples in read["reads_ms"].items():
                out[f"{route}_{cache}"] = median(samples[1:])  # warm; samples[0] is the cold read
                out[f"{route}_{cache}_cold"] = samples[0]
            out[f"digest_{cache}"] = read["state_digest"]
            out[f"history_digests_{cache}"] = read["history_digests"]
            out[f"messages_ok_{cache}"] = read["messages_ok"]
    return out


def checks(cell: dict[str, Any], full: dict[str, Any], delta: dict[str, Any]) -> list[str]:
    """Return what is wrong with a row's materialized messages (empty: all identical)."""
    problems = []
    for name, summary in (("full", full), ("delta", delta)):
        for cache in ("off", "on"):
            if summary.get(f"messages_ok_{cache}") is False:
                problems.append(f"{name} (cache {cache}) messages differ from the expected conversation")
    if full and delta:
        for cache in ("off", "on"):
            if delta.get(f"digest_{cache}") and delta[f"digest_{cache}"] != full["digest_on"]:
                problems.append(f"delta (cache {cache}) state differs from full")
            if (
                delta.get(f"history_digests_{cache}")
                and delta[f"history_digests_{cache}"] != full["history_digests_on"]
            ):
                problems.append(f"delta (cache {cache}) history differs from full")
    return problems


def fmt(value: float, digits: int = 1) -> str:
    return "-" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:,.{digits}f}"


def fmt_ratio(value: float) -> str:
    return "-" if math.isnan(value) else f"{value:.2f}x"


def print_table(headers: list[str], rows: list[list[str]]) -> None:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)]
    line = "  ".join(h.rjust(w) for h, w in zip(headers, widths, strict=True))
    print(line)
    print("-" * len(line))
    for row in rows:
        print("  ".join(c.rjust(w) for c, w in zip(row, widths, strict=True)))


def storage_rows(cells: list[dict[str, Any]]) -> list[list[str]]:
    rows = []
    for cell in cells:
        full, delta = cell["summary_full"], cell["summary_delta"]
        mib = 2**20
        rows.append(
            [
                cell["backend"],
                str(cell["turns"]),
                fmt(full["bytes"] / mib) if full else "skipped",
                fmt(delta["bytes"] / mib),
                fmt_ratio(ratio(delta["bytes"], full.get("bytes", math.nan))),
                f"{fmt(full['write_first'])} → {fmt(full['write_last'])}" if full else "skipped",
                f"{fmt(delta['write_first'])} → {fmt(delta['write_last'])}",
                fmt_ratio(ratio(delta["write_last"], delta["write_first"])),
                f"{fmt(delta['read_first'])} → {fmt(delta['read_last'])}",
                f"{fmt(delta['store_first'])} → {fmt(delta['store_last'])}",
                "ok" if not cell["problems"] else "DIFF",
            ]
        )
    return rows


def read_rows(cells: list[dict[str, Any]]) -> list[list[str]]:
    rows = []
    for cell in cells:
        full, delta = cell["summary_full"], cell["summary_delta"]
        row = [cell["backend"], str(cell["turns"])]
        for route in ("state", "history_10", "history_100"):
            base = full.get(f"{route}_on", math.nan)
            row += [
                fmt(base, 2),
                fmt(delta.get(f"{route}_off"), 2),
                fmt(delta.get(f"{route}_on"), 2),
                fmt_ratio(ratio(delta.get(f"{route}_off", math.nan), base)),
                fmt_ratio(ratio(delta.get(f"{route}_on", math.nan), base)),
            ]
        rows.append(row)
    return rows


def target_lines(cells: list[dict[str, Any]]) -> list[str]:
    lines = []
    for cell in cells:
        full, delta, where = cell["summary_full"], cell["summary_delta"], f"{cell['backend']} N={cell['turns']}"
        measured = {
            "write_flat": ratio(delta["write_last"], delta["write_first"]),
            "state": ratio(delta.get("state_on", math.nan), full.get("state_on", math.nan)),
            "history_100": ratio(delta.get("history_100_on", math.nan), full.get("history_100_on", math.nan)),
        }
        if cell["turns"] == 200:
            measured["bytes"] = ratio(delta["bytes"], full.get("bytes", math.nan))
        for key, value in measured.items():
            label, limit = TARGETS[key]
            if math.isnan(value):
                continue
            verdict = "met" if value <= limit else "MISSED"
            lines.append(f"  {verdict:6} {where:18} {label}: {value:.2f}")
    return lines


def print_report(cells: list[dict[str, Any]], notes: list[str]) -> bool:
    """Print the tables; return False when any row's messages differ."""
    for cell in cells:
        cell["summary_full"], cell["summary_delta"] = summarize(cell.get("full")), summarize(cell.get("delta"))
        cell["problems"] = checks(cell, cell["summary_full"], cell["summary_delta"])
    print("\nStorage and writes (stored MiB: checkpoint tables incl. indexes, TOAST and WAL; write ms per turn,")
    print("median of the first → last window of 10% of the turns; delta's saver reads/stores: time in the saver)")
    print_table(
        [
            "backend",
            "N",
            "full MiB",
            "delta MiB",
            "delta/full",
            "full write ms",
            "delta write ms",
            "delta last/first",
            "of which: saver reads",
            "saver stores",
            "msgs",
        ],
        storage_rows(cells),
    )
    print("\nReads through the routes (warm median ms; delta with the history cache off / on; ratios are delta/full)")
    headers = ["backend", "N"]
    for route in ("GET state", "history 10", "history 100"):
        headers += [f"{route} full", "off", "on", "off/full", "on/full"]
    print_table(headers, read_rows(cells))
    print("\nTargets")
    for line in target_lines(cells):
        print(line)
    for cell in cells:
        if skipped := cell.get("full_skipped"):
            print(f"  note   {cell['backend']} N={cell['turns']}: full mode skipped, {skipped}")
        for problem in cell["problems"]:
            print(f"  ERROR  {cell['backend']} N={cell['turns']}: {problem}")
    for note in notes:
        print(f"  note   {note}")
    return not any(cell["problems"] for cell in cells)
