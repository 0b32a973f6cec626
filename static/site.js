// Site-wide behaviour, loaded on every page (no inline script: the CSP forbids it).
// 1. The "Live / Reconnecting…" indicator in the header, for pages with a websocket
//    (htmx's ws extension: [ws-connect]); it reconnects by itself, this says so.
// 2. Confirmation before a form that asks for it (data-confirm="what happens") is sent,
//    in the page's <dialog id="confirm-dialog">; htmx forms included.
(function () {
  "use strict";

  function liveIndicator() {
    const status = document.getElementById("live-status");
    if (!status || !document.querySelector("[ws-connect]")) return;
    const states = new Map();  // socket element → "connecting" | "open" | "closed"
    let everOpen = false;
    function render() {
      const values = Array.from(states.values());
      let state = "connecting";
      if (values.length && values.every((v) => v === "open")) state = "open";
      else if (values.some((v) => v === "closed")) state = "closed";
      status.dataset.state = state;
      status.textContent = state === "open" ? "Live"
        : state === "closed" ? "Reconnecting…"
        : everOpen ? "Reconnecting…" : "Connecting…";
      status.title = state === "open" ? "This page updates by itself as things change."
        : "The live connection is down; the page keeps trying and catches up once it is back.";
      status.hidden = false;
    }
    function on(name, state) {
      document.body.addEventListener(name, (e) => {
        const el = e.target.closest ? e.target.closest("[ws-connect]") || e.target : e.target;
        if (state === "open") everOpen = true;
        states.set(el, state);
        render();
      });
    }
    on("htmx:wsConnecting", "connecting");
    on("htmx:wsOpen", "open");
    on("htmx:wsClose", "closed");
    on("htmx:wsError", "closed");
    document.querySelectorAll("[ws-connect]").forEach((el) => { if (!states.has(el)) states.set(el, "connecting"); });
    render();
  }

  function confirmations() {
    const dialog = document.getElementById("confirm-dialog");
    if (!dialog || typeof dialog.showModal !== "function") return;
    const title = document.getElementById("confirm-title");
    const text = document.getElementById("confirm-text");
    const yes = document.getElementById("confirm-yes");
    let pending = null;  // {form, submitter} waiting for the answer

    // Capture phase on the document: runs before htmx's own listener on the form.
    document.addEventListener("submit", (e) => {
      const form = e.target;
      if (!(form instanceof HTMLFormElement) || !form.dataset.confirm) return;
      if (form.dataset.confirmed === "1") {
        delete form.dataset.confirmed;
        return;
      }
      e.preventDefault();
      e.stopImmediatePropagation();
      pending = { form: form, submitter: e.submitter || null };
      title.textContent = form.dataset.confirmTitle || "Are you sure?";
      text.textContent = form.dataset.confirm;
      yes.textContent = form.dataset.confirmYes || "Confirm";
      dialog.returnValue = "";
      dialog.showModal();
    }, true);

    dialog.addEventListener("close", () => {
      const answer = pending;
      pending = null;
      if (!answer || dialog.returnValue !== "confirm" || !answer.form.isConnected) return;
      answer.form.dataset.confirmed = "1";
      if (answer.submitter && answer.submitter.isConnected) answer.form.requestSubmit(answer.submitter);
      else answer.form.requestSubmit();
    });
  }

  // A deferred script: the document is parsed, and htmx (loaded before) has not yet
  // opened its sockets, which it does on DOMContentLoaded.
  liveIndicator();
  confirmations();
})();
