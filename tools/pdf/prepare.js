// Run by tools/pdf/printer.py in the single-page HTML before printing (argument: options).
// Turns the page into a book: a title page, a contents list whose page numbers printer.py fills
// in, each chapter on a new page, one outline level per chapter; removes what paper cannot use.
// Returns the headings Chromium will put in the PDF's outline, in order, and the contents entries.
(opts) => {
  const article = document.querySelector("article.bd-article");
  if (!article) return null;  // not a page of the book: printed as it is
  // A heading's text as a bookmark shows it: maths as the text of MathJax's assistive MathML
  // (the typeset glyphs have none), without the "#" link.
  // Chromium's own bookmark titles leave the maths out: `key` is the text without it.
  const text = (el, maths = true) => {
    const copy = el.cloneNode(true);
    copy.querySelectorAll("a.headerlink").forEach((n) => n.remove());
    copy.querySelectorAll("mjx-container").forEach((m) => {
      const mml = m.querySelector("mjx-assistive-mml");
      m.replaceWith(document.createTextNode(mml && maths ? mml.textContent : ""));
    });
    return copy.textContent.replace(/\s+/g, " ").trim();
  };
  const key = (el) => text(el, false);

  // A chapter left out of a selection is a one-line page ("This chapter is not part of this
  // assignment."): it keeps the others' numbers on the site, but is no page of the PDF.
  for (const marker of document.querySelectorAll('span[id^="document-"]')) {
    const section = marker.nextElementSibling;
    if (!section || section.tagName !== "SECTION") continue;
    const paragraphs = section.querySelectorAll(":scope > p");
    const body = [...section.children].filter((c) => !/^H[1-6]$/.test(c.tagName));
    if (body.length === 1 && paragraphs.length === 1 &&
        /is not part of this assignment/.test(paragraphs[0].textContent)) {
      marker.remove();
      section.remove();
    }
  }

  // Output boxes left with nothing to show (a cell whose only printed line became a
  // "✓ checked" note) print as empty grey boxes.
  for (const pre of article.querySelectorAll("div.cell_output div.output pre")) {
    if (pre.textContent.trim() === "") {
      const box = pre.closest("div.output");
      if (box) box.remove();
    }
  }

  // An explorer's live cell (`explorer.show()`: sliders and the frames drawn at build time,
  // which the single-page build leaves empty) prints nothing but its code; the static panel of
  // the next cell is its printed form.
  for (const cell of article.querySelectorAll("div.cell")) {
    const code = cell.querySelector("div.cell_input pre");
    const out = cell.querySelector("div.cell_output");
    const idle = !out || out.querySelector(".sbx-explorer") || out.children.length === 0;
    if (code && /^\s*\w+\.show\(\)\s*;?\s*$/.test(code.textContent) && idle) cell.remove();
  }

  // In the students' handout a check cell's output is the verdict on the reference solution
  // ("✓ Exercise ...: correct"), which the student has not written yet.
  if (opts.handout) {
    for (const cell of article.querySelectorAll("div.cell")) {
      const code = cell.querySelector("div.cell_input pre");
      const out = cell.querySelector("div.cell_output");
      if (code && out && /^\s*check\(/.test(code.textContent)) out.remove();
    }
  }

  // Every document starts a page, and its title is the top level of the outline. Sphinx's
  // single-page builder nests the chapters inside the front page (intro: <h1>, its sections and
  // the chapters <h2>, the chapters' sections <h3>): each heading becomes h1 + its depth in its
  // own document, so that Chromium's outline (one bookmark per heading, nested by level) has the
  // documents at its top and their sections under them.
  const chapters = [];
  const top = article.querySelector(":scope > section");
  if (top) chapters.push(top);
  for (const marker of article.querySelectorAll('span[id^="document-"]')) {
    const section = marker.nextElementSibling;
    if (section && section.tagName === "SECTION") {
      section.classList.add("pdf-chapter");
      chapters.push(section);
    }
  }
  const docOf = (el) => {
    let depth = 0;
    for (let s = el.closest("section"); s; s = s.parentElement.closest("section")) {
      if (chapters.includes(s)) return depth;
      depth += 1;
    }
    return null;
  };
  for (const h of [...article.querySelectorAll("h1, h2, h3, h4, h5, h6")]) {
    if (h.parentElement.tagName !== "SECTION") continue;
    const depth = docOf(h);
    if (depth === null) continue;
    const level = Math.min(6, 1 + depth);
    if (Number(h.tagName[1]) === level) continue;
    const copy = document.createElement("h" + level);
    for (const a of h.attributes) copy.setAttribute(a.name, a.value);
    while (h.firstChild) copy.appendChild(h.firstChild);
    h.replaceWith(copy);
  }

  // Title page and contents, in the theme's print-only header.
  const host = document.getElementById("jb-print-docs-body") || (() => {
    const div = document.createElement("div");
    article.parentNode.insertBefore(div, article);
    return div;
  })();
  host.innerHTML = "";
  const titlePage = document.createElement("div");
  titlePage.id = "pdf-title-page";
  const add = (parent, tag, cls, content) => {
    const el = document.createElement(tag);
    if (cls) el.className = cls;
    if (content !== undefined) el.textContent = content;
    parent.appendChild(el);
    return el;
  };
  add(titlePage, "div", "pdf-title", opts.title);
  if (opts.subtitle) add(titlePage, "div", "pdf-subtitle", opts.subtitle);
  if (opts.author) add(titlePage, "div", "pdf-author", opts.author);
  host.appendChild(titlePage);
  const contents = add(host, "nav", "");
  contents.id = "pdf-contents";
  contents.setAttribute("aria-label", "Contents");
  const heading = add(contents, "h1", "", "Contents");
  heading.id = "pdf-contents-heading";
  const list = add(contents, "ol", "");
  const entries = [];
  const entry = (section, cls) => {
    const h = section.querySelector(":scope > h1, :scope > h2, :scope > h3, :scope > h4");
    if (!h || !section.id) return;
    const li = add(list, "li", cls);
    const a = add(li, "a", "");
    a.href = "#" + section.id;
    const title = add(a, "span", "pdf-toc-title");
    // the heading's own nodes (typeset maths included), less its "#" link
    for (const node of h.childNodes) {
      if (node.nodeType === 1 && node.matches("a.headerlink")) continue;
      title.appendChild(node.cloneNode(true));
    }
    add(a, "span", "pdf-toc-leader");
    const page = add(a, "span", "pdf-toc-page", "000");
    entries.push({ id: section.id, heading: h, page, title: text(h), key: key(h) });
  };
  for (const chapter of chapters) {
    entry(chapter, "pdf-toc-chapter");
    // the exercise index's sections are the chapters' titles again
    const marker = chapter.previousElementSibling;
    if (marker && marker.id === "document-book/exercise_index") continue;
    for (const sub of chapter.querySelectorAll(":scope > section")) {
      entry(sub, "pdf-toc-section");
    }
  }

  window.__pdfEntries = entries;
  // every heading, in order: the clean titles of Chromium's bookmarks
  const headings = [...document.querySelectorAll(
    "#pdf-contents h1, article.bd-article h1, article.bd-article h2, article.bd-article h3, " +
    "article.bd-article h4, article.bd-article h5, article.bd-article h6")].map(
    (h) => ({ title: text(h), key: key(h) }));
  return { entries: entries.map((e) => ({ id: e.id, title: e.title, key: e.key })), headings };
}
