// The live run page (templates/evals/detail.html). The socket's frames replace the
// progress part (htmx's websocket extension swaps #eval-progress by id); on each frame,
// and so on every (re)connect, whose first frame is the current progress, the rest of
// the live part (results, the cancel button) is read again over HTTP: at most one
// request in flight and one a second, the last frame always followed by a read.
//
// The page never shows two states at once: a frame that says the evaluation has
// finished takes the cancel button away at once and marks the results as being
// brought up to date; a read that fails, or that is older than the finished frame
// (it left the server before the evaluation ended), is read again until the results
// say finished too. Then the socket has nothing more to say and the page stops reading.
(function () {
  "use strict";
  const live = document.getElementById("eval-live");
  if (!live || !live.hasAttribute("ws-connect")) return;
  const url = live.dataset.refreshUrl;
  const FINISHED = ["done", "cancelled"];
  const GAP_MS = 1000;
  const MAX_RETRIES = 60;
  let last = 0;
  let timer = null;
  let inFlight = false;
  let pending = false;
  let finishedSeen = false;
  let settled = false;
  let retries = 0;

  function statusOf(root) {
    const progress = root.querySelector("#eval-progress");
    return progress ? progress.dataset.status : "";
  }

  function onFinishedFrame() {
    finishedSeen = true;
    const cancel = document.getElementById("eval-cancel-form");
    if (cancel) cancel.remove();
    const body = document.getElementById("eval-body");
    if (body) body.setAttribute("aria-busy", "true");
  }

  function swapIn(html) {
    const inner = document.getElementById("eval-live-inner");
    const fresh = document.createElement("div");
    fresh.innerHTML = html;
    const status = statusOf(fresh);
    const current = document.getElementById("eval-progress");
    const arrived = fresh.querySelector("#eval-progress");
    // A read older than the last frame keeps the frame's (newer) progress.
    if (current && arrived && finishedSeen && !FINISHED.includes(status)) {
      arrived.replaceWith(current.cloneNode(true));
    }
    inner.replaceChildren(...fresh.childNodes);
    htmx.process(inner);
    return status;
  }

  function read() {
    timer = null;
    if (settled) return;
    if (inFlight) { pending = true; return; }
    inFlight = true;
    last = Date.now();
    fetch(url, { credentials: "same-origin", headers: { "HX-Request": "true" } })
      .then((response) => {
        if (!response.ok) throw new Error(`HTTP ${response.status}`);
        return response.text();
      })
      .then((html) => {
        retries = 0;
        const status = swapIn(html);
        if (FINISHED.includes(status)) {
          settled = true;
          live.dataset.settled = "true";
        } else if (finishedSeen) {
          onFinishedFrame();  // older than the finished frame: never show its cancel
          pending = true;  // and read again
        }
      })
      .catch(() => {
        if (retries < MAX_RETRIES) { retries += 1; pending = true; }
      })
      .finally(() => {
        inFlight = false;
        if (pending) { pending = false; schedule(); }
      });
  }

  function schedule() {
    if (timer !== null || settled) return;
    timer = setTimeout(read, Math.max(0, last + GAP_MS - Date.now()));
  }

  live.addEventListener("htmx:wsAfterMessage", () => {
    if (settled) return;  // the results are final: a late frame has nothing newer
    if (FINISHED.includes(statusOf(document))) onFinishedFrame();
    schedule();
  });
})();
