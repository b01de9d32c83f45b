// The home's trend charts: the series of /admin/trends/ (per-minute rollups the control process
// records) drawn by uPlot (vendored: dashboard/static/dashboard/vendor/uplot) with time axes, units
// and the values under the cursor in each legend. A type and a range (1h / 24h / 7d) are chosen
// above the charts; they refresh every minute. No inline code (the Content Security Policy).
(function () {
  "use strict";
  var section = document.getElementById("trends");
  if (!section || typeof uPlot === "undefined") return;
  var state = { type: "", range: "1h" };
  var charts = [];
  var CHARTS = [
    { id: "trend-queue", unit: "jobs", series: [["due", "due", "#417690"], ["running", "running", "#6f42c1"], ["waiting_retry", "waiting to retry", "#d39e00"]] },
    { id: "trend-throughput", unit: "/min", series: [["done_per_min", "done", "#198754"], ["dead_per_min", "dead", "#b02a37"]] },
    { id: "trend-oldest", unit: "s", series: [["oldest_due_s", "oldest due", "#d39e00"]] },
    { id: "trend-runtime", unit: "ms", series: [["p50_ms", "p50", "#417690"], ["p95_ms", "p95", "#b02a37"]] },
  ];

  function withUnit(unit) {
    return function (u, value) {
      return value == null ? "—" : (Math.round(value * 100) / 100) + " " + unit;
    };
  }

  function offerTypes(types) {
    var select = document.getElementById("trend-type");
    var offered = Array.prototype.map.call(select.options, function (option) { return option.value; });
    types.forEach(function (name) {
      if (offered.indexOf(name) < 0) select.add(new Option(name, name));
    });
  }

  function draw(data) {
    offerTypes(data.types || []);
    charts.forEach(function (chart) { chart.destroy(); });
    charts = [];
    var width = Math.max(320, Math.min(560, section.clientWidth / 2 - 24));
    CHARTS.forEach(function (spec) {
      var figure = document.getElementById(spec.id);
      var options = {
        width: width,
        height: 180,
        series: [{}].concat(spec.series.map(function (s) {
          return { label: s[1], stroke: s[2], width: 2, spanGaps: false, value: withUnit(spec.unit) };
        })),
        axes: [{}, { label: spec.unit, size: 60 }],
        scales: { y: { range: function (u, min, max) { return [0, Math.max(1, max)]; } } },
      };
      var columns = [data.t].concat(spec.series.map(function (s) { return data[s[0]]; }));
      charts.push(new uPlot(options, columns, figure));
    });
    section.dataset.points = String(data.t.length);
    section.dataset.drawn = state.type + "/" + state.range;
  }

  function load() {
    var url = section.dataset.url + "?range=" + encodeURIComponent(state.range) + "&type=" + encodeURIComponent(state.type);
    fetch(url, { credentials: "same-origin", headers: { Accept: "application/json" } })
      .then(function (response) { return response.json(); })
      .then(draw)
      .catch(function (error) { document.getElementById("trend-note").textContent = "the trends could not be loaded: " + error; });
  }

  document.getElementById("trend-type").addEventListener("change", function (event) {
    state.type = event.target.value;
    load();
  });
  document.querySelectorAll("#trend-ranges button").forEach(function (button) {
    button.addEventListener("click", function () {
      state.range = button.dataset.range;
      document.querySelectorAll("#trend-ranges button").forEach(function (other) {
        other.setAttribute("aria-pressed", other === button ? "true" : "false");
      });
      load();
    });
  });
  load();
  setInterval(load, 60000);
})();
