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
   figure (its size at 100 dpi, half the 2x PNG) is handed to the style sheet. An output box that
   then overflows its column is marked (book-fig-scrolls): only under such a box does the line
   "swipe sideways" show. */
(function () {
  function mark() {
    document.querySelectorAll("main .cell_output img").forEach(function (img) {
      var w = parseFloat(img.style.width) || (img.naturalWidth ? img.naturalWidth / 2 : 0);
      if (w > 0) {
        img.style.setProperty("--book-fig-width", w + "px");
      }
    });
    document.querySelectorAll("main .cell_output").forEach(function (box) {
      if (!box.querySelector("img")) {
        return;
      }
      box.classList.toggle("book-fig-scrolls", box.scrollWidth > box.clientWidth + 1);
    });
  }
  var timer = null;
  function markLater() {
    clearTimeout(timer);
    timer = setTimeout(mark, 150);
  }
  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", mark);
  } else {
    mark();
  }
  window.addEventListener("load", mark);
  window.addEventListener("resize", markLater);
})();

/* Search (the search page only: Sphinx's searchtools.js, loaded after this file).
   1. Ranking. Sphinx gives a page the best score of any one query word, and a section title
      counts only when the query is at least half its length, so "gumbel" ranked chapter 6 (a
      section "The Gumbel-max trick: ...") above chapter 7 ("Gumbel tricks"), and "temperature
      scaling" chapter 1 above chapter 3. A page whose title holds every word of the query now
      comes first, then a page with a section titled with the whole query, then one whose
      sections' titles hold every word.
   2. Snippets. The summary under each result is the page's text, whose formulas are MathJax
      source ("\(p_y\)", "\begin{split}"): formulas are now shown as plain text (display
      formulas as "…").
   3. Opened from disk (file://). The snippets are fetched from the pages, which a browser refuses
      from file:// (CORS errors in the console); the results are listed without snippets, with a
      line saying how to get them (`python3 tools/book.py serve`). */
(function () {
  var GREEK = {alpha: "α", beta: "β", gamma: "γ", delta: "δ", epsilon: "ε", varepsilon: "ε",
    zeta: "ζ", eta: "η", theta: "θ", kappa: "κ", lambda: "λ", mu: "μ", nu: "ν", xi: "ξ",
    pi: "π", rho: "ρ", sigma: "σ", tau: "τ", phi: "φ", varphi: "φ", chi: "χ", psi: "ψ",
    omega: "ω", Gamma: "Γ", Delta: "Δ", Theta: "Θ", Lambda: "Λ", Pi: "Π", Sigma: "Σ",
    Phi: "Φ", Psi: "Ψ", Omega: "Ω", infty: "∞", le: "≤", leq: "≤", ge: "≥", geq: "≥",
    ne: "≠", approx: "≈", cdot: "·", times: "×", sum: "Σ", prod: "∏", to: "→", in: "∈"};

  function plainTex(tex) {
    return tex
      .replace(/\\(?:operatorname|mathrm|mathbf|mathbb|mathcal|text|textrm|boldsymbol)\s*\{([^{}]*)\}/g, "$1")
      .replace(/\\(?:left|right|big|Big|bigl|bigr|,|;|!|quad|qquad)/g, " ")
      .replace(/\\([A-Za-z]+)/g, function (m, name) { return GREEK[name] || name; })
      .replace(/[{}]/g, "")
      .replace(/\s+/g, " ")
      .trim();
  }

  function queryWords() {
    var q = new URLSearchParams(window.location.search).get("q") || "";
    return q.toLowerCase().split(/[^a-z0-9\u00c0-\u024f-]+/).filter(function (w) {
      return w.length > 1;
    });
  }

  function stripTags(html) {
    return String(html).replace(/<[^>]*>/g, "").toLowerCase();
  }

  function patch() {
    if (typeof Search === "undefined" || typeof Scorer === "undefined") {
      return;
    }
    // 1. ranking
    var words = queryWords(), phrase = words.join(" ");
    var sectionTitles = null;
    function titlesOf(docIndex) {
      if (sectionTitles === null) {
        sectionTitles = {};
        var all = (Search._index && Search._index.alltitles) || {};
        Object.keys(all).forEach(function (title) {
          all[title].forEach(function (entry) {
            (sectionTitles[entry[0]] = sectionTitles[entry[0]] || []).push(title.toLowerCase());
          });
        });
      }
      return sectionTitles[docIndex] || [];
    }
    function hasAll(text) {
      return words.every(function (w) { return text.indexOf(w) >= 0; });
    }
    var baseScore = Scorer.score;
    Scorer.score = function (result) {
      var score = baseScore ? baseScore(result) : result[4];
      if (!words.length || !Search._index) {
        return score;
      }
      var index = Search._index.docnames.indexOf(result[0]);
      if (index < 0) {
        return score;
      }
      var titles = titlesOf(index);
      if (hasAll(stripTags(Search._index.titles[index]))) {
        return score + 40;
      }
      if (titles.some(function (t) { return t.indexOf(phrase) >= 0; })) {
        return score + 25;
      }
      if (titles.some(hasAll)) {
        return score + 15;
      }
      return score;
    };
    // 2. snippets: formulas as plain text
    var toText = Search.htmlToText;
    Search.htmlToText = function (htmlString, anchor) {
      var doc = new DOMParser().parseFromString(htmlString, "text/html");
      doc.querySelectorAll("div.math").forEach(function (el) { el.replaceWith(" … "); });
      doc.querySelectorAll("span.math").forEach(function (el) {
        var tex = el.textContent.replace(/^\s*\\\(|\\\)\s*$/g, "");
        el.replaceWith(plainTex(tex));
      });
      return toText(doc.documentElement.outerHTML, anchor);
    };
    // 3. from disk: no snippets (they cannot be fetched), and say so
    // (documentation_options.js declares DOCUMENTATION_OPTIONS with const: not on window)
    if (window.location.protocol === "file:" && typeof DOCUMENTATION_OPTIONS !== "undefined") {
      DOCUMENTATION_OPTIONS.SHOW_SEARCH_SUMMARY = false;
      var main = document.querySelector("#search-results");  // the search page only
      if (main) {
        var note = document.createElement("p");
        note.className = "book-search-offline";
        note.textContent = "Opened from disk, the results have no text snippets (a browser " +
          "does not let a page read other files from disk). For snippets, serve the site: " +
          "python3 tools/book.py serve";
        main.parentNode.insertBefore(note, main);
      }
    }
  }
  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", patch);
  } else {
    patch();
  }
})();

/* Three things axe-core found in the theme's markup on every page, fixed here (the theme's
   templates are not ours to edit):
   - the header's search button is named "Search" but shows "Search Ctrl+K", and the colour-mode
     button is named "Color mode" but shows an icon titled "Light", "Dark" or "System Settings"
     (label-content-name-mismatch: a speech user says what they see). The search button is named
     by what it shows; the colour button's name says its current mode;
   - the chapter list's first item (the book's title) lay outside every landmark (region): the
     chapter list is now a navigation landmark. */
(function () {
  function fix() {
    document.querySelectorAll(".search-button-field[aria-label]").forEach(function (b) {
      b.removeAttribute("aria-label");
    });
    // the icon shown is the one whose data-mode is the page's (html[data-mode], set by the
    // theme's script, possibly after this runs: followed with an observer)
    function nameColour(button) {
      var mode = document.documentElement.dataset.mode || "auto";
      var shown = button.querySelector('svg[data-mode="' + mode + '"], i[data-mode="' + mode + '"]');
      var title = shown && (shown.querySelector("title") || shown);
      var text = title && (title.textContent || title.getAttribute("title"));
      button.setAttribute("aria-label", "Color mode: " + (text || mode));
    }
    var buttons = document.querySelectorAll(".theme-switch-button");
    buttons.forEach(nameColour);
    if (buttons.length && !fix.observing) {
      fix.observing = true;
      new MutationObserver(function () { buttons.forEach(nameColour); })
        .observe(document.documentElement, {attributes: true, attributeFilter: ["data-mode"]});
    }
    var sidebar = document.querySelector(".bd-sidebar-primary");
    if (sidebar && !sidebar.getAttribute("role")) {
      sidebar.setAttribute("role", "navigation");
      sidebar.setAttribute("aria-label", "The book's chapters");
    }
  }
  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", fix);
  } else {
    fix();
  }
  window.addEventListener("load", fix);
})();
