// berth inspector: opening at the latest turn, and live mode. A timeline in chat order
// (oldest to newest) opens scrolled to its latest turn unless the address names a place
// (links to it carry #latest, so this works without script too). Live mode follows the
// session's live feed (Server-Sent Events from this server) and adds each new event,
// rendered and escaped by the server, at the end of the timeline in chat order (at the
// top in newest-first order). Parsed with DOMParser (which runs no script), never eval'd.
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

  function stop(text) {
    if (source) {
      source.close();
      source = null;
    }
    toggle.setAttribute("aria-pressed", "false");
    toggle.textContent = "Follow live";
    say(text);
  }

  function start() {
    var session = encodeURIComponent(toggle.dataset.session);
    var from = toggle.dataset.nextSeq;
    source = new EventSource("/ui/sessions/" + session + "/live?from=" + encodeURIComponent(from));
    toggle.setAttribute("aria-pressed", "true");
    toggle.textContent = "Stop following";
    say("Following live from event " + from + ".");
    source.addEventListener("fragment", function (message) {
      var parsed = new DOMParser().parseFromString(message.data, "text/html");
      var item = parsed.body.firstElementChild;
      if (item) {
        item.classList.add("live-new");
        if (list.dataset.order === "chat") {
          list.appendChild(document.importNode(item, true));
        } else {
          list.insertBefore(document.importNode(item, true), list.firstChild);
        }
      }
      toggle.dataset.nextSeq = String(Number(message.lastEventId) + 1);
      say("Following live: event " + message.lastEventId + " arrived.");
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
