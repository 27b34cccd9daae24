#!/usr/bin/env python3
"""Build data/calib/default.txt, llmc's default calibration corpus, from three
Debian packages of English text (install them first:
apt-get install fortunes debian-reference-en dict-jargon).

  fortunes             quotations, jokes, literature, law, medicine, ... (BSD)
  debian-reference-en  a system administration guide (technical prose, GPL-2+)
  dict-jargon          the Jargon File 4.4.7, an encyclopedic lexicon (public domain)

Each source is cut into documents (one fortune, one lexicon entry, ~1.5 KB of
consecutive guide paragraphs); documents are shuffled with a fixed seed and
interleaved so the three sources have equal shares of every prefix, so the
first N tokens that a pass takes are as diverse as the whole file. Offensive
fortunes (fortunes-off) are not used; tables are dropped, and so is every
document that shares a run of 12 consecutive words with an evaluation text
(data/eval/default.txt, data/long/licenses.txt: e.g. the guide's GPL
notice), so calibration and evaluation never see the same text.

Deterministic: the same package versions give the same bytes
(`--check` compares with the committed file and exits 1 on a difference).
"""
import argparse
import gzip
import os
import random
import re
import sys

FORTUNE_DIR = "/usr/share/games/fortunes"
GUIDE = "/usr/share/debian-reference/debian-reference.en.txt.gz"
JARGON = "/usr/share/dictd/jargon.dict.dz"
SKIP_FORTUNE_FILES = {"art", "ascii-art"}  # pictures, not prose
SEED = 20261201
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EVAL_TEXTS = ("data/eval/default.txt", "data/long/licenses.txt")
WINDOW = 12  # words; test/e2e/test_calib_corpus.py checks the same


def fortune_documents():
    docs = []
    for name in sorted(os.listdir(FORTUNE_DIR)):
        path = os.path.join(FORTUNE_DIR, name)
        if name in SKIP_FORTUNE_FILES or "." in name or os.path.islink(path):
            continue
        with open(path, encoding="utf-8", errors="replace") as f:
            for cookie in re.split(r"^%\s*$", f.read(), flags=re.M):
                text = cookie.strip("\n")
                if len(text) >= 40 and prose_like(text):
                    docs.append(text)
    return docs


def guide_documents():
    with gzip.open(GUIDE, "rt", encoding="utf-8", errors="replace") as f:
        lines = f.read().splitlines()
    paragraphs, cur = [], []
    for line in lines:
        if not line.strip():
            if cur:
                paragraphs.append(" ".join(s.strip() for s in cur))
                cur = []
            continue
        cur.append(line)
    if cur:
        paragraphs.append(" ".join(s.strip() for s in cur))
    keep = [p for p in paragraphs
            if len(p) >= 80 and "|" not in p and "LICENSE" not in p and prose_like(p)]
    docs, chunk = [], []
    for p in keep:
        chunk.append(p)
        if sum(len(c) for c in chunk) >= 1500:
            docs.append("\n\n".join(chunk))
            chunk = []
    if chunk:
        docs.append("\n\n".join(chunk))
    return docs


def jargon_documents():
    with gzip.open(JARGON, "rt", encoding="utf-8", errors="replace") as f:
        text = f.read()
    docs = []
    # An entry starts with its headword at column 0; its body is indented.
    for entry in re.split(r"\n(?=\S)", text):
        head, _, body = entry.partition("\n")
        if head.startswith("00-database") or len(body.strip()) < 60:
            continue
        body = "\n".join(l.strip() for l in body.splitlines())
        body = re.sub(r"\n(?=\S)", " ", body.strip())  # rejoin wrapped lines
        docs.append(head.strip() + ": " + re.sub(r"\s*\n\s*\n\s*", "\n\n", body).strip())
    return docs


def words(text):
    return re.findall(r"[a-z0-9']+", text.lower())


def eval_windows():
    grams = set()
    for rel in EVAL_TEXTS:
        with open(os.path.join(REPO, rel), encoding="utf-8") as f:
            w = words(f.read())
        grams.update(tuple(w[i:i + WINDOW]) for i in range(len(w) - WINDOW + 1))
    return grams


def disjoint(docs, grams):
    def ok(doc):
        w = words(doc)
        return not any(tuple(w[i:i + WINDOW]) in grams for i in range(len(w) - WINDOW + 1))
    return [d for d in docs if ok(d)]


def prose_like(text):
    letters = sum(c.isalpha() or c.isspace() for c in text)
    return letters >= 0.85 * len(text)


def interleave(sources, limit_bytes, rng):
    for docs in sources:
        rng.shuffle(docs)
    used = [0] * len(sources)
    pos = [0] * len(sources)
    out, total = [], 0
    while total < limit_bytes:
        live = [i for i in range(len(sources)) if pos[i] < len(sources[i])]
        if not live:
            break
        i = min(live, key=lambda k: used[k])  # the source with the smallest share so far
        doc = sources[i][pos[i]]
        pos[i] += 1
        used[i] += len(doc)
        total += len(doc) + 2
        out.append(doc)
    return "\n\n".join(out) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=os.path.join(REPO, "data", "calib", "default.txt"))
    ap.add_argument("--kib", type=int, default=480, help="corpus size in KiB (default 480)")
    ap.add_argument("--check", action="store_true",
                    help="rebuild in memory and compare with --out; exit 1 if they differ")
    args = ap.parse_args()
    for p in (FORTUNE_DIR, GUIDE, JARGON):
        if not os.path.exists(p):
            sys.exit(f"make_calib_corpus: {p} is missing: "
                     "apt-get install fortunes debian-reference-en dict-jargon")
    rng = random.Random(SEED)
    grams = eval_windows()
    sources = [disjoint(docs, grams)
               for docs in (fortune_documents(), guide_documents(), jargon_documents())]
    text = interleave(sources, args.kib * 1024, rng)
    if args.check:
        with open(args.out, encoding="utf-8") as f:
            same = f.read() == text
        print(f"{args.out}: {'matches' if same else 'DIFFERS from'} the rebuilt corpus")
        sys.exit(0 if same else 1)
    tmp = args.out + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, args.out)
    print(f"wrote {args.out}: {len(text.encode())} bytes")


if __name__ == "__main__":
    main()
