"""End-to-end: the default calibration corpus (data/calib/default.txt).

- It is what scripts/make_calib_corpus.py builds from the Debian packages
  fortunes, debian-reference-en and dict-jargon (byte for byte; skipped when
  they are not installed, a failure under CI=true: scripts/setup.sh installs them).
- It shares no text with the evaluation texts: no run of 12 consecutive
  words of data/eval/default.txt or data/long/licenses.txt occurs in it.
- It is large enough for the calibration sweep (>= 400 KB, ~100k tokens).
"""
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "ref"))
import harness  # noqa: E402

SRC = harness.SOURCE_DIR
CORPUS = os.path.join(SRC, "data", "calib", "default.txt")
EVAL_TEXTS = [os.path.join(SRC, "data", "eval", "default.txt"),
              os.path.join(SRC, "data", "long", "licenses.txt")]
PACKAGE_FILES = ["/usr/share/games/fortunes/cookie",
                 "/usr/share/debian-reference/debian-reference.en.txt.gz",
                 "/usr/share/dictd/jargon.dict.dz"]
WINDOW = 12


def words(text):
    return re.findall(r"[a-z0-9']+", text.lower())


def shared_windows(corpus_words, text_words, n=WINDOW):
    grams = {tuple(corpus_words[i:i + n]) for i in range(len(corpus_words) - n + 1)}
    return [" ".join(text_words[i:i + n]) for i in range(len(text_words) - n + 1)
            if tuple(text_words[i:i + n]) in grams]


def main():
    checks = harness.Checks("default calibration corpus")
    with open(CORPUS, encoding="utf-8") as f:
        corpus = f.read()
    checks.check(len(corpus.encode()) >= 400 * 1024, "corpus size",
                 f"{len(corpus.encode())} bytes")
    cw = words(corpus)
    for path in EVAL_TEXTS:
        with open(path, encoding="utf-8") as f:
            shared = shared_windows(cw, words(f.read()))
        checks.check(not shared, f"disjoint from {os.path.relpath(path, SRC)}",
                     f"{len(shared)} shared {WINDOW}-word runs" +
                     (f", e.g. '{shared[0]}'" if shared else ""))
    missing = [p for p in PACKAGE_FILES if not os.path.exists(p)]
    if missing:
        harness.skip_part(f"{missing[0]} missing (apt-get install fortunes debian-reference-en "
                          "dict-jargon): cannot rebuild the corpus")
    else:
        p = subprocess.run([sys.executable, os.path.join(SRC, "scripts", "make_calib_corpus.py"),
                            "--check", "--out", CORPUS], capture_output=True, text=True,
                           timeout=300)
        checks.check(p.returncode == 0, "rebuilt from the Debian packages byte for byte",
                     (p.stdout + p.stderr).strip()[-200:])
    checks.finish()


if __name__ == "__main__":
    main()
