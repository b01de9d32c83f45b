// The console's live parts (templates: an element with data-live polls itself through htmx, e.g.
// hx-get + hx-trigger="every 5s"; the server answers a request with HX-Request with that part only).
// This file adds what htmx leaves to the page, without inline code (the Content Security Policy):
// - a "live / paused" switch (.live-toggle), remembered per browser; paused parts send no request;
// - the age of what is shown (.live-age): when the page last got the part, and the data's own age
//   from the part (data-age on an element inside it);
// - what changed since the last refresh is highlighted for a moment (elements with data-key);
// - a part in which the person ticked a box or is typing waits until they are done.
(function () {
  "use strict";
  var STORE = "leitstand-live-paused";

  function paused() {
    return window.localStorage.getItem(STORE) === "1";
  }

  function showState() {
    document.querySelectorAll(".live-toggle").forEach(function (button) {
      var on = !paused();
      button.textContent = on ? "● live" : "❚❚ paused";
      button.setAttribute("aria-pressed", on ? "true" : "false");
      button.classList.toggle("is-paused", !on);
    });
  }

  function showAge(part) {
    var inner = part.querySelector("[data-age]");
    var now = new Date().toLocaleTimeString();
    document.querySelectorAll(".live-age").forEach(function (label) {
      label.textContent =
        "updated " + now + (inner ? " · data " + inner.getAttribute("data-age") + " old" : "");
    });
  }

  var before = {};

  document.addEventListener("click", function (event) {
    var button = event.target.closest(".live-toggle");
    if (!button) return;
    window.localStorage.setItem(STORE, paused() ? "0" : "1");
    showState();
  });

  // A part that holds the person's input (a ticked box, an opened form, a field being typed in) waits.
  function holdsInput(part) {
    return (
      part.querySelector("input:checked, details[open]") !== null || part.contains(document.activeElement)
    );
  }

  document.addEventListener("htmx:beforeRequest", function (event) {
    var part = event.detail.elt;
    if (part.hasAttribute("data-live") && (paused() || holdsInput(part))) event.preventDefault();
  });

  document.addEventListener("htmx:beforeSwap", function (event) {
    before = {};
    event.detail.target.querySelectorAll("[data-key]").forEach(function (element) {
      before[element.getAttribute("data-key")] = element.textContent.trim();
    });
  });

  document.addEventListener("htmx:afterSettle", function (event) {
    var part = event.detail.target;
    if (!part.hasAttribute("data-live")) return;
    part.querySelectorAll("[data-key]").forEach(function (element) {
      var key = element.getAttribute("data-key");
      if (key in before && before[key] !== element.textContent.trim()) {
        element.classList.remove("live-changed");
        void element.offsetWidth; // restart the highlight
        element.classList.add("live-changed");
      }
    });
    showAge(part);
  });

  document.addEventListener("DOMContentLoaded", function () {
    showState();
    document.querySelectorAll("[data-live]").forEach(showAge);
  });
})();
