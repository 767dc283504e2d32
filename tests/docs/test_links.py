"""The documentation holds together: every relative link in the repository's Markdown files
(README.md, SECURITY.md, docs/, bench/, clients/, examples/ ...) names a file or folder that
exists in the repository (never outside it, as ../shared/ did), every #anchor names a heading of
its page, and the README stays short (under 300 lines: details live in docs/).

Usage: test_links.py REPOSITORY_ROOT
"""
import os
import re
import sys

SKIP_DIRS = {".git", "node_modules", "build", "third_party"}
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")


def slug(heading):
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to dashes."""
    s = heading.strip().lower()
    s = re.sub(r"[^\w\- ]", "", s)
    return s.replace(" ", "-")


def anchors(path):
    out, fence = set(), False
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.startswith("```"):
                fence = not fence
            elif not fence and line.startswith("#"):
                out.add(slug(line.lstrip("#")))
    return out


def links(path):
    fence = False
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if line.startswith("```"):
                fence = not fence
                continue
            if fence:
                continue
            line = re.sub(r"`[^`]*`", "", line)  # code spans are not links
            for m in LINK.finditer(line):
                yield n, m.group(1)


def main(root):
    root = os.path.realpath(root)
    problems, pages = [], 0
    for d, dirs, files in os.walk(root):
        dirs[:] = [x for x in dirs if x not in SKIP_DIRS and not x.startswith("build")]
        for name in files:
            if not name.endswith(".md"):
                continue
            page = os.path.join(d, name)
            pages += 1
            rel = os.path.relpath(page, root)
            for n, target in links(page):
                if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # https:, mailto:
                    continue
                path, _, anchor = target.partition("#")
                dest = os.path.realpath(os.path.join(d, path)) if path else page
                if not (dest == root or dest.startswith(root + os.sep)):
                    problems.append(f"{rel}:{n}: '{target}' points outside the repository")
                elif not os.path.exists(dest):
                    problems.append(f"{rel}:{n}: '{target}' does not exist")
                elif anchor and dest.endswith(".md") and anchor not in anchors(dest):
                    problems.append(f"{rel}:{n}: '{target}': no heading '#{anchor}' in "
                                    f"{os.path.relpath(dest, root)}")
    with open(os.path.join(root, "README.md"), encoding="utf-8") as f:
        lines = sum(1 for _ in f)
    if lines >= 300:
        problems.append(f"README.md has {lines} lines; keep it under 300 (move details to docs/)")
    for p in problems:
        print(p)
    print(f"{pages} Markdown files checked, {len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "."))
