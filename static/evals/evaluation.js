// The live run page (templates/evals/detail.html). The socket's frames replace the
// progress part (htmx's websocket extension swaps #eval-progress by id); on each frame,
// and so on every (re)connect, whose first frame is the current progress, the rest of
// the live part (results, the cancel button) is read again over HTTP: at most one
// request in flight and one a second, the last frame always followed by a read.
(function () {
  "use strict";
  const live = document.getElementById("eval-live");
  if (!live || !live.hasAttribute("ws-connect")) return;
  const url = live.dataset.refreshUrl;
  const GAP_MS = 1000;
  let last = 0;
  let timer = null;
  let inFlight = false;
  let pending = false;

  function read() {
    timer = null;
    if (inFlight) { pending = true; return; }
    inFlight = true;
    last = Date.now();
    htmx.ajax("GET", url, { target: "#eval-live-inner", swap: "innerHTML" })
      .catch(() => {})
      .finally(() => {
        inFlight = false;
        if (pending) { pending = false; schedule(); }
      });
  }

  function schedule() {
    if (timer !== null) return;
    timer = setTimeout(read, Math.max(0, last + GAP_MS - Date.now()));
  }

  live.addEventListener("htmx:wsAfterMessage", schedule);
})();
