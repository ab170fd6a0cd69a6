from __future__ import annotations

from onboard.base.tomlfile import KeyLines, format_key, split_dotted

SOURCE = '''# comment
name = "x"

[skill]
start = "a"
params = { E = "here", F = 2 }

[actions."wait for cue"]
text = """multi
[not.a.table]
line"""
stimuli = { type = "1-gaze" }

[[label]]
from = 0.0

[[label]]
from = 1.0
to = 2.0
'''


def test_lines_of_tables_keys_inline_and_arrays() -> None:
    lines = KeyLines(SOURCE)
    assert lines.line_of(("name",)) == 2
    assert lines.line_of(("skill", "start")) == 5
    assert lines.line_of(("skill", "params", "F")) == 6
    assert lines.line_of(("actions", "wait for cue", "stimuli", "type")) == 12
    assert lines.line_of(("actions", "wait for cue", "text")) == 9
    assert lines.line_of(("label", 1, "to")) == 19
    assert lines.line_of(("label", 0, "from")) == 15
    # a key the file lacks is reported at its deepest existing parent
    assert lines.line_of(("label", 1, "state")) == 17
    assert lines.line_of(("not", "a", "table")) is None


def test_key_formatting_and_splitting() -> None:
    assert format_key(("actions", "wait for cue", "stimuli")) == 'actions."wait for cue".stimuli'
    assert format_key(("label", 2, "to")) == "label[2].to"
    assert split_dotted('actions."wait for cue".text') == ("actions", "wait for cue", "text")
