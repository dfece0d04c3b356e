// WorkRail Console: the run graphs' orientation, pan, zoom and fit; live updates of every page.
// Served from the Console itself (no CDN); the pages work without it, only less well.
(function () {
  "use strict";

  // ---- Graphs --------------------------------------------------------------------------------
  // Each drawing carries both orientations (decision D181): across when the run is readable
  // at the container's width, else whichever shows it larger (top to bottom on a phone).

  function size(svg, o) {
    var parts = (svg.getAttribute("data-size-" + o) || "0 0").split(" ");
    return [parseFloat(parts[0]) || 1, parseFloat(parts[1]) || 1];
  }

  function orient(svg, o) {
    var s = size(svg, o);
    svg.setAttribute("width", s[0]);
    svg.setAttribute("height", s[1]);
    svg.setAttribute("viewBox", "0 0 " + s[0] + " " + s[1]);
    svg.setAttribute("data-orientation", o);
    svg.querySelectorAll("g.node").forEach(function (g) {
      var xy = (g.getAttribute("data-xy-" + o) || "0 0").split(" ");
      g.setAttribute("transform", "translate(" + xy[0] + "," + xy[1] + ")");
    });
    svg.querySelectorAll("path.edge").forEach(function (p) {
      p.setAttribute("d", p.getAttribute("data-d-" + o));
    });
    svg.querySelectorAll("text.edge-label").forEach(function (t) {
      var xy = (t.getAttribute("data-xy-" + o) || "0 0").split(" ");
      t.setAttribute("x", xy[0]);
      t.setAttribute("y", xy[1]);
    });
  }

  function best(svg, width) {
    var a = size(svg, "across"), d = size(svg, "down");
    var sa = Math.min(1, width / a[0]), sd = Math.min(1, width / d[0]);
    if (sa >= 0.75 || sa >= sd) {
      return "across";
    }
    return "down";
  }

  function viewBox(svg) {
    return svg.getAttribute("viewBox").split(" ").map(parseFloat);
  }

  function fit(figure) {
    var svg = figure.querySelector("svg.dag");
    var box = figure.querySelector(".graph-box");
    if (!svg || !box) {
      return;
    }
    orient(svg, best(svg, box.clientWidth || 1));
    figure.removeAttribute("data-zoomed");
  }

  function zoom(figure, factor, cx, cy) {
    var svg = figure.querySelector("svg.dag");
    var vb = viewBox(svg);
    var full = size(svg, svg.getAttribute("data-orientation"));
    var w = Math.min(full[0], Math.max(60, vb[2] / factor));
    var h = w * (vb[3] / vb[2]);
    var fx = cx === undefined ? 0.5 : cx, fy = cy === undefined ? 0.5 : cy;
    var x = vb[0] + (vb[2] - w) * fx, y = vb[1] + (vb[3] - h) * fy;
    svg.setAttribute("viewBox", [x, y, w, h].join(" "));
    figure.setAttribute("data-zoomed", "true");
  }

  // Each drawing's markup as the server sent it, before the script turned it: live updates
  // compare against it and replace a drawing only when the server's changed.
  var graphSource = new WeakMap();

  function initGraph(figure) {
    if (figure.getAttribute("data-ready") === "true") {
      return;
    }
    graphSource.set(figure, figure.outerHTML);
    figure.setAttribute("data-ready", "true");
    var tools = figure.querySelector(".graph-tools");
    var svg = figure.querySelector("svg.dag");
    if (!svg) {
      return;
    }
    if (tools) {
      tools.hidden = false;
      tools.querySelector(".zoom-in").addEventListener("click", function () { zoom(figure, 1.25); });
      tools.querySelector(".zoom-out").addEventListener("click", function () { zoom(figure, 0.8); });
      tools.querySelector(".fit").addEventListener("click", function () { fit(figure); });
    }
    svg.addEventListener("wheel", function (e) {
      if (!e.ctrlKey && !e.metaKey) {
        return;
      }
      e.preventDefault();
      var r = svg.getBoundingClientRect();
      zoom(figure, e.deltaY < 0 ? 1.15 : 0.87, (e.clientX - r.left) / r.width, (e.clientY - r.top) / r.height);
    }, { passive: false });
    var drag = null, moved = false;
    svg.addEventListener("pointerdown", function (e) {
      if (e.button !== 0) {
        return;
      }
      drag = { x: e.clientX, y: e.clientY, vb: viewBox(svg) };
      moved = false;
    });
    window.addEventListener("pointermove", function (e) {
      if (!drag) {
        return;
      }
      var dx = e.clientX - drag.x, dy = e.clientY - drag.y;
      if (!moved && Math.abs(dx) + Math.abs(dy) < 4) {
        return;
      }
      moved = true;
      var r = svg.getBoundingClientRect();
      var k = drag.vb[2] / (r.width || 1);
      svg.setAttribute("viewBox", [drag.vb[0] - dx * k, drag.vb[1] - dy * k, drag.vb[2], drag.vb[3]].join(" "));
      figure.setAttribute("data-zoomed", "true");
    });
    window.addEventListener("pointerup", function () { drag = null; });
    // A drag is not a click on the node it started on.
    svg.addEventListener("click", function (e) {
      if (moved) {
        e.preventDefault();
        moved = false;
      }
    }, true);
    fit(figure);
  }

  function initGraphs(root) {
    root.querySelectorAll("figure.graph").forEach(initGraph);
  }

  var lastWidth = window.innerWidth;
  window.addEventListener("resize", function () {
    if (window.innerWidth === lastWidth) {
      return;
    }
    lastWidth = window.innerWidth;
    document.querySelectorAll("figure.graph").forEach(function (f) {
      if (f.getAttribute("data-zoomed") !== "true") {
        fit(f);
      }
    });
  });

  // A timeline row's link lights its node up in the graph (opening a lane's drawing if the
  // node is inside one).
  function highlight(id) {
    document.querySelectorAll("g.node.focused").forEach(function (g) { g.classList.remove("focused"); });
    var g = id ? document.getElementById(id) : null;
    if (!g || !g.classList.contains("node")) {
      return;
    }
    for (var d = g.closest("details"); d; d = d.parentElement && d.parentElement.closest("details")) {
      d.open = true;
    }
    g.classList.add("focused");
    g.scrollIntoView({ block: "center" });
  }

  // The timeline's kind filter works in place; the form still works without script.
  function initTimeline(root) {
    var form = root.querySelector("form#timeline-filter");
    if (!form || form.getAttribute("data-ready") === "true") {
      return;
    }
    form.setAttribute("data-ready", "true");
    var select = form.querySelector("select[name=kind]");
    function apply() {
      var kind = select.value;
      document.querySelectorAll("table#events tr.event").forEach(function (tr) {
        tr.hidden = kind !== "" && tr.getAttribute("data-kind") !== kind;
      });
      var u = new URL(window.location.href);
      if (kind) {
        u.searchParams.set("kind", kind);
      } else {
        u.searchParams.delete("kind");
      }
      window.history.replaceState(null, "", u.pathname + u.search + u.hash);
    }
    select.addEventListener("change", apply);
    form.addEventListener("submit", function (e) {
      e.preventDefault();
      apply();
    });
  }
  window.addEventListener("hashchange", function () { highlight(location.hash.slice(1)); });

  window.WorkrailConsole = { initGraphs: initGraphs, fit: fit };

  function ready() {
    initGraphs(document);
    initTimeline(document);
    if (location.hash) {
      highlight(location.hash.slice(1));
    }
  }
  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", ready);
  } else {
    ready();
  }

  // ---- Live updates --------------------------------------------------------------------------
  // Every page follows the data directory without a reload (decision D183): a session page polls its log's version and fetches itself when it changed; every other
  // page fetches itself. Only what changed is patched, so the scroll position, open lanes,
  // a zoomed graph and anything being typed stay as they are.
  function busy(el) {
    var active = document.activeElement;
    if (active && active !== document.body && el.contains(active) && /^(INPUT|SELECT|TEXTAREA)$/.test(active.tagName)) {
      return true;
    }
    var fields = el.querySelectorAll ? el.querySelectorAll("input, textarea, select") : [];
    for (var i = 0; i < fields.length; i++) {
      var f = fields[i];
      if (f.tagName === "SELECT") {
        for (var j = 0; j < f.options.length; j++) {
          if (f.options[j].selected !== f.options[j].defaultSelected) {
            return true;
          }
        }
      } else if (f.type === "checkbox" || f.type === "radio") {
        if (f.checked !== f.defaultChecked) {
          return true;
        }
      } else if (f.value !== f.defaultValue) {
        return true;
      }
    }
    return false;
  }

  function replace(oldEl, newEl) {
    var fresh = document.importNode(newEl, true);
    oldEl.replaceWith(fresh);
    if (fresh.nodeType === 1) {
      initGraphs(fresh.parentNode || document);
    }
    return fresh;
  }

  // A graph the reader zoomed or panned keeps that view when a new node redraws it: the same
  // orientation and the same region, so the graph grows under the view instead of jumping
  // back to fit. `Fit` returns to the whole run.
  function viewOf(figure) {
    var svg = figure.querySelector("svg.dag");
    if (!svg || figure.getAttribute("data-zoomed") !== "true") {
      return null;
    }
    return { orientation: svg.getAttribute("data-orientation"), viewBox: svg.getAttribute("viewBox") };
  }

  function keepView(figure, view) {
    var svg = figure.querySelector("svg.dag");
    if (!svg || !view) {
      return;
    }
    if (view.orientation && svg.getAttribute("data-orientation") !== view.orientation) {
      orient(svg, view.orientation);
    }
    svg.setAttribute("viewBox", view.viewBox);
    figure.setAttribute("data-zoomed", "true");
  }

  // Patches `oldEl` to look like `newEl`, descending while the shapes agree.
  function patch(oldEl, newEl) {
    if (oldEl.nodeType !== newEl.nodeType || oldEl.nodeName !== newEl.nodeName) {
      replace(oldEl, newEl);
      return;
    }
    if (oldEl.nodeType === 3) {
      if (oldEl.data !== newEl.data) {
        oldEl.data = newEl.data;
      }
      return;
    }
    if (oldEl.nodeType !== 1) {
      return;
    }
    if (oldEl.matches("figure.graph")) {
      if (graphSource.get(oldEl) !== newEl.outerHTML) {
        var view = viewOf(oldEl);
        keepView(replace(oldEl, newEl), view);
      }
      return;
    }
    if (oldEl.matches("form") && busy(oldEl)) {
      return;
    }
    // Attributes, except the ones the reader sets (an opened lane, a filtered row).
    for (var i = 0; i < newEl.attributes.length; i++) {
      var a = newEl.attributes[i];
      if (oldEl.getAttribute(a.name) !== a.value && a.name !== "open") {
        oldEl.setAttribute(a.name, a.value);
      }
    }
    for (var k = oldEl.attributes.length - 1; k >= 0; k--) {
      var name = oldEl.attributes[k].name;
      if (!newEl.hasAttribute(name) && name !== "open" && name !== "data-ready") {
        oldEl.removeAttribute(name);
      }
    }
    var olds = Array.prototype.slice.call(oldEl.childNodes);
    var news = Array.prototype.slice.call(newEl.childNodes);
    var n = Math.min(olds.length, news.length);
    for (var c = 0; c < n; c++) {
      patch(olds[c], news[c]);
    }
    for (var r = olds.length - 1; r >= n; r--) {
      oldEl.removeChild(olds[r]);
    }
    for (var m = n; m < news.length; m++) {
      var added = document.importNode(news[m], true);
      oldEl.appendChild(added);
      if (added.nodeType === 1) {
        initGraphs(added.parentNode || added);
      }
    }
  }

  var main = document.querySelector("main");
  if (!main || main.hasAttribute("data-static")) {
    return;
  }
  var PERIOD = 2000;
  var seen = main.getAttribute("data-version");

  function refresh() {
    return fetch(window.location.href, { credentials: "same-origin", cache: "no-store" })
      .then(function (response) {
        return response.ok ? response.text() : null;
      })
      .then(function (text) {
        if (text === null) {
          return;
        }
        var doc = new DOMParser().parseFromString(text, "text/html");
        var fresh = doc.querySelector("main");
        if (!fresh) {
          return;
        }
        patch(main, fresh);
        seen = main.getAttribute("data-version");
        main.setAttribute("data-live-updates", String(Number(main.getAttribute("data-live-updates") || "0") + 1));
      });
  }

  function poll() {
    var next = function () { window.setTimeout(poll, PERIOD); };
    if (document.hidden) {
      next();
      return;
    }
    var url = main.getAttribute("data-version-url");
    var check = url
      ? fetch(url, { credentials: "same-origin", cache: "no-store" })
          .then(function (response) { return response.ok ? response.text() : null; })
          .then(function (version) { return version !== null && version !== seen ? refresh() : null; })
      : refresh();
    check.then(next, next);
  }
  window.setTimeout(poll, PERIOD);
})();
