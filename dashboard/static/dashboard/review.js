// The reviewer workspace's keyboard: m = match, n = no match, e = escalate, s = skip, ? = help.
// A decision needs a reason: the key fills the verdict and moves to the reason field; Enter submits.
(function () {
  const form = document.getElementById("review-form");
  if (!form) return;
  const reason = form.querySelector("textarea[name=reason]");
  const verdict = form.querySelector("input[name=verdict]");
  const label = document.getElementById("review-verdict");
  const help = document.getElementById("review-help");
  const keys = { m: "match", n: "no_match", e: "escalate", s: "skip" };
  document.addEventListener("keydown", function (event) {
    if (event.target === reason) {
      if (event.key === "Enter" && !event.shiftKey && verdict.value) { event.preventDefault(); form.submit(); }
      if (event.key === "Escape") { reason.blur(); }
      return;
    }
    if (event.key === "?") { help.hidden = !help.hidden; return; }
    const chosen = keys[event.key];
    if (!chosen) return;
    event.preventDefault();
    verdict.value = chosen;
    label.textContent = chosen.replace("_", " ");
    if (chosen === "skip") { form.submit(); return; }
    reason.focus();
  });
  form.querySelectorAll("button[data-verdict]").forEach(function (button) {
    button.addEventListener("click", function () { verdict.value = button.dataset.verdict; });
  });
})();

// The images: side by side at the same width (so at the same scale), or on one canvas at the
// original's size — overlay (the slider mixes them), swipe (the slider moves the border) or the
// difference of the two (identical pixels are black). Zoom scales both. The images are data: URIs
// of the same page, so the canvas may read them.
(function () {
  const views = document.getElementById("review-views");
  if (!views) return;
  const candidate = document.getElementById("candidate-image");
  const original = document.getElementById("asset-image");
  const pair = document.getElementById("review-pair");
  const stage = document.getElementById("review-stage");
  const canvas = document.getElementById("review-canvas");
  const zoom = document.getElementById("review-zoom");
  const zoomValue = document.getElementById("review-zoom-value");
  const mix = document.getElementById("review-mix");
  const mixLabel = document.getElementById("review-mix-label");
  const mixName = document.getElementById("review-mix-name");
  let view = "side";

  function draw() {
    const scale = Number(zoom.value);
    zoomValue.textContent = scale + "×";
    pair.style.setProperty("--zoom", scale);
    pair.hidden = view !== "side";
    stage.hidden = view === "side";
    mixLabel.hidden = view !== "overlay" && view !== "swipe";
    mixName.textContent = view === "swipe" ? "border" : "candidate";
    if (view === "side") return;
    const width = Math.round(560 * scale);
    const height = Math.round(width * original.naturalHeight / Math.max(original.naturalWidth, 1));
    canvas.width = width;
    canvas.height = height;
    const context = canvas.getContext("2d");
    context.globalCompositeOperation = "source-over";
    context.globalAlpha = 1;
    context.drawImage(original, 0, 0, width, height);
    const share = Number(mix.value) / 100;
    if (view === "overlay") {
      context.globalAlpha = share;
      context.drawImage(candidate, 0, 0, width, height);
    } else if (view === "swipe") {
      const border = Math.round(width * share);
      context.drawImage(candidate, 0, 0, candidate.naturalWidth * share, candidate.naturalHeight, 0, 0, border, height);
      context.fillStyle = "#f5dd5d";
      context.fillRect(border - 1, 0, 2, height);
    } else if (view === "difference") {
      context.globalCompositeOperation = "difference";
      context.drawImage(candidate, 0, 0, width, height);
    }
    canvas.dataset.view = view;
  }

  views.querySelectorAll("button[data-view]").forEach(function (button) {
    button.addEventListener("click", function () {
      view = button.dataset.view;
      views.querySelectorAll("button[data-view]").forEach(function (other) {
        other.setAttribute("aria-pressed", other === button ? "true" : "false");
      });
      draw();
    });
  });
  zoom.addEventListener("input", draw);
  mix.addEventListener("input", draw);
})();

// The hold on the case: how long it is still yours.
(function () {
  const countdown = document.getElementById("hold-countdown");
  if (!countdown) return;
  const expires = new Date(countdown.dataset.expires).getTime();
  function tick() {
    const left = Math.max(0, Math.round((expires - Date.now()) / 1000));
    countdown.textContent = left > 0
      ? "yours for " + Math.floor(left / 60) + ":" + String(left % 60).padStart(2, "0")
      : "your hold has expired: another reviewer may take the case";
    countdown.classList.toggle("console-warning", left < 60);
  }
  tick();
  setInterval(tick, 1000);
})();
