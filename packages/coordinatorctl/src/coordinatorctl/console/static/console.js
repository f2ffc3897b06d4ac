/* The console's one script: progressive enhancement only; every page works without it.
 *
 * - An element with `data-until="<RFC 3339 instant>"` shows a live countdown to that instant
 *   ("in 4 min 10 s", "12 s ago"), updated every second.
 * - A page whose <main> has `data-live="N"` (the "Refresh every N s" link) refreshes its main
 *   part in place every N seconds from the same address, without reloading the page; it waits
 *   while a form on the page is being filled in, and while the tab is hidden.
 * - A run page that also has `data-follow="/runs/<id>/changes"` refreshes instead when the run
 *   changes: it asks that address again and again, naming the tag it last saw, and the console
 *   answers when the service's waiting read does (the run's status, step, cancel request,
 *   unknown effect or failure code changed, or 20 s passed). Without a tag to follow (204), or
 *   when the answer came back unchanged at once (a service past its bound of waiting reads),
 *   it falls back to the N-second refresh, or pauses N seconds.
 * Nothing is sent but a GET of the page's own address (or its follow address); the page is
 * the console's own, server-rendered and escaped.
 */
"use strict";
(function () {
  function span(milliseconds) {
    var seconds = Math.round(Math.abs(milliseconds) / 1000);
    var days = Math.floor(seconds / 86400);
    var hours = Math.floor((seconds % 86400) / 3600);
    var minutes = Math.floor((seconds % 3600) / 60);
    var parts = [];
    if (days) parts.push(days + " d");
    if (hours) parts.push(hours + " h");
    if (minutes && !days) parts.push(minutes + " min");
    if (!days && !hours) parts.push((seconds % 60) + " s");
    return parts.join(" ");
  }

  function countdowns() {
    var now = Date.now();
    document.querySelectorAll("[data-until]").forEach(function (node) {
      var at = Date.parse(node.getAttribute("data-until"));
      if (isNaN(at)) return;
      var left = at - now;
      node.textContent = left >= 0 ? "(in " + span(left) + ")" : "(" + span(left) + " ago)";
    });
  }

  function busy(main) {
    var active = document.activeElement;
    if (active && main.contains(active) && /^(INPUT|TEXTAREA|SELECT)$/.test(active.tagName)) {
      return true;
    }
    return Array.prototype.some.call(main.querySelectorAll("input, textarea"), function (field) {
      if (field.type === "checkbox" || field.type === "radio") {
        return field.checked !== field.defaultChecked;
      }
      return field.type !== "hidden" && field.value !== field.defaultValue;
    });
  }

  function refresh(main) {
    if (document.hidden || busy(main)) return;
    fetch(window.location.href, { credentials: "same-origin", cache: "no-store" })
      .then(function (answer) { return answer.ok ? answer.text() : null; })
      .then(function (text) {
        if (!text || busy(main)) return;
        var fresh = new DOMParser().parseFromString(text, "text/html").querySelector("main");
        if (!fresh) return;
        main.innerHTML = fresh.innerHTML;
        main.setAttribute("data-refreshed", String(Date.now()));
        countdowns();
      })
      .catch(function () { /* the next round tries again */ });
  }

  function every(main, seconds) {
    window.setInterval(function () { refresh(main); }, seconds * 1000);
  }

  function follow(main, path, seconds) {
    var seen = null;
    function round() {
      if (document.hidden) { window.setTimeout(round, 1000); return; }
      var began = Date.now();
      var address = seen === null ? path : path + "?seen=" + encodeURIComponent(seen);
      fetch(address, { credentials: "same-origin", cache: "no-store" })
        .then(function (answer) { return answer.status === 200 ? answer.json() : null; })
        .then(function (body) {
          if (!body || typeof body.tag !== "string") { every(main, seconds); return; }
          var changed = seen !== null && body.tag !== seen;
          var early = seen !== null && !changed && Date.now() - began < 2000;
          if (changed) refresh(main);
          seen = body.tag;
          window.setTimeout(round, early ? seconds * 1000 : 0);
        })
        .catch(function () { window.setTimeout(round, seconds * 1000); });
    }
    round();
  }

  document.addEventListener("DOMContentLoaded", function () {
    countdowns();
    window.setInterval(countdowns, 1000);
    var main = document.querySelector("main[data-live]");
    if (!main) return;
    var seconds = parseInt(main.getAttribute("data-live"), 10);
    if (!(seconds >= 2)) return;
    var path = main.getAttribute("data-follow");
    if (path && /^\/runs\/[0-9a-f-]{36}\/changes$/.test(path)) {
      follow(main, path, seconds);
    } else {
      every(main, seconds);
    }
  });
})();
