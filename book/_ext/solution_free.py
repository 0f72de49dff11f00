"""Remove every solution from the site when ``book_hide_solutions`` is true (the instructors' build).

sphinx-exercise has its own ``hide_solutions`` option, but with the gated form
(``solution-start`` ... ``solution-end``, which the book uses so that solution code cells sit in the
dropdown) it drops only the start marker: the code cells stay on the page and the orphaned end
marker fails the strict build ("unknown node type: solution_end_node"). This transform runs after
sphinx-exercise has merged each gated block into one solution node (its priority 10), and removes
the whole node, code cells included.
"""

from __future__ import annotations

from sphinx.transforms import SphinxTransform


class RemoveSolutions(SphinxTransform):
    default_priority = 11  # after sphinx_exercise.transforms.MergeGatedSolutions (10)

    def apply(self):
        if not self.config.book_hide_solutions:
            return
        from sphinx_exercise.nodes import solution_node

        for node in list(self.document.findall(solution_node)):
            node.parent.remove(node)


def setup(app):
    app.add_config_value("book_hide_solutions", False, "env")
    app.add_transform(RemoveSolutions)
    return {"parallel_read_safe": True, "parallel_write_safe": True, "version": "1.0"}
