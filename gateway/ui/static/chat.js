// The Chat panel: live messages, unread badges, scroll-back, threads, the composer and @completion.
"use strict";

document.addEventListener("DOMContentLoaded", () => {
  const chat = document.getElementById("chat");
  if (!chat) return;
  const channel = chat.dataset.channel;
  const atMode = chat.dataset.at !== "";
  const feed = channel === "*";
  const onlyAgent = chat.dataset.filterAgent || "";
  const onlyKind = chat.dataset.filterKind || "";
  const passes = (data) => (!onlyAgent || (data.sender || data.agent) === onlyAgent) &&
    (!onlyKind || data.activity === onlyKind);
  const list = document.getElementById("messages");
  const olderButton = document.getElementById("older");
  const newBelow = document.getElementById("new-below");
  const pane = document.getElementById("thread-pane");
  const principals = JSON.parse(document.getElementById("principals").textContent);
  let loadingOlder = false;

  const nearBottom = () => list.scrollHeight - list.scrollTop - list.clientHeight < 80;
  const toBottom = () => { list.scrollTop = list.scrollHeight; newBelow.hidden = true; };

  function fragment(html) {
    const t = document.createElement("template");
    t.innerHTML = html;
    return t.content;
  }

  function bumpBadge(name) {
    let link = document.querySelector(`.sidebar a.chan[data-chan="${CSS.escape(name)}"]`);
    if (!link) {  // a channel or DM created after the page loaded
      link = document.createElement("a");
      link.className = "chan" + (name.startsWith("dm:") ? " dm" : "");
      link.href = "/ui/chat?c=" + encodeURIComponent(name);
      link.dataset.chan = name;
      link.textContent = name.startsWith("dm:") ? name.split(":").slice(1).join(" ↔ ") + " " : "# " + name + " ";
      const badge = document.createElement("span");
      badge.className = "badge";
      link.appendChild(badge);
      document.getElementById(name.startsWith("dm:") ? "dm-list" : "channel-list").appendChild(link);
    }
    const badge = link.querySelector(".badge");
    badge.textContent = String((parseInt(badge.textContent || "0", 10) || 0) + 1);
  }

  // A message is keyed by its channel and id: ids are unique across channels, but ones written
  // before that was so (older data) are unique only within their channel.
  const messageSelector = (channelName, id) =>
    `[data-channel="${CSS.escape(channelName)}"][data-id="${CSS.escape(id)}"]`;

  function bumpReplies(channelName, root) {
    const link = document.querySelector(`article${messageSelector(channelName, root)} > footer .reply`);
    if (!link) return;
    const count = link.querySelector(".count");
    const n = (count ? parseInt(count.textContent, 10) : 0) + 1;
    link.innerHTML = "";
    const span = document.createElement("span");
    span.className = "count";
    span.textContent = String(n);
    link.append(span, n === 1 ? " reply" : " replies");
  }

  KS.on((data) => {
    if (data.type === "job" && data.html && feed && !atMode && passes(data)) {  // a job's step, in the feed
      if (list.querySelector(`:scope > [data-event="${CSS.escape(data.event_id)}"]`)) return;
      const stick = nearBottom();
      const node = fragment(data.html);
      const el = node.firstElementChild;
      list.appendChild(node);
      KS.decorate(el);
      if (stick) toBottom(); else newBelow.hidden = false;
      return;
    }
    if (data.type !== "message" || !data.html) return;
    if (data.thread) bumpReplies(data.channel, data.thread);
    const thread = pane.querySelector(".thread");
    if (thread && data.channel === thread.dataset.channel && data.thread === thread.dataset.root &&
        !document.getElementById("thread-messages").querySelector(messageSelector(data.channel, data.id))) {
      document.getElementById("thread-messages").appendChild(fragment(data.html));
      KS.decorate(pane);
    }
    if (!(feed || data.channel === channel) || atMode) {
      if (data.channel !== channel) bumpBadge(data.channel);
      return;
    }
    if (list.querySelector(`:scope > ${messageSelector(data.channel, data.id)}`)) return;  // resumed: seen
    if (!passes(data)) return;  // filtered out of this view
    const stick = nearBottom();
    const node = fragment(data.html);
    const el = node.firstElementChild;
    list.appendChild(node);
    KS.decorate(el);
    if (stick) toBottom(); else newBelow.hidden = false;
  });

  async function loadOlder() {
    const first = list.querySelector(":scope > article");
    if (loadingOlder || !first || olderButton.hidden) return;
    loadingOlder = true;
    const before = feed ? first.dataset.event : first.dataset.id;
    let url = `/ui/chat/history?c=${encodeURIComponent(channel)}&before=${encodeURIComponent(before)}`;
    if (onlyAgent) url += `&agent=${encodeURIComponent(onlyAgent)}`;
    if (onlyKind) url += `&kind=${encodeURIComponent(onlyKind)}`;
    try {
      const reply = await fetch(url, { credentials: "same-origin" });
      if (!reply.ok) { KS.toast(`could not load older messages: HTTP ${reply.status}`, true); return; }
      const oldHeight = list.scrollHeight;
      const node = fragment(await reply.text());
      const added = [...node.children];
      olderButton.after(node);
      added.forEach((el) => KS.decorate(el));
      list.scrollTop += list.scrollHeight - oldHeight;
      if (reply.headers.get("X-More") !== "1") olderButton.hidden = true;
    } finally {
      loadingOlder = false;
    }
  }

  olderButton.addEventListener("click", loadOlder);
  list.addEventListener("scroll", () => {
    if (list.scrollTop < 40) loadOlder();
    if (nearBottom()) newBelow.hidden = true;
  });
  newBelow.addEventListener("click", toBottom);

  async function openThread(messageEl, root) {
    const c = messageEl?.dataset.channel || channel;
    const reply = await fetch(`/ui/chat/thread?c=${encodeURIComponent(c)}&root=${encodeURIComponent(root)}`,
      { credentials: "same-origin" });
    if (!reply.ok) { KS.toast(`could not open the thread: HTTP ${reply.status}`, true); return; }
    pane.innerHTML = await reply.text();
    pane.hidden = false;
    KS.decorate(pane);
    pane.querySelector("textarea")?.focus();
  }

  document.addEventListener("click", (ev) => {
    const opener = ev.target.closest("[data-open-thread]");
    if (opener) {
      ev.preventDefault();
      openThread(opener.closest("article"), opener.dataset.openThread);
    } else if (ev.target.closest("[data-close-thread]")) {
      pane.hidden = true;
      pane.innerHTML = "";
    }
  });

  async function submit(form) {
    const area = form.querySelector("textarea");
    const error = form.querySelector(".composer-error");
    const text = area.value;
    if (!text.trim()) return;
    const body = { text };
    if (form.dataset.replyTo) body.reply_to = form.dataset.replyTo;
    const button = form.querySelector("button[type=submit]");
    button.disabled = true;
    try {
      const result = await KS.send(form.dataset.post, "POST", body);
      if (!result.ok) { error.textContent = KS.errorText(result); return; }
      error.textContent = "";
      area.value = "";
      if (!form.dataset.replyTo && !document.querySelector(`.sidebar a.chan[data-chan="${CSS.escape(result.data.channel)}"]`)) {
        location.href = "/ui/chat?c=" + encodeURIComponent(result.data.channel);  // a new DM
      }
      toBottom();
    } finally {
      button.disabled = false;
    }
  }

  // @completion: a small menu of matching principals under the textarea being typed in.
  const menu = document.createElement("ul");
  menu.className = "complete";
  menu.hidden = true;
  document.body.appendChild(menu);
  let menuTarget = null;

  function mentionPrefix(area) {
    const upto = area.value.slice(0, area.selectionStart);
    const m = upto.match(/(?:^|[\s(])@([a-z0-9-]*)$/);
    return m ? m[1] : null;
  }

  function showMenu(area) {
    const prefix = mentionPrefix(area);
    const names = prefix === null ? [] : ["all", ...principals].filter((n) => n.startsWith(prefix)).slice(0, 8);
    if (!names.length) { menu.hidden = true; return; }
    menu.innerHTML = "";
    names.forEach((n, i) => {
      const li = document.createElement("li");
      li.textContent = "@" + n;
      li.dataset.name = n;
      if (i === 0) li.className = "sel";
      menu.appendChild(li);
    });
    const rect = area.getBoundingClientRect();
    menu.style.left = `${rect.left + window.scrollX}px`;
    menu.style.top = `${rect.top + window.scrollY - Math.min(names.length, 8) * 24 - 8}px`;
    menu.hidden = false;
    menuTarget = area;
  }

  function pick(name) {
    const area = menuTarget;
    const upto = area.value.slice(0, area.selectionStart);
    const start = upto.lastIndexOf("@");
    area.value = area.value.slice(0, start) + "@" + name + " " + area.value.slice(area.selectionStart);
    area.selectionStart = area.selectionEnd = start + name.length + 2;
    menu.hidden = true;
    area.focus();
  }

  menu.addEventListener("mousedown", (ev) => {
    const li = ev.target.closest("li");
    if (li) { ev.preventDefault(); pick(li.dataset.name); }
  });

  document.addEventListener("input", (ev) => {
    if (ev.target.matches(".composer textarea")) showMenu(ev.target);
  });

  document.addEventListener("keydown", (ev) => {
    const area = ev.target.closest(".composer textarea");
    if (!area) return;
    if (!menu.hidden && menuTarget === area) {
      const items = [...menu.children];
      const at = items.findIndex((li) => li.classList.contains("sel"));
      if (ev.key === "ArrowDown" || ev.key === "ArrowUp") {
        ev.preventDefault();
        items[at]?.classList.remove("sel");
        items[(at + (ev.key === "ArrowDown" ? 1 : items.length - 1)) % items.length].classList.add("sel");
        return;
      }
      if (ev.key === "Tab" || ev.key === "Enter") { ev.preventDefault(); pick(items[Math.max(at, 0)].dataset.name); return; }
      if (ev.key === "Escape") { menu.hidden = true; return; }
    }
    if (ev.key === "Enter" && !ev.shiftKey) {
      ev.preventDefault();
      submit(area.closest("form"));
    }
  });

  document.addEventListener("submit", (ev) => {
    const form = ev.target.closest("form.composer");
    if (form) { ev.preventDefault(); submit(form); }
  });

  // Open on the newest message, or on the one asked for (?at=).
  if (atMode) {
    const target = document.getElementById("m-" + chat.dataset.at);
    if (target) { target.classList.add("target"); target.scrollIntoView({ block: "center" }); }
  } else {
    toBottom();
  }
});
