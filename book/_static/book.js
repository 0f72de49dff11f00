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

/* Display equations a little wider than their column are set a little smaller, down to
   MIN_SCALE of their size, so that they fit (at 1280 px some were cut off by 7 to 140 px). Wider
   ones keep their size and scroll inside their own box; book.css draws a shadow at the edge where
   more of the equation lies, and such a box joins the tab order so that a keyboard can scroll it. */
(function () {
  var MIN_SCALE = 0.8;
  var SELECTOR = 'div.math mjx-container[display="true"]';

  function fit() {
    document.querySelectorAll(SELECTOR).forEach(function (box) {
      if (box.dataset.bookFontSize === undefined) {
        box.dataset.bookFontSize = box.style.fontSize || "";
      }
      box.style.fontSize = box.dataset.bookFontSize;
      var room = box.clientWidth, width = box.scrollWidth;
      var scrolls = false;
      if (room > 0 && width > room + 1) {
        var scale = room / width;
        if (scale >= MIN_SCALE) {
          var base = parseFloat(box.dataset.bookFontSize) || 100;
          box.style.fontSize = (Math.floor(base * scale * 0.995 * 10) / 10) + "%";
          scrolls = box.scrollWidth > box.clientWidth + 1;
        } else {
          scrolls = true;
        }
      }
      if (scrolls) {
        box.setAttribute("tabindex", "0");
        box.classList.add("book-scrolls");
      } else if (box.classList.contains("book-scrolls")) {
        box.removeAttribute("tabindex");
        box.classList.remove("book-scrolls");
      }
    });
  }

  var timer = null;
  function fitLater() {
    clearTimeout(timer);
    timer = setTimeout(fit, 150);
  }

  function start() {
    var mj = window.MathJax;
    if (!mj || !mj.startup || !mj.startup.promise) {
      return;
    }
    var ready = [mj.startup.promise];
    if (document.fonts && document.fonts.ready) {
      ready.push(document.fonts.ready);
    }
    Promise.all(ready).then(fit);
    window.addEventListener("resize", fitLater);
  }
  if (document.readyState === "complete") {
    start();
  } else {
    window.addEventListener("load", start);
  }
})();


/* Exercise titles are headings for assistive technology ("Exercise 1.1" was a paragraph, so a
   screen reader's list of headings skipped every exercise): one level below the section that
   holds the exercise. */
(function () {
  function headings() {
    document.querySelectorAll("div.exercise.admonition > .admonition-title").forEach(function (t) {
      var section = t.closest("section");
      var level = 2;
      while (section) {
        var h = section.querySelector(":scope > h1, :scope > h2, :scope > h3, :scope > h4, :scope > h5");
        if (h) {
          level = parseInt(h.tagName.slice(1), 10) + 1;
          break;
        }
        section = section.parentElement ? section.parentElement.closest("section") : null;
      }
      t.setAttribute("role", "heading");
      t.setAttribute("aria-level", String(Math.min(level, 6)));
    });
  }
  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", headings);
  } else {
    headings();
  }
})();

/* Figures on a phone keep 3/4 of their own width (book.css): the width myst-nb writes on each
   figure (its size at 100 dpi, half the 2x PNG) is handed to the style sheet. */
(function () {
  function mark() {
    document.querySelectorAll("main .cell_output img").forEach(function (img) {
      var w = parseFloat(img.style.width) || (img.naturalWidth ? img.naturalWidth / 2 : 0);
      if (w > 0) {
        img.style.setProperty("--book-fig-width", w + "px");
      }
    });
  }
  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", mark);
  } else {
    mark();
  }
  window.addEventListener("load", mark);
})();
