"""The console's lineage and checkpoint pages, on seeded threads of both modes (Django test client).

Threads are written by the real demo graph through explicit-mode accessors
(the suite's process is frozen ``full``; ``process_in_mode`` switches it).
Forks come from a resume at an older checkpoint, from ``regenerate_prepare``
and from ``branch_create``; the assertions read the SVG and the tables.
"""

from __future__ import annotations

import re
import uuid

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.urls import reverse
from langchain_core.messages import HumanMessage
from langgraph.checkpoint.base.id import uuid6

from checkpoints.accessor import thread_config
from console.lineage import lineage as lineage_module
from console.lineage.lanes import lay_out
from runs.models import Run, RunEvent
from runs.services.branching import BRANCH_NODE, branch_create, regenerate_prepare
from tests.checkpoints.support import accessor, checkpoint_tuples, invoke
from tests.threads.test_state_modes import process_in_mode
from threads.models import ThreadMeta

pytestmark = pytest.mark.django_db(transaction=True)

MISMATCH = "Thread requires delta mode; materialize and convert its checkpoints before using full mode."


@pytest.fixture
def staff_client(client):
    admin = get_user_model().objects.create_superuser(f"support-{uuid.uuid4().hex[:6]}", password="pw-support-123")
    client.force_login(admin)
    return client


def new_thread(owner, title: str = "") -> ThreadMeta:
    return ThreadMeta.objects.create(thread_id=f"con-{uuid.uuid4().hex[:12]}", owner=owner.user, display_name=title)


def ids_newest_first(thread_id: str) -> list[str]:
    return [t.config["configurable"]["checkpoint_id"] for t in checkpoint_tuples(accessor("full").saver, thread_id)]


def settled_ends(acc, thread_id: str) -> list[str]:
    """Checkpoint ids ending each turn on the head's lineage, oldest first."""
    line = acc.history(thread_id, limit=None)
    return [
        s.config["configurable"]["checkpoint_id"]
        for s in reversed(line)
        if s.metadata["source"] == "loop" and not s.next
    ]


def lineage(client, thread_id: str, **params) -> str:
    response = client.get(reverse("admin:checkpoints_lineage", args=[thread_id]), params)
    assert response.status_code == 200, response.content[:500]
    return response.content.decode()


def nodes_in(body: str) -> dict[str, str]:
    """checkpoint id → the CSS classes of its circle, from the SVG."""
    found = {}
    for match in re.finditer(r'data-checkpoint-id="([^"]+)">.*?<circle class="([^"]+)" cx="(\d+)"', body, re.S):
        found[match.group(1)] = f"{match.group(2)} cx={match.group(3)}"
    return found


def svg_of(body: str) -> str:
    start = body.index('<div id="lineage">')
    return body[start : body.index("</svg>", start)]


def column(classes: str) -> int:
    return int(classes.rsplit("cx=", 1)[1])


@pytest.fixture
def forked_full(owner):
    """A full thread: three turns, a resume from the end of turn one, a regenerate, a branch, an interrupt."""
    thread = new_thread(owner, "Forked full thread")
    acc = accessor("full")
    invoke(acc, thread.thread_id, "one", "two", "three")
    ends = settled_ends(acc, thread.thread_id)
    # Resume from the end of turn one: LangGraph forks in full mode.
    acc.graph.invoke({"messages": [HumanMessage("resumed")]}, acc.config(thread.thread_id, ends[0]))
    # Regenerate the latest answer through the service, with the run event it looks up.
    head = acc.get(thread.thread_id)
    answer = head.values["messages"][-1]
    run = Run.objects.create(run_id=uuid.uuid4().hex, thread=thread, owner=owner.user, assistant_id="lead_agent")
    RunEvent.objects.create(
        thread=thread, run=run, event_type="llm.ai.response", category="message", seq=1, content={"id": answer.id}
    )
    prepared = regenerate_prepare(thread=thread, message_id=answer.id)
    base = prepared["checkpoint"]["checkpoint_id"]
    acc.graph.invoke(prepared["input"], acc.config(thread.thread_id, base, metadata=prepared["metadata"]))
    head = acc.get(thread.thread_id)
    branch = branch_create(thread=thread, message_id=head.values["messages"][-1].id, message_ids_=[], title=None)
    invoke(acc, thread.thread_id, "/interrupt")
    return {"thread": thread, "resume_base": ends[0], "regenerate_base": base, "branch": branch}


def test_lineage_draws_forks_as_lanes_with_markers(staff_client, forked_full, django_assert_max_num_queries):
    thread = forked_full["thread"]
    # Session, user, thread; its runs; two reference reads; three table reads; at most four preview reads.
    with django_assert_max_num_queries(13):
        body = lineage(staff_client, thread.thread_id, collapse=0)
    nodes = nodes_in(body)
    all_ids = ids_newest_first(thread.thread_id)
    assert set(nodes) == set(all_ids)
    head = all_ids[0]
    assert "head" in nodes[head] and "interrupt" in nodes[head] and "pending" in nodes[head]
    assert column(nodes[head]) == 10  # the head's lane is the first column
    # Each fork base has two children: drawn as a fork where a second lane joins.
    for base in (forked_full["resume_base"], forked_full["regenerate_base"]):
        assert "fork" in nodes[base], nodes[base]
    tips = [cid for cid, classes in nodes.items() if " tip" in classes]
    assert len(tips) == 3  # the head and the two abandoned answers
    assert sorted(column(nodes[t]) for t in tips) == [10, 26, 26]
    assert all("mode-full" in classes for classes in nodes.values())
    assert "mode-delta" not in svg_of(body) and "snapshot" not in svg_of(body)
    # Protection with its reason on hover: the head, and the checkpoint the branch copied.
    branch_parent = forked_full["branch"]["parent_checkpoint_id"]
    assert re.search(rf"<title>{head}[^<]*protected: head of namespace &#x27;&#x27;", body)
    assert re.search(rf"<title>{branch_parent}[^<]*branch parent of thread", body)
    assert 'step 1 <tspan>loop</tspan> <tspan class="muted">agent</tspan>' in body
    assert "__input__" in body  # input checkpoints name their writer
    # The branch is a thread of its own: two state-only checkpoints; the second names the branch node
    # (the writer comes from versions seen, which a thread's first state-only write leaves empty).
    branch_body = lineage(staff_client, forked_full["branch"]["thread_id"], collapse=0)
    branch_nodes = nodes_in(branch_body)
    assert len(branch_nodes) == 2 and all("source-update" in c for c in branch_nodes.values())
    assert svg_of(branch_body).count(f'<tspan class="muted">{BRANCH_NODE}</tspan>') == 1


def test_lineage_query_count_does_not_grow_with_checkpoints(staff_client, owner, django_assert_num_queries):
    small, large = new_thread(owner), new_thread(owner)
    acc = accessor("full")
    invoke(acc, small.thread_id, "one")
    invoke(acc, large.thread_id, *[f"turn {i}" for i in range(8)])
    counts = []
    for thread in (small, large):
        from django.db import connection
        from django.test.utils import CaptureQueriesContext

        with CaptureQueriesContext(connection) as captured:
            lineage(staff_client, thread.thread_id, collapse=0)
        counts.append(len(captured))
    assert counts[0] == counts[1], counts


def test_long_linear_stretches_collapse_and_pages_are_fixed(staff_client, owner, monkeypatch):
    monkeypatch.setattr(lineage_module, "LINEAGE_PAGE_ROWS", 10)
    thread = new_thread(owner)
    invoke(accessor("full"), thread.thread_id, *[f"turn {i}" for i in range(8)])  # 24 checkpoints
    body = lineage(staff_client, thread.thread_id)
    assert len(nodes_in(body)) == 2 * lineage_module.COLLAPSE_KEEP + 2  # head + root stay, plus the kept ends
    gap = re.search(r"⋯ (\d+) linear checkpoints", body)
    assert gap and int(gap.group(1)) == 24 - len(nodes_in(body))
    assert "Page 1 of 1" in body
    expanded = lineage(staff_client, thread.thread_id, collapse=0)
    assert len(nodes_in(expanded)) == 10 and "Page 1 of 3" in expanded
    last = lineage(staff_client, thread.thread_id, collapse=0, page=3)
    assert len(nodes_in(last)) == 4 and "lineage-newer" in last and "lineage-older" not in last


def test_delta_thread_in_a_delta_process_shows_delta_markers_and_snapshots(staff_client, owner, settings):
    thread = new_thread(owner, "Delta thread")
    invoke(accessor("delta", 2), thread.thread_id, "one", "two", "three")
    with process_in_mode(settings, "delta", 2):
        body = lineage(staff_client, thread.thread_id, collapse=0)
        nodes = nodes_in(body)
        assert nodes and all("mode-delta" in classes for classes in nodes.values())
        snapshots = [cid for cid, classes in nodes.items() if "snapshot" in classes.split()]
        assert len(snapshots) == 3  # cadence 2: one snapshot per turn's two message updates
        assert body.count('class="ring"') == 3
        head = ids_newest_first(thread.thread_id)[0]
        page = staff_client.get(reverse("admin:checkpoints_checkpoint", args=[thread.thread_id, head]))
        text = page.content.decode()
        assert page.status_code == 200 and 'id="mode-gate"' not in text
        assert "echo: three" in text and '<span id="checkpoint-mode">delta</span>' in text


def test_full_process_shows_the_gate_message_for_a_delta_checkpoint(staff_client, owner):
    thread = new_thread(owner)
    invoke(accessor("delta", 2), thread.thread_id, "secret words")
    head = ids_newest_first(thread.thread_id)[0]
    response = staff_client.get(reverse("admin:checkpoints_checkpoint", args=[thread.thread_id, head]))
    body = response.content.decode()
    assert response.status_code == 200
    assert f"Thread {thread.thread_id}: {MISMATCH}" in body
    assert "secret words" not in body and 'id="state-messages"' not in body and 'id="pending-writes"' not in body
    # The lineage needs no state: it draws the delta thread in a full process too.
    assert all("mode-delta" in c for c in nodes_in(lineage(staff_client, thread.thread_id, collapse=0)).values())


def test_checkpoint_page_diffs_against_its_parent_and_a_picked_checkpoint(
    staff_client, owner, django_assert_max_num_queries
):
    thread = new_thread(owner)
    acc = accessor("full")
    invoke(acc, thread.thread_id, "first question", "second question")
    ends = settled_ends(acc, thread.thread_id)
    head = acc.get(thread.thread_id)
    url = reverse("admin:checkpoints_checkpoint", args=[thread.thread_id, ends[1]])
    with django_assert_max_num_queries(10):
        response = staff_client.get(url)
    body = response.content.decode()
    parent = head.parent_config["configurable"]["checkpoint_id"]
    assert f'href="{reverse("admin:checkpoints_checkpoint", args=[thread.thread_id, parent])}"' in body
    assert "(its parent)" in body
    # Parent → head of turn two: the agent added its answer.
    assert re.search(
        r'class="diff-added"><td class="diff-sign">\+</td><td>ai<br><code>[^<]+</code></td><td class="diff-line">echo: second question',
        body,
    )
    assert '<tr class="diff-removed"' not in body
    # Against the end of turn one: the second question and its answer were added, the title unchanged.
    picked = staff_client.get(url, {"against": ends[0]}).content.decode()
    added = re.findall(r'class="diff-added">.*?<td class="diff-line">([^<]+)</td>', picked)
    assert added == ["second question", "echo: second question"]
    assert '<td class="diff-sign">~</td><td>title</td>' not in picked
    # Reversed: those two messages are removed.
    back = staff_client.get(
        reverse("admin:checkpoints_checkpoint", args=[thread.thread_id, ends[0]]), {"against": ends[1]}
    )
    assert back.content.decode().count('<tr class="diff-removed"') == 2
    # A changed channel shows old → new.
    acc.update(thread.thread_id, {"title": "Renamed"})
    newest = ids_newest_first(thread.thread_id)[0]
    changed = staff_client.get(
        reverse("admin:checkpoints_checkpoint", args=[thread.thread_id, newest])
    ).content.decode()
    assert re.search(r'~</td><td>title</td><td class="diff-line">&#x27;[^<]*&#x27; → &#x27;Renamed&#x27;', changed)


def test_checkpoint_page_shows_pending_writes_and_interrupts(staff_client, owner):
    thread = new_thread(owner)
    invoke(accessor("full"), thread.thread_id, "/interrupt")
    head = ids_newest_first(thread.thread_id)[0]
    body = staff_client.get(reverse("admin:checkpoints_checkpoint", args=[thread.thread_id, head])).content.decode()
    assert 'id="interrupts"' in body and "approve?" in body
    assert re.search(r'<td>__interrupt__</td><td class="diff-line">[^<]*approve\?', body)


def test_unknown_thread_or_checkpoint_is_404_and_pages_need_staff(staff_client, client, owner):
    thread = new_thread(owner)
    invoke(accessor("full"), thread.thread_id, "one")
    assert staff_client.get(reverse("admin:checkpoints_lineage", args=["nope"])).status_code == 404
    missing = reverse("admin:checkpoints_checkpoint", args=[thread.thread_id, "1f000000-0000-6000-8000-000000000000"])
    assert staff_client.get(missing).status_code == 404
    staff_client.logout()
    response = client.get(reverse("admin:checkpoints_lineage", args=[thread.thread_id]))
    assert response.status_code == 302 and "/admin/login/" in response["Location"]


def test_staff_without_view_permission_is_refused(client, owner):
    thread = new_thread(owner)
    invoke(accessor("full"), thread.thread_id, "one")
    user = get_user_model().objects.create_user("plain-staff", password="pw-plain-123", is_staff=True)
    client.force_login(user)
    assert client.get(reverse("admin:checkpoints_lineage", args=[thread.thread_id])).status_code == 403
    user.user_permissions.add(Permission.objects.get(codename="view_threadmeta"))
    client.force_login(get_user_model().objects.get(pk=user.pk))
    assert client.get(reverse("admin:checkpoints_lineage", args=[thread.thread_id])).status_code == 200


def test_lanes_one_per_open_branch_newest_first():
    # c2 and b1 are both children of a0; d3 continues c2. Newest first: d3, b1, c2, a0.
    rows = lay_out([("d3", "c2"), ("b1", "a0"), ("c2", "a0"), ("a0", None)])
    assert [r.column for r in rows] == [0, 1, 0, 0]
    assert rows[1].children == 0 and rows[1].open_below == [0, 1]
    assert rows[3].children == 2 and sorted(rows[3].incoming) == [(0, 0), (1, 0)]
    assert rows[3].open_below == []
    # A parent outside the nodes ends its lane instead of holding a column.
    assert lay_out([("x", "gone"), ("y", None)])[1].column == 0


def test_a_message_changed_under_its_id_shows_as_changed(staff_client, owner):
    thread = new_thread(owner)
    acc = accessor("full")
    invoke(acc, thread.thread_id, "typo here")
    messages = acc.get(thread.thread_id).values["messages"]
    fixed = [messages[0].model_copy(update={"content": "typo fixed"}), *messages[1:]]
    acc.update(thread.thread_id, {"messages": fixed})
    head = ids_newest_first(thread.thread_id)[0]
    body = staff_client.get(reverse("admin:checkpoints_checkpoint", args=[thread.thread_id, head])).content.decode()
    assert re.search(
        rf'<tr class="diff-changed"><td class="diff-sign">~</td><td>human<br><code>{messages[0].id[:16]}</code></td>'
        r'<td class="diff-line">typo here → typo fixed</td>',
        body,
    )
    assert '<tr class="diff-added"' not in body and '<tr class="diff-removed"' not in body


def test_namespaces_are_listed_and_filtered(staff_client, owner):
    thread = new_thread(owner)
    acc = accessor("full")
    invoke(acc, thread.thread_id, "one")
    # A subgraph's checkpoint, written through the saver API under its own checkpoint_ns.
    root = acc.saver.get_tuple(thread_config(thread.thread_id))
    checkpoint = {**root.checkpoint, "id": str(uuid6(clock_seq=1))}
    sub = acc.saver.put(
        thread_config(thread.thread_id, checkpoint_ns="tools:1"), checkpoint, {"source": "loop", "step": 0}, {}
    )["configurable"]["checkpoint_id"]
    body = lineage(staff_client, thread.thread_id, collapse=0)
    assert '<option value="tools:1">tools:1 — 1</option>' in body and sub not in nodes_in(body)
    filtered = lineage(staff_client, thread.thread_id, ns="tools:1")
    assert list(nodes_in(filtered)) == [sub] and '<code id="lineage-ns">tools:1</code>' in filtered
    assert "?ns=tools%3A1" in filtered  # node links keep the namespace


# -- a lineage that explains itself, and acting on a checkpoint ---------------------------------------------


def run_turn(acc, thread: ThreadMeta, text: str, *, checkpoint_id: str | None = None, **fields) -> Run:
    """One turn as a run writes it: a run row, and its id in every checkpoint's metadata."""
    run = Run.objects.create(
        run_id=uuid.uuid4().hex, thread=thread, owner=thread.owner, assistant_id="lead_agent", **fields
    )
    config = acc.config(thread.thread_id, checkpoint_id, metadata={"run_id": run.run_id})
    acc.graph.invoke({"messages": [HumanMessage(text)]}, config)
    return run


def rows_by_id(body: str) -> dict[str, str]:
    """checkpoint id → the text of its row (the node's label and the run link after it)."""
    found = {}
    for match in re.finditer(
        r'data-checkpoint-id="([^"]+)">(.*?)(?=<a href="[^"]*" class="row"|</svg>)', svg_of(body), re.S
    ):
        found[match.group(1)] = re.sub(r"<[^>]+>", " ", match.group(2))
    return found


def test_lineage_rows_say_when_which_run_and_what_each_added(staff_client, owner):
    thread = new_thread(owner, "Explained")
    acc = accessor("full")
    first = run_turn(acc, thread, "first question", status="success")
    ends = settled_ends(acc, thread.thread_id)
    run_turn(acc, thread, "second question", status="success")
    # Edit the second question: the old answer is left on an abandoned branch.
    edited = run_turn(acc, thread, "edited question", checkpoint_id=ends[0], status="success")
    body = lineage(staff_client, thread.thread_id, collapse=0)
    rows = rows_by_id(body)
    tuples = checkpoint_tuples(acc.saver, thread.thread_id)
    head = tuples[0].config["configurable"]["checkpoint_id"]
    assert f"run {edited.run_id[:6]}" in rows[head]
    assert f'href="{reverse("admin:runs_run_change", args=[first.run_id])}"' in body
    assert "+1 ai: echo: edited question" in rows[head]
    # Each row starts with the time its id encodes.
    assert re.search(r"\d\d:\d\d:\d\d", rows[head])
    abandoned = next(
        t.config["configurable"]["checkpoint_id"]
        for t in tuples
        if [m.content for m in t.checkpoint["channel_values"].get("messages", [])][-1:] == ["echo: second question"]
    )
    assert "2 messages not in HEAD" in rows[abandoned] and "tip" in rows[abandoned]
    assert "not in HEAD" not in rows[head]


def test_an_edit_in_a_long_linear_delta_stretch_is_never_folded(staff_client, owner):
    thread = new_thread(owner, "Rolled back in delta")
    acc = accessor("delta", 10)
    invoke(acc, thread.thread_id, *[f"before {i}" for i in range(6)])
    kept = acc.get(thread.thread_id).values["messages"][:2]
    # A rollback in delta mode rewrites the head in place: one update that drops ten messages.
    acc.update(thread.thread_id, {"messages": kept}, as_node="rollback_restore")
    restore = ids_newest_first(thread.thread_id)[0]
    invoke(acc, thread.thread_id, *[f"after {i}" for i in range(6)])
    body = lineage(staff_client, thread.thread_id)
    assert "linear checkpoints" in body  # the stretches around it still fold
    rows = rows_by_id(body)
    assert restore in rows, "the restore was folded into a linear stretch"
    assert "rollback restore" in rows[restore] and "replaced messages (2)" in rows[restore]
    assert "edit" in nodes_in(body)[restore].split()


def test_lineage_has_a_legend_in_words_and_an_empty_state(staff_client, owner):
    empty = new_thread(owner, "Nothing yet")
    body = lineage(staff_client, empty.thread_id)
    assert 'id="lineage-empty"' in body and "<svg" not in body.split('id="lineage-empty"')[1].split("</p>")[0]
    thread = new_thread(owner)
    invoke(accessor("full"), thread.thread_id, "one")
    body = lineage(staff_client, thread.thread_id)
    legend = re.search(r'<ul class="lineage-legend".*?</ul>', body, re.S).group(0)
    items = [
        re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", li)).strip() for li in re.findall(r"<li>(.*?)</li>", legend, re.S)
    ]
    assert "full-mode checkpoint" in items and "snapshot stored" in items and len(items) >= 8


def checkpoint_page(client, thread_id: str, checkpoint_id: str, **params):
    return client.get(reverse("admin:checkpoints_checkpoint", args=[thread_id, checkpoint_id]), params)


def test_checkpoint_page_leads_with_the_diff_and_compares_with_head_in_one_click(staff_client, owner):
    thread = new_thread(owner)
    acc = accessor("full")
    invoke(acc, thread.thread_id, "one", "two")
    ends = settled_ends(acc, thread.thread_id)
    body = checkpoint_page(staff_client, thread.thread_id, ends[0]).content.decode()
    assert body.index('id="diff"') < body.index('id="state-messages"') < body.index('id="checkpoint-metadata"')
    head_link = re.search(r'href="([^"]+)" class="button" id="compare-head"', body).group(1).replace("&amp;", "&")
    assert f"against={ends[1]}" in head_link
    against_head = staff_client.get(head_link).content.decode()
    assert "(HEAD)" in against_head
    assert re.findall(r'<tr class="diff-removed">.*?<td class="diff-line">([^<]+)</td>', against_head) == [
        "two",
        "echo: two",
    ]
    # "Compare with…" offers the thread's checkpoints, HEAD marked.
    options = re.findall(r'<option value="([^"]+)"[^>]*>([^<]+)</option>', body)
    assert any(value == ends[1] and label.endswith("HEAD") for value, label in options)


def post_action(client, thread_id: str, checkpoint_id: str, action: str):
    url = reverse("admin:checkpoints_checkpoint", args=[thread_id, checkpoint_id])
    return client.post(url, {"action": action})


def audit_entries(thread: ThreadMeta) -> list[str]:
    from django.contrib.admin.models import LogEntry

    return [e.change_message for e in LogEntry.objects.filter(object_id=thread.pk).order_by("pk")]


def test_fork_from_a_checkpoint_copies_it_as_the_head_and_is_audited(staff_client, owner):
    thread = new_thread(owner)
    acc = accessor("full")
    invoke(acc, thread.thread_id, "one", "two")
    ends = settled_ends(acc, thread.thread_id)
    confirm = checkpoint_page(staff_client, thread.thread_id, ends[0], confirm="fork").content.decode()
    assert "Fork the thread from this checkpoint?" in confirm
    assert "2 messages leave the conversation" in confirm and 'id="confirm-button"' in confirm
    response = post_action(staff_client, thread.thread_id, ends[0], "fork")
    head = acc.get(thread.thread_id)
    new_head = head.config["configurable"]["checkpoint_id"]
    assert response.status_code == 302 and new_head in response["Location"]
    assert [m.content for m in head.values["messages"]] == ["one", "echo: one"]
    assert head.metadata["source"] == "fork"
    assert audit_entries(thread) == [f"Forked the thread from checkpoint {ends[0]}: new head {new_head}"]


def test_restore_as_head_writes_the_old_state_on_top_and_is_audited(staff_client, owner):
    thread = new_thread(owner)
    acc = accessor("full")
    invoke(acc, thread.thread_id, "one", "two")
    ends = settled_ends(acc, thread.thread_id)
    old_head = ids_newest_first(thread.thread_id)[0]
    response = post_action(staff_client, thread.thread_id, ends[0], "restore")
    assert response.status_code == 302
    head = acc.get(thread.thread_id)
    assert [m.content for m in head.values["messages"]] == ["one", "echo: one"]
    # Linear: the restore sits on the old head, so nothing was abandoned.
    assert head.parent_config["configurable"]["checkpoint_id"] == old_head
    new_head = head.config["configurable"]["checkpoint_id"]
    assert audit_entries(thread) == [f"Restored checkpoint {ends[0]} as the head: new head {new_head}"]
    rows = rows_by_id(lineage(staff_client, thread.thread_id, collapse=0))
    assert "console_restore" in rows[new_head] and "not in HEAD" not in "".join(rows.values())


def test_fork_and_restore_are_refused_while_a_run_is_active_and_need_the_change_permission(client, owner):
    thread = new_thread(owner)
    acc = accessor("full")
    invoke(acc, thread.thread_id, "one", "two")
    ends = settled_ends(acc, thread.thread_id)
    before = ids_newest_first(thread.thread_id)
    viewer = get_user_model().objects.create_user(f"viewer-{uuid.uuid4().hex[:6]}", is_staff=True)
    viewer.user_permissions.add(Permission.objects.get(codename="view_threadmeta"))
    client.force_login(viewer)
    body = checkpoint_page(client, thread.thread_id, ends[0]).content.decode()
    assert 'id="fork-link"' not in body and 'id="restore-link"' not in body
    assert post_action(client, thread.thread_id, ends[0], "fork").status_code == 403
    viewer.user_permissions.add(Permission.objects.get(codename="change_threadmeta"))
    Run.objects.create(
        run_id=uuid.uuid4().hex, thread=thread, owner=owner.user, assistant_id="lead_agent", status="running"
    )
    confirm = checkpoint_page(client, thread.thread_id, ends[0], confirm="restore").content.decode()
    assert "has a run queued or running" in confirm
    response = post_action(client, thread.thread_id, ends[0], "restore")
    assert response.status_code == 302 and "confirm=restore" in response["Location"]
    assert ids_newest_first(thread.thread_id) == before
    assert audit_entries(thread) == [
        f"Restored checkpoint {ends[0]} as the head: refused: Thread has a run in flight. "
        "Update state after the run finishes."
    ]


def test_a_delta_checkpoint_cannot_be_forked_from_a_full_process(staff_client, owner):
    thread = new_thread(owner)
    invoke(accessor("delta"), thread.thread_id, "one", "two")
    ends = settled_ends(accessor("delta"), thread.thread_id)
    before = ids_newest_first(thread.thread_id)
    # The suite's process is frozen full: the gate holds the page and the action.
    body = checkpoint_page(staff_client, thread.thread_id, ends[0]).content.decode()
    assert 'id="mode-gate"' in body and 'id="fork-link"' not in body
    post_action(staff_client, thread.thread_id, ends[0], "fork")
    assert ids_newest_first(thread.thread_id) == before
    assert "refused: Thread requires delta mode" in audit_entries(thread)[0]


@pytest.mark.parametrize(
    ("metadata", "parent_run", "kind"),
    [
        ({"source": "loop", "run_id": "r1"}, "r1", ""),
        ({"source": "input", "run_id": "r2"}, "r1", ""),  # a new run starts from its input
        ({"source": "loop", "run_id": "r2"}, "r1", "resume"),  # a run that continued another's step
        ({"source": "update"}, None, "update"),
        ({"source": "fork"}, None, "fork"),
        ({"source": "fork", "rollback_restore": "1f0"}, None, "rollback restore"),
    ],
)
def test_edits_and_resumes_are_named_so_they_never_fold(metadata, parent_run, kind):
    assert lineage_module.edit_kind(metadata, parent_run) == kind
