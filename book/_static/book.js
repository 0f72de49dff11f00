/* The book's own script (added by _config.yml: html_js_files).

   The menu buttons. pydata-sphinx-theme binds its sidebar handlers to the FIRST element with class
   primary-toggle (and secondary-toggle) in the page: the buttons of its own navbar, which
   sphinx-book-theme hides. The buttons a reader sees (in the article header) had no handler, so
   the menu and the page contents never opened, at any width. Every other toggle button now passes
   its click on to the bound one, whose handlers do the work: on a wide screen the chapter list
   collapses or comes back, on a narrow one it opens as a dialog. */
(function () {
  function forwardToggles() {
    ["primary-toggle", "secondary-toggle"].forEach(function (cls) {
      var buttons = document.querySelectorAll("." + cls);
      if (buttons.length < 2) {
        return;
      }
      var bound = buttons[0];
      Array.prototype.slice.call(buttons, 1).forEach(function (button) {
        button.addEventListener("click", function (event) {
          event.preventDefault();
          event.stopPropagation();
          bound.click();
        });
      });
    });
  }
  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", forwardToggles);
  } else {
    forwardToggles();
  }
})();
