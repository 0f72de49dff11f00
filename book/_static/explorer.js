/* Kernel-free explorers (added to every page by book/_ext/explorer_frames.py).

   Each explorer's HTML (softmaxbook.widgets.Explorer.frames_html) has one range input or select
   per control, an <output> with the current value, the default frame as an <img>, and a JSON
   block: the controls' value texts and, for every state drawn at build time, its image file and
   alt text. Moving a control shows the frame of the new state; the other frames are fetched only
   then (the control's neighbouring states are fetched just after, so the next step is instant).
   In a "sweep" explorer only one control differs from its default at a time: moving one sets
   the others back to their defaults. No library, no network beyond the book's own files. */
(function () {
  "use strict";

  function setUp(root) {
    var block = root.querySelector("script.sbx-data");
    var img = root.querySelector("img.sbx-frame");
    if (!block || !img) {
      return;
    }
    var data = JSON.parse(block.textContent);
    var fields = data.controls.map(function (spec) {
      return root.querySelector('[data-name="' + spec.name + '"]');
    });
    var outputs = fields.map(function (field) {
      return root.querySelector('output[for="' + field.id + '"]');
    });
    var fetched = {};

    function indices() {
      return fields.map(function (field) { return parseInt(field.value, 10); });
    }

    function frame(idx) {
      return data.frames[idx.join(",")];
    }

    function fetchFrame(idx) {
      var f = frame(idx);
      if (f && !fetched[f[0]]) {
        fetched[f[0]] = true;
        new Image().src = f[0];
      }
    }

    function prefetchAround(idx) {
      idx.forEach(function (v, j) {
        [-1, 1].forEach(function (d) {
          var next = idx.slice();
          next[j] = v + d;
          if (next[j] >= 0 && next[j] < data.controls[j].text.length) {
            fetchFrame(next);
          }
        });
      });
    }

    function show(changed) {
      if (data.mode === "sweep") {
        fields.forEach(function (field, j) {
          if (j !== changed && parseInt(field.value, 10) !== data.controls[j].default) {
            field.value = String(data.controls[j].default);
          }
        });
      }
      var idx = indices();
      idx.forEach(function (v, j) {
        var text = data.controls[j].text[v];
        if (outputs[j]) {
          outputs[j].textContent = text;
        }
        if (fields[j].type === "range") {
          fields[j].setAttribute("aria-valuetext", text);
        }
      });
      var f = frame(idx);
      if (f) {
        fetched[f[0]] = true;
        img.src = f[0];
        img.alt = f[1];
      }
      prefetchAround(idx);
    }

    // on a phone the frame scrolls sideways in its box (explorer.css): a keyboard can scroll
    // it when it is in the tab order, which it joins only while it scrolls
    var view = root.querySelector(".sbx-view");
    function scrollable() {
      if (!view) {
        return;
      }
      if (view.scrollWidth > view.clientWidth + 1) {
        view.setAttribute("tabindex", "0");
        view.setAttribute("role", "group");
        view.setAttribute("aria-label", "figure, scrolls sideways");
      } else {
        view.removeAttribute("tabindex");
        view.removeAttribute("role");
        view.removeAttribute("aria-label");
      }
    }
    img.addEventListener("load", scrollable);
    window.addEventListener("resize", scrollable);
    scrollable();

    fields.forEach(function (field, j) {
      field.disabled = false;
      field.addEventListener("input", function () { show(j); });
      field.addEventListener("change", function () { show(j); });
    });
    root.classList.add("sbx-ready");
  }

  function start() {
    document.querySelectorAll(".sbx-explorer").forEach(function (root) {
      try {
        setUp(root);
      } catch (err) {
        // an explorer that cannot start keeps its default frame; the page keeps working
        root.classList.add("sbx-broken");
        console.error("explorer " + root.id + ": " + err);
      }
    });
  }

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", start);
  } else {
    start();
  }
})();
