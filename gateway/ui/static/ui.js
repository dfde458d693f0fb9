// kswarm UI: shared helpers (CSRF-carrying fetch, toasts, agent colours, local times), the live
// event stream every page listens to, periodic panel refresh and the agent action buttons.
"use strict";

const KS = (() => {
  const listeners = [];
  const csrf = () => document.querySelector('meta[name="csrf-token"]')?.content || "";

  async function send(url, method = "POST", body = undefined) {
    const reply = await fetch(url, {
      method,
      credentials: "same-origin",
      headers: { "Content-Type": "application/json", "X-CSRF-Token": csrf() },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    let data = null;
    try { data = await reply.json(); } catch (_) { /* not JSON */ }
    if (reply.status === 401) {
      location.href = "/ui/login?next=" + encodeURIComponent(location.pathname + location.search);
    }
    return { ok: reply.ok, status: reply.status, data };
  }

  function errorText(result) {
    const d = result.data && (result.data.detail || result.data.message);
    return typeof d === "string" ? d : `HTTP ${result.status}`;
  }

  let toastTimer = null;
  function toast(text, bad = false) {
    const box = document.getElementById("toast");
    if (!box) return;
    box.textContent = text;
    box.className = bad ? "show bad" : "show";
    clearTimeout(toastTimer);
    toastTimer = setTimeout(() => { box.className = ""; }, 6000);
  }

  function hue(name) {
    let h = 0;
    for (const ch of name) h = (h * 31 + ch.codePointAt(0)) % 360;
    return h;
  }

  // Colours per agent and local times; CSSOM styling is allowed by the page's CSP.
  function decorate(root = document) {
    root.querySelectorAll("[data-agent]").forEach((el) => {
      if (el.classList.contains("sender")) el.style.color = `hsl(${hue(el.dataset.agent)}, 60%, 38%)`;
    });
    root.querySelectorAll("time[data-ts]").forEach((el) => {
      const d = new Date(parseFloat(el.dataset.ts) * 1000);
      el.textContent = d.toLocaleTimeString();
      el.title = d.toLocaleString();
    });
  }

  function setLive(state) {
    document.body.dataset.live = state;
    const dot = document.getElementById("live");
    if (dot) dot.title = state === "open" ? "live: connected" : `live: ${state}`;
  }

  function connect() {
    if (!document.getElementById("live")) return;
    setLive("connecting");
    const source = new EventSource("/ui/events");
    source.onopen = () => setLive("open");
    source.onerror = () => setLive(source.readyState === EventSource.CLOSED ? "closed" : "connecting");
    source.onmessage = (ev) => {
      let data;
      try { data = JSON.parse(ev.data); } catch (_) { return; }
      data.event_id = ev.lastEventId;
      listeners.forEach((fn) => fn(data));
    };
  }

  // A burst of events (a worker finishing several jobs) makes one refresh in flight plus one after it.
  let refreshing = null, again = false;
  async function refreshPanel() {
    if (refreshing) { again = true; return refreshing; }
    refreshing = loadPanel().finally(() => {
      refreshing = null;
      if (again) { again = false; refreshPanel(); }
    });
    return refreshing;
  }

  async function loadPanel() {
    const panel = document.getElementById("panel");
    if (!panel || document.hidden) return;
    const typing = document.activeElement;
    if (typing && panel.contains(typing) && typing.matches("input, textarea, select")) return;  // not under the cursor
    const url = new URL(location.href);
    url.searchParams.set("fragment", "1");
    const reply = await fetch(url, { credentials: "same-origin" });
    if (!reply.ok) return;
    const holder = document.createElement("div");
    holder.innerHTML = await reply.text();
    const fresh = holder.querySelector("#panel");
    const current = document.getElementById("panel");
    if (fresh && current) {
      current.replaceWith(fresh);
      decorate(fresh);
    }
  }

  async function act(button) {
    const { action, agent, snapshot, confirm: question } = button.dataset;
    if (question && !window.confirm(question)) return;
    button.disabled = true;
    const result = await send(`/ui/agents/${encodeURIComponent(agent)}/${action}`, "POST",
      snapshot ? { snapshot } : {});
    toast(result.ok ? result.data.message : errorText(result), !result.ok);
    if (action === "snapshot" || action === "rollback") setTimeout(() => location.reload(), 800);
    else if (document.getElementById("panel")?.dataset.refresh) refreshPanel();
  }

  document.addEventListener("click", (ev) => {
    const button = ev.target.closest("button[data-action]");
    if (button && !button.disabled) act(button);
  });

  // The diff view toggle (PR and commit pages): every diff on the page holds both views; a click shows
  // the other one without a reload and keeps it in the address (?view=split), so a reload keeps it too.
  function showDiffView(view) {
    document.querySelectorAll(".diffview").forEach((d) => { d.dataset.view = view; });
    document.querySelectorAll("a[data-diff-view]").forEach((a) => {
      const on = a.dataset.diffView === view;
      a.classList.toggle("active", on);
      a.setAttribute("aria-pressed", on ? "true" : "false");
    });
    const url = new URL(location.href);
    url.searchParams.set("view", view);
    history.replaceState(null, "", url);
  }
  document.addEventListener("click", (ev) => {
    const link = ev.target.closest("a[data-diff-view]");
    if (!link || ev.ctrlKey || ev.metaKey || ev.shiftKey) return;
    ev.preventDefault();
    showDiffView(link.dataset.diffView);
  });

  document.addEventListener("DOMContentLoaded", () => {
    decorate();
    connect();
    const panel = document.getElementById("panel");
    const every = panel && parseFloat(panel.dataset.refresh || "0");
    // A panel that stops asking for it (a job page once the job is final) is no longer refreshed.
    const due = () => { if (document.getElementById("panel")?.dataset.refresh) refreshPanel(); };
    if (every) setInterval(due, every * 1000);
    // Off the chat page, a new message lights up the Chat tab; other events refresh the panel.
    if (document.body.dataset.panel !== "chat") {
      KS.on((data) => {
        if (data.type === "message") document.getElementById("nav-chat")?.classList.add("unread");
        else if (every) due();
      });
    }
  });

  return { send, toast, errorText, decorate, on: (fn) => listeners.push(fn), refreshPanel };
})();
