"""Print the project's performance targets as a Markdown table: ``python -m mptutor.bench``."""

from mptutor.bench import targets_markdown

print(targets_markdown())
