// Live desktops (templates/battles/_live_desktop.html, battles/live_consumers.py): shows
// each lane's newest frame. Receive-only: this script never sends on the socket.
(() => {
  "use strict";
  const RETRY_MS = [1000, 2000, 5000, 10000];
  const STALE_MS = 3000;
  window.__liveFrames = window.__liveFrames || {};

  function start(section) {
    if (section.dataset.liveStarted) return;
    section.dataset.liveStarted = "1";
    const status = section.querySelector("[data-live-status]");
    const lanes = new Map();
    section.querySelectorAll("[data-live-run]").forEach((lane) => lanes.set(lane.dataset.liveRun, lane));
    const url = new URL(section.dataset.liveSocket, window.location.href);
    url.protocol = window.location.protocol === "https:" ? "wss:" : "ws:";
    let tries = 0;
    let lastFrame = 0;
    const say = (text) => { if (status.textContent !== text) status.textContent = text; };

    function connect() {
      const socket = new WebSocket(url);
      socket.onopen = () => { tries = 0; say("Waiting for the first frame…"); };
      socket.onmessage = (event) => {
        let frame;
        try { frame = JSON.parse(event.data); } catch (_) { return; }
        const lane = lanes.get(String(frame.run));
        if (!lane || typeof frame.jpeg !== "string") return;
        const image = lane.querySelector("img");
        image.src = "data:image/jpeg;base64," + frame.jpeg;
        image.hidden = false;
        const frames = Number(lane.dataset.frames) + 1;
        lane.dataset.frames = String(frames);
        window.__liveFrames[lane.dataset.side || frame.run] = frames;
        lastFrame = Date.now();
        say("Live");
      };
      socket.onclose = (event) => {
        if (event.code === 4404) { say("The live view is for the battle's team only."); return; }
        if (tries < RETRY_MS.length) {
          say("Reconnecting…");
          window.setTimeout(connect, RETRY_MS[tries++]);
        } else {
          say("The live view is not available now; the steps still follow the battle.");
        }
      };
    }

    window.setInterval(() => {
      if (lastFrame && Date.now() - lastFrame > STALE_MS) say("No new frame: the lanes may have ended.");
    }, 1000);
    connect();
  }

  document.querySelectorAll("[data-live-socket]").forEach(start);
})();
