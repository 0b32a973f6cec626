// Site-wide behaviour, loaded on every page (no inline script: the CSP forbids it).
// 1. The "Live / Reconnecting…" indicator in the header, for pages with a websocket
//    (htmx's ws extension: [ws-connect]); it reconnects by itself, this says so.
// 2. Confirmation before a form that asks for it (data-confirm="what happens") is sent,
//    in the page's <dialog id="confirm-dialog">; htmx forms included.
// 3. Enlarging a picture (issue 37): a [data-enlarge] button holding an <img> opens that
//    image whole and full size in a dialog (see the marked section below).
// 4. Copying a text (issue 37): a [data-copy="#id"] button copies that element's text
//    (an invite link) and says so in its [data-copied] status.
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

  // --- issue 37 — enlarge a screenshot -------------------------------------------------
  // A click, Enter or Space on a [data-enlarge] button (the judge page's screens) opens the
  // <img> inside it in a modal dialog: the whole picture, never cropped, fitted to the
  // window or at its actual size (a button switches), the frame scrolling when it is larger.
  // Escape, the Close button or a click beside the picture closes it; focus goes back to
  // the button. The dialog is made here once: the pages hold no markup for it.
  function enlarge() {
    let dialog = null;
    let trigger = null;

    function make() {
      dialog = document.createElement("dialog");
      dialog.className = "enlarge";
      dialog.id = "enlarge-dialog";
      dialog.setAttribute("aria-labelledby", "enlarge-title");
      const bar = document.createElement("div");
      bar.className = "enlarge-bar";
      const title = document.createElement("h2");
      title.id = "enlarge-title";
      const size = document.createElement("button");
      size.type = "button";
      size.className = "secondary enlarge-size";
      size.setAttribute("aria-pressed", "false");
      size.textContent = "Actual size";
      const close = document.createElement("button");
      close.type = "button";
      close.className = "secondary enlarge-close";
      close.textContent = "Close";
      bar.append(title, size, close);
      const frame = document.createElement("div");
      frame.className = "enlarge-frame";
      frame.tabIndex = 0;  // it scrolls at actual size: the keyboard can scroll it too
      frame.setAttribute("aria-label", "The picture (scrolls at actual size)");
      frame.setAttribute("role", "group");
      const img = document.createElement("img");
      frame.append(img);
      dialog.append(bar, frame);
      document.body.append(dialog);
      size.addEventListener("click", () => {
        const actual = !dialog.classList.contains("actual");
        dialog.classList.toggle("actual", actual);
        size.setAttribute("aria-pressed", String(actual));
      });
      close.addEventListener("click", () => dialog.close());
      // A click on the backdrop (the dialog element itself, outside its content) closes.
      dialog.addEventListener("click", (e) => { if (e.target === dialog) dialog.close(); });
      dialog.addEventListener("close", () => {
        if (trigger && trigger.isConnected) trigger.focus();
        trigger = null;
      });
    }

    document.addEventListener("click", (e) => {
      const button = e.target.closest ? e.target.closest("[data-enlarge]") : null;
      if (!button) return;
      const source = button.querySelector("img");
      const src = source && !source.hidden ? source.getAttribute("src") : "";
      if (!src) return;
      if (!dialog) make();
      if (typeof dialog.showModal !== "function") return;
      trigger = button;
      const img = dialog.querySelector("img");
      img.src = src;
      img.alt = (source.alt || "The picture") + ", whole, at full size";
      dialog.querySelector("#enlarge-title").textContent =
        button.dataset.enlargeTitle || source.alt || "The picture";
      dialog.classList.remove("actual");
      dialog.querySelector(".enlarge-size").setAttribute("aria-pressed", "false");
      dialog.showModal();
      dialog.querySelector(".enlarge-close").focus();
    });
  }
  // --- end issue 37 — enlarge a screenshot ---------------------------------------------

  // --- issue 37 — copy a text -----------------------------------------------------------
  function copying() {
    document.querySelectorAll("[data-copy]").forEach((button) => {
      const source = document.querySelector(button.dataset.copy);
      const status = document.getElementById(button.dataset.copied || "");
      if (!source) return;
      button.hidden = false;  // (without this script the text is there to copy by hand)
      button.addEventListener("click", () => {
        const text = source.textContent.trim();
        const said = (words) => { if (status) status.textContent = words; };
        if (navigator.clipboard && window.isSecureContext) {
          navigator.clipboard.writeText(text).then(
            () => said("Copied."),
            () => said("Could not copy: select the link and copy it."),
          );
        } else {
          // no clipboard here (a page over plain http): select it for the person
          const range = document.createRange();
          range.selectNodeContents(source);
          const selection = window.getSelection();
          selection.removeAllRanges();
          selection.addRange(range);
          said("Selected: copy it with Ctrl+C.");
        }
      });
    });
  }
  // --- end issue 37 — copy a text -------------------------------------------------------

  // A deferred script: the document is parsed, and htmx (loaded before) has not yet
  // opened its sockets, which it does on DOMContentLoaded.
  liveIndicator();
  confirmations();
  enlarge();
  copying();
})();
