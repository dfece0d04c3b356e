// WorkRail Console: live updates of a session page. The page's <main> carries the version it
// was rendered at; every 2 s the version is read again and the page reloads when it changed.
(function () {
  "use strict";
  var main = document.querySelector("main[data-version-url]");
  if (!main) {
    return;
  }
  var url = main.getAttribute("data-version-url");
  var seen = main.getAttribute("data-version");
  function poll() {
    fetch(url, { credentials: "same-origin", cache: "no-store" })
      .then(function (response) {
        return response.ok ? response.text() : null;
      })
      .then(function (version) {
        if (version !== null && version !== seen) {
          window.location.reload();
          return;
        }
        window.setTimeout(poll, 2000);
      })
      .catch(function () {
        window.setTimeout(poll, 2000);
      });
  }
  window.setTimeout(poll, 2000);
})();
