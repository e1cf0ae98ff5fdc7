// berth inspector: opening at the latest turn, and live mode. A timeline in chat order
// (oldest to newest) opens scrolled to its latest turn unless the address names a place
// (links to it carry #latest, so this works without script too). Live mode follows the
// session's live feed (Server-Sent Events from this server) and only places what the
// server rendered and escaped: a `group` event is one whole turn (or group of events
// outside a turn) naming itself by `data-group`; it replaces the section of that name,
// or goes after the turns in chat order (on top newest first). A `header` event replaces
// the header's `#session-state`. Parsed with DOMParser (which runs no script), never
// eval'd, never assigned as HTML.
"use strict";

document.addEventListener("DOMContentLoaded", function () {
  var timeline = document.querySelector("section.timeline[data-order='chat']");
  var latest = document.getElementById("latest");
  if (timeline && latest && !window.location.hash) {
    latest.scrollIntoView({ block: "start" });
  }
  var toggle = document.getElementById("live-toggle");
  if (!toggle) {
    return;
  }
  var list = document.getElementById("live-events");
  var status = document.getElementById("live-status");
  var source = null;

  function say(text) {
    status.textContent = text;
  }

  function parsed(data) {
    return new DOMParser().parseFromString(data, "text/html").body.firstElementChild;
  }

  function stop(text) {
    if (source) {
      source.close();
      source = null;
    }
    toggle.setAttribute("aria-pressed", "false");
    toggle.textContent = "Follow live";
    say(text);
  }

  // Each <details> of a group by its owner (the nearest element with an id), class and
  // rank: a fold or menu opened before a group is drawn again stays open.
  function folds(root) {
    var ranks = {};
    var found = [];
    root.querySelectorAll("details").forEach(function (fold) {
      var owner = fold.parentElement.closest("[id]");
      var key = (owner ? owner.id : "") + " " + fold.className;
      ranks[key] = (ranks[key] || 0) + 1;
      found.push({ key: key + " " + ranks[key], fold: fold });
    });
    return found;
  }

  // Replaces the group of the same name (keeping its place, anchor and open folds) or
  // adds it; what was not there before is marked new.
  function place(data) {
    var group = parsed(data);
    if (!group || !/^\d+$/.test(group.dataset.group || "")) {
      return;
    }
    var fresh = document.importNode(group, true);
    var old = document.querySelector("section.turn[data-group='" + group.dataset.group + "']");
    var known = {};
    if (old) {
      old.querySelectorAll("li[id]").forEach(function (item) {
        known[item.id] = true;
      });
      if (old.id) {
        fresh.id = old.id;
      }
      var opened = {};
      folds(old).forEach(function (entry) {
        opened[entry.key] = entry.fold.open;
      });
      old.replaceWith(fresh);
      folds(fresh).forEach(function (entry) {
        if (opened[entry.key]) {
          entry.fold.open = true;
        }
      });
    } else if (list.dataset.order === "chat") {
      list.appendChild(fresh);
    } else {
      list.insertBefore(fresh, list.firstChild);
    }
    fresh.querySelectorAll("li[id]").forEach(function (item) {
      if (!known[item.id]) {
        item.classList.add("live-new");
      }
    });
    var empty = document.querySelector("section.timeline > p.empty");
    if (empty) {
      empty.remove();
    }
    // A group still open is where the next feed (after a stop) continues.
    if (fresh.hasAttribute("data-open")) {
      toggle.dataset.group = fresh.dataset.group;
    } else {
      delete toggle.dataset.group;
    }
  }

  function start() {
    var session = encodeURIComponent(toggle.dataset.session);
    var from = toggle.dataset.nextSeq;
    var query = "?from=" + encodeURIComponent(from);
    if (toggle.dataset.group) {
      query += "&group=" + encodeURIComponent(toggle.dataset.group);
    }
    source = new EventSource("/ui/sessions/" + session + "/live" + query);
    toggle.setAttribute("aria-pressed", "true");
    toggle.textContent = "Stop following";
    say("Following live from event " + from + ".");
    source.addEventListener("group", function (message) {
      place(message.data);
      var next = Number(message.lastEventId) + 1;
      if (next > Number(toggle.dataset.nextSeq)) {
        toggle.dataset.nextSeq = String(next);
        say("Following live: event " + message.lastEventId + " arrived.");
      }
    });
    source.addEventListener("header", function (message) {
      var state = parsed(message.data);
      var shown = document.getElementById("session-state");
      if (state && state.id === "session-state" && shown) {
        shown.replaceWith(document.importNode(state, true));
      }
    });
    source.addEventListener("signed-out", function () {
      stop("Signed out: live mode stopped.");
    });
    source.addEventListener("failed", function (message) {
      stop("Live mode stopped: " + message.data);
    });
    source.onerror = function () {
      say("Connection lost; reconnecting…");
    };
  }

  toggle.addEventListener("click", function () {
    if (source) {
      stop("Stopped.");
    } else {
      start();
    }
  });
});
