// An agent's page: its timeline grows live (SSE, newest on top), older entries load on demand.
"use strict";

document.addEventListener("DOMContentLoaded", () => {
  const start = document.getElementById("timeline");
  if (!start) return;
  const agent = start.dataset.agent;
  const list = () => document.getElementById("timeline");
  const fragment = (html) => { const t = document.createElement("template"); t.innerHTML = html; return t.content; };

  const source = new EventSource(`/ui/agents/${encodeURIComponent(agent)}/timeline/events`);
  source.onopen = () => { document.body.dataset.timeline = "open"; };
  source.onerror = () => { document.body.dataset.timeline = source.readyState === EventSource.CLOSED ? "closed" : "connecting"; };
  source.onmessage = (ev) => {
    let data;
    try { data = JSON.parse(ev.data); } catch (_) { return; }
    const doing = document.getElementById("agent-doing");
    if (doing && data.doing) doing.textContent = data.doing;
    const here = list();
    if (!here || here.dataset.q !== "" || here.dataset.kind !== "") return;  // a filtered view stays as asked
    if (!data.html || document.getElementById("tl-" + data.id)) return;
    document.getElementById("timeline-empty")?.remove();
    const node = fragment(data.html);
    const el = node.firstElementChild;
    here.prepend(node);
    if (el) KS.decorate(el);
  };

  document.addEventListener("click", async (ev) => {
    const older = ev.target.closest("#timeline-older");
    const here = list();
    if (!older || !here) return;
    const last = here.querySelector(":scope > article.tl:last-of-type");
    if (!last) return;
    const url = new URL(`/ui/agents/${encodeURIComponent(agent)}/timeline`, location.href);
    url.searchParams.set("before", last.dataset.id);
    if (here.dataset.q) url.searchParams.set("q", here.dataset.q);
    if (here.dataset.kind) url.searchParams.set("kind", here.dataset.kind);
    const reply = await fetch(url, { credentials: "same-origin" });
    if (!reply.ok) { KS.toast(`could not load older entries: HTTP ${reply.status}`, true); return; }
    const node = fragment(await reply.text());
    const added = [...node.children];
    here.append(node);
    added.forEach((el) => KS.decorate(el));
    if (reply.headers.get("X-More") !== "1") older.hidden = true;
  });
});
