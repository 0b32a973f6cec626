// The judge page: each side as a replay (scrubber, play/pause, the screen with the
// pointer marked), the reading-time countdown, keyboard shortcuts for the vote, and the
// undo countdown after it. Everything it shows comes from the page's markup.
(function () {
  "use strict";
  const STEP_MS = 1200;
  // The sandbox's screen is 1280 × 800 (sandboxes.base) and its Chromium window fills it;
  // the top 87 px are Chromium's tab strip and address bar (40 + 46 + a 1 px line, Debian's
  // Chromium). A screenshot taken while the browser showed a page is shown from below them
  // (judge.css: img.shot.page-only), the page alone; the enlarged view shows it whole.
  const SCREEN_RATIO = 1280 / 800;
  const BROWSER_TOP_PX = 87;

  function Replay(section) {
    const steps = Array.from(section.querySelectorAll("ol.timeline > li"));
    const scrub = section.querySelector("input.scrub");
    const shot = section.querySelector("img.shot");
    const pointer = section.querySelector(".pointer");
    const noShot = section.querySelector(".no-shot");
    const position = section.querySelector("output.position");
    const play = section.querySelector("button.play");
    const list = section.querySelector("ol.timeline");
    let index = 0;
    let timer = null;
    let touched = false;  // until the judge moves it, the replay rests on its latest screen
    let onPage = false;  // the shown screenshot was taken while the browser showed a page

    function crop() {
      // Only a whole 1280 × 800 screen (or one scaled down as a whole) is cropped.
      const whole = shot.naturalWidth > 0 &&
        Math.abs(shot.naturalWidth / shot.naturalHeight - SCREEN_RATIO) < 0.01;
      shot.classList.toggle("page-only", onPage && whole);
    }

    function placePointer(li) {
      const x = parseFloat(li.dataset.x), y = parseFloat(li.dataset.y);
      if (shot.hidden || isNaN(x) || isNaN(y) || !shot.naturalWidth) {
        pointer.hidden = true;
        return;
      }
      // Screenshot pixels → pixels of the image as laid out inside the screen box (the
      // page area is the bottom of the picture: what is cut is cut from the top).
      const scale = shot.offsetWidth / shot.naturalWidth;
      const cut = Math.max(0, shot.naturalHeight * scale - shot.offsetHeight);
      const top = y * scale - cut;
      if (top < 0) {  // in the browser's own bar, outside the page area shown
        pointer.hidden = true;
        return;
      }
      pointer.style.left = (shot.offsetLeft + x * scale) + "px";
      pointer.style.top = (shot.offsetTop + top) + "px";
      pointer.hidden = false;
    }

    function show(i) {
      index = Math.max(0, Math.min(steps.length - 1, i));
      const li = steps[index];
      // The screen as of this step: its own screenshot, else the latest before it.
      let url = null;
      for (let k = index; k >= 0 && !url; k--) {
        url = steps[k].dataset.shot || null;
        if (url) onPage = steps[k].dataset.browser === "1";
      }
      if (url) {
        if (shot.getAttribute("src") !== url) {
          pointer.hidden = true;
          shot.src = url;
        } else {
          crop();
          placePointer(li);
        }
        shot.hidden = false;
        noShot.hidden = true;
      } else {
        shot.hidden = true;
        noShot.hidden = false;
        pointer.hidden = true;
      }
      const next = steps[index + 1];
      if (next && next.dataset.shot) new Image().src = next.dataset.shot;
      steps.forEach((s, k) => s.classList.toggle("current", k === index));
      // Keep the current step in view inside the list, without scrolling the page.
      const top = li.offsetTop - list.offsetTop;
      if (top < list.scrollTop || top + li.offsetHeight > list.scrollTop + list.clientHeight) {
        list.scrollTop = Math.max(0, top - list.clientHeight / 3);
      }
      scrub.value = String(index);
      position.textContent = (index + 1) + " / " + steps.length;
    }

    function pause() {
      if (timer) clearInterval(timer);
      timer = null;
      play.textContent = "▶";
      play.setAttribute("aria-label", play.getAttribute("aria-label").replace("Pause", "Play"));
    }

    function start() {
      // Play starts from the first step unless the judge has already moved the replay.
      if (!touched || index >= steps.length - 1) show(0);
      touched = true;
      play.textContent = "❚❚";
      play.setAttribute("aria-label", play.getAttribute("aria-label").replace("Play", "Pause"));
      timer = setInterval(() => {
        if (index >= steps.length - 1) pause();
        else show(index + 1);
      }, STEP_MS);
    }

    shot.addEventListener("load", () => { crop(); placePointer(steps[index]); });
    window.addEventListener("resize", () => placePointer(steps[index]));
    scrub.addEventListener("input", () => { touched = true; pause(); show(parseInt(scrub.value, 10)); });
    play.addEventListener("click", () => (timer ? pause() : start()));
    steps.forEach((li, k) => li.addEventListener("click", (e) => {
      if (e.target.closest("a, pre")) return;
      touched = true;
      pause();
      show(k);
    }));
    show(parseInt(section.dataset.start || "0", 10) || 0);
    return {
      playing: () => timer !== null,
      play: start,
      pause: pause,
      step: (d) => { touched = true; pause(); show(index + d); },
    };
  }

  function startCountdown(form, buttons) {
    const timer = document.getElementById("read-timer");
    const box = document.getElementById("read-box");
    const progress = document.getElementById("read-progress");
    const announce = document.getElementById("read-announce");
    const opensAt = Date.now() + 1000 * parseFloat(form.dataset.readLeft || form.dataset.minRead);
    function tick() {
      const leftMs = opensAt - Date.now();
      const left = Math.ceil(leftMs / 1000);
      if (left <= 0) {
        buttons.forEach((b) => { b.disabled = false; });
        timer.innerHTML = "Voting is open.<span class=\"keys\"> Keys: A, B, T (tie), X (both bad), " +
          "S (abstain); N for the next battle.</span>";
        if (box) box.classList.add("open");
        if (announce) announce.textContent = "Voting is open.";
        return;
      }
      timer.textContent = "Read first: voting opens in " + left + " s";
      if (progress) progress.value = Math.max(0, leftMs / 1000);
      setTimeout(tick, 250);
    }
    tick();
  }

  function startUndoCountdown() {
    const button = document.getElementById("undo");
    const label = document.getElementById("undo-timer");
    if (!button || button.dataset.started) return;
    button.dataset.started = "1";
    const closesAt = Date.now() + 1000 * parseFloat(button.dataset.left || "0");
    (function tick() {
      const left = Math.ceil((closesAt - Date.now()) / 1000);
      if (left <= 0) {
        const form = document.getElementById("undo-form");
        if (form) form.remove();
        return;
      }
      label.textContent = "(" + left + " s)";
      setTimeout(tick, 250);
    })();
  }

  function typing(e) {
    return e.target.closest("input:not([type=range]), textarea, select, [contenteditable]");
  }

  document.addEventListener("DOMContentLoaded", () => {
    const replays = Array.from(document.querySelectorAll("section.replay"))
      .filter((s) => s.querySelector("ol.timeline"))
      .map(Replay);
    const playBoth = document.getElementById("play-both");
    function toggleBoth() {
      if (replays.some((r) => r.playing())) replays.forEach((r) => r.pause());
      else replays.forEach((r) => r.play());
    }
    if (playBoth) playBoth.addEventListener("click", toggleBoth);

    const form = document.getElementById("vote-form");
    if (!form) return;
    const buttons = Array.from(form.querySelectorAll("button.vote"));
    let voted = false;
    startCountdown(form, buttons);
    form.addEventListener("htmx:beforeRequest", () => {
      voted = true;
      buttons.forEach((b) => { b.disabled = true; });
    });
    form.addEventListener("htmx:beforeSwap", (e) => {
      // Show the server's explanation of a refused vote in place of the reveal.
      if (e.detail.xhr.status >= 400) {
        e.detail.shouldSwap = true;
        e.detail.isError = false;
      }
    });
    form.addEventListener("htmx:afterRequest", (e) => {
      const status = e.detail.xhr.status;
      const submitter = e.detail.requestConfig.triggeringEvent &&
        e.detail.requestConfig.triggeringEvent.submitter;
      if (status === 201 && submitter) submitter.classList.add("chosen");
      if (status === 400) {  // a malformed request: let the judge try again
        voted = false;
        buttons.forEach((b) => { b.disabled = false; });
      }
    });
    document.body.addEventListener("htmx:afterSettle", () => {
      startUndoCountdown();
      const card = document.getElementById("reveal-card");
      if (card && !card.dataset.shown) {
        card.dataset.shown = "1";
        card.scrollIntoView({ behavior: "smooth", block: "nearest" });
        const next = document.getElementById("next-battle");
        if (next) next.focus({ preventScroll: true });
      }
    });

    document.addEventListener("keydown", (e) => {
      if (e.ctrlKey || e.metaKey || e.altKey || typing(e)) return;
      if (document.querySelector("dialog[open]")) return;  // a confirmation is asked
      const key = e.key.toLowerCase();
      if (key === " " && replays.length && !e.target.closest("button, a")) {
        e.preventDefault();
        toggleBoth();
        return;
      }
      if ((key === "arrowleft" || key === "arrowright") && !e.target.closest("input")) {
        replays.forEach((r) => r.step(key === "arrowright" ? 1 : -1));
        return;
      }
      if (key === "n" && document.getElementById("next-battle")) {
        document.getElementById("next-battle").click();
        return;
      }
      if (voted) return;
      const b = buttons.find((x) => x.dataset.key === key || x.dataset.digit === key);
      if (b && !b.disabled) {
        e.preventDefault();
        b.click();
      }
    });
  });
})();
