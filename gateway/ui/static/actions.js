// Operator actions: buttons with data-post (POST JSON, optional data-body and data-confirm) and forms
// with data-post (their fields as JSON; data-reset clears them after success). Both carry the CSRF token
// (KS.send), show the answer as a toast and refresh the panel.
"use strict";

(() => {
  function fields(form, submitter) {
    const body = {};
    new FormData(form).forEach((value, key) => {
      if (key !== "csrf") body[key] = typeof value === "string" ? value : "";
    });
    if (submitter && submitter.name) body[submitter.name] = submitter.value;
    for (const [key, value] of Object.entries(body)) {
      if (form.querySelector(`[name="${CSS.escape(key)}"][data-list]`)) {
        body[key] = value.split(",").map((s) => s.trim()).filter(Boolean);
      }
    }
    return body;
  }

  // Only panels that refresh themselves are reloaded (an agent's live timeline keeps its page).
  const refresh = () => { if (document.getElementById("panel")?.dataset.refresh) KS.refreshPanel(); };

  function outcome(result, fallback) {
    if (!result.ok) return [KS.errorText(result), true];
    const message = result.data && (result.data.message || (result.data.id && `done: ${result.data.id}`));
    return [message || fallback, false];
  }

  document.addEventListener("click", async (ev) => {
    const button = ev.target.closest("button[data-post]");
    if (!button || button.disabled || button.form?.dataset.post) return;
    ev.preventDefault();
    if (button.dataset.confirm && !window.confirm(button.dataset.confirm)) return;
    button.disabled = true;
    let body = {};
    try { body = button.dataset.body ? JSON.parse(button.dataset.body) : {}; } catch (_) { body = {}; }
    try {
      const result = await KS.send(button.dataset.post, "POST", body);
      const [text, bad] = outcome(result, "done");
      KS.toast(text, bad);
      document.body.dataset.lastAction = bad ? "refused" : "done";
      // data-then="/ui/jobs/{job}": go where the answer's data says (the requeued job's page).
      const then = button.dataset.then;
      const data = (result.data && result.data.data) || {};
      if (!bad && then) {
        const target = then.replace(/\{(\w+)\}/g, (_, key) => encodeURIComponent(data[key] ?? ""));
        setTimeout(() => { location.href = target; }, 600);
      }
    } finally {
      button.disabled = false;
      refresh();
    }
  });

  document.addEventListener("submit", async (ev) => {
    const form = ev.target.closest("form[data-post]");
    if (!form) return;
    ev.preventDefault();
    const submitter = ev.submitter;
    if (submitter?.dataset.confirm && !window.confirm(submitter.dataset.confirm)) return;
    const buttons = [...form.querySelectorAll("button")];
    buttons.forEach((b) => { b.disabled = true; });
    try {
      const result = await KS.send(form.dataset.post, "POST", fields(form, submitter));
      const [text, bad] = outcome(result, "sent");
      KS.toast(text, bad);
      document.body.dataset.lastAction = bad ? "refused" : "done";
      if (!bad && form.dataset.reset) form.reset();
    } finally {
      buttons.forEach((b) => { b.disabled = false; });
      refresh();
    }
  });
})();
