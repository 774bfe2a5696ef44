"""fetch's HTML to text (issue 39 item 8): table cells stay apart (`<td>Ann</td><td>31</td>`
was `Ann31`) and `<pre>` keeps its lines and indentation (code samples were flattened)."""

from __future__ import annotations

from boxmaker.brokerd.tools.htmltext import html_to_text


def test_table_cells_are_separated_and_each_row_is_a_line() -> None:
    page = (
        "<table><tr><th>Name</th><th>Age</th></tr>"
        "<tr><td>Ann</td><td>31</td></tr><tr><td> Bob </td><td>4<b>2</b></td></tr></table>"
    )
    lines = [line for line in html_to_text(page).splitlines() if line]
    assert lines == ["Name | Age", "Ann | 31", "Bob | 42"]


def test_pre_keeps_its_lines_and_indentation() -> None:
    page = (
        "<p>Code:</p><pre>\ndef f():\n    if x:\n\treturn  1\n\n\nend</pre><p>after   the  code</p>"
    )
    assert html_to_text(page) == (
        "Code:\n\ndef f():\n    if x:\n\treturn  1\n\n\nend\n\nafter the code"
    )


def test_white_space_outside_pre_still_collapses_and_private_marks_are_dropped() -> None:
    assert html_to_text("<p>a \n\t b</p>") == "a b"
    assert html_to_text("<p>a\ue000b\ue002c</p><pre>x\ue001y</pre>") == "abc\n\nxy"
