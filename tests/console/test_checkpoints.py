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
    with django_assert_max_num_queries(12):
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
        assert "echo: three" in text and '<td id="checkpoint-mode">delta</td>' in text


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
        r'class="diff-added"><td>\+ message</td><td><code>[^<]+</code> ai</td><td class="diff-line">echo: second question',
        body,
    )
    assert 'class="diff-removed"' not in body
    # Against the end of turn one: the second question and its answer were added, the title unchanged.
    picked = staff_client.get(url, {"against": ends[0]}).content.decode()
    added = re.findall(r'class="diff-added">.*?<td class="diff-line">([^<]+)</td>', picked)
    assert added == ["second question", "echo: second question"]
    assert "~ title" not in picked
    # Reversed: those two messages are removed.
    back = staff_client.get(
        reverse("admin:checkpoints_checkpoint", args=[thread.thread_id, ends[0]]), {"against": ends[1]}
    )
    assert back.content.decode().count('class="diff-removed"') == 2
    # A changed channel shows old → new.
    acc.update(thread.thread_id, {"title": "Renamed"})
    newest = ids_newest_first(thread.thread_id)[0]
    changed = staff_client.get(
        reverse("admin:checkpoints_checkpoint", args=[thread.thread_id, newest])
    ).content.decode()
    assert re.search(r"~ title</td><td></td><td class=\"diff-line\">&#x27;[^<]*&#x27; → &#x27;Renamed&#x27;", changed)


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
        rf'class="diff-changed"><td>~ message</td><td><code>{messages[0].id}</code> human</td>'
        r'<td class="diff-line">typo here → typo fixed</td>',
        body,
    )
    assert 'class="diff-added"' not in body and 'class="diff-removed"' not in body


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
