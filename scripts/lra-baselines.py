#!/usr/bin/python3
"""Non-neural baselines for the LRA-style tasks (docs/TASKS.md): does the signal exist?

  /usr/bin/python3 scripts/lra-baselines.py retrieval [--size cpu] [--seqmix ./build/seqmix]
  /usr/bin/python3 scripts/lra-baselines.py text
  /usr/bin/python3 scripts/lra-baselines.py image
  /usr/bin/python3 scripts/lra-baselines.py pathfinder --set data.pathfinder_resolution=16

The task's splits are exported exactly as `seqmix train --task T --size S` builds them
(`seqmix data task`), then scored by scikit-learn (Debian's python3-sklearn, installed by
scripts/setup.sh):

* retrieval: character n-gram TF-IDF (n = 1..3, fitted on the training passages) of each
  passage; a pair becomes [|u - v|, u * v] (symmetric in the two passages, as the label is);
  logistic regression on the training pairs.
* text: the same TF-IDF of the body, logistic regression.
* image, pathfinder, pathx: logistic regression on the raw pixels (scaled to [0, 1]). For
  Pathfinder this measures whether pixel intensities alone, without following a path, give
  the label away (ink amount, marker positions); a sound generator leaves it near 50%.

Prints one JSON line: test accuracy, the majority-class rate of the test split, the standard
error of an accuracy at that rate on that many examples, and how many standard errors the
baseline lies above it. Uses /usr/bin/python3 (Debian's, with python3-sklearn).
"""
import argparse
import json
import math
import os
import subprocess
import sys
import tempfile


def load(path):
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("task", choices=["retrieval", "text", "image", "pathfinder", "pathx"])
    p.add_argument("--size", default="cpu", help="task size as `seqmix train --size` (cpu)")
    p.add_argument("--seqmix", default="./build/seqmix", help="the seqmix binary")
    p.add_argument("--set", action="append", default=[],
                   help="extra section.key=value for the export (repeatable)")
    a = p.parse_args()
    try:
        import numpy as np
        from scipy import sparse
        from sklearn.feature_extraction.text import TfidfVectorizer
        from sklearn.linear_model import LogisticRegression
    except ImportError as e:
        sys.exit(f"lra-baselines: {e}; install Debian's python3-sklearn (scripts/setup.sh) "
                 "and run with /usr/bin/python3")
    if not os.access(a.seqmix, os.X_OK):
        sys.exit(f"lra-baselines: --seqmix: '{a.seqmix}' is not an executable (build first)")

    with tempfile.TemporaryDirectory() as out:
        cmd = [a.seqmix, "data", "task", "--task", a.task, "--size", a.size, "--out", out]
        for s in a.set:
            cmd += ["--set", s]
        r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        if r.returncode != 0:
            sys.exit(f"lra-baselines: {' '.join(cmd)} failed: {r.stderr.strip()}")
        train, test = load(f"{out}/train.jsonl"), load(f"{out}/test.jsonl")

    y_train = np.array([e["label"] for e in train])
    y_test = np.array([e["label"] for e in test])
    if a.task in ("image", "pathfinder", "pathx"):
        x_train = np.array([e["tokens"] for e in train], dtype=np.float32) / 255
        x_test = np.array([e["tokens"] for e in test], dtype=np.float32) / 255
        model = LogisticRegression(max_iter=300)
        features = "raw pixels / 255"
    else:
        tfidf = TfidfVectorizer(analyzer="char", ngram_range=(1, 3), min_df=2,
                                sublinear_tf=True, max_features=200000)
        if a.task == "text":
            tfidf.fit([e["text"] for e in train])
            x_train = tfidf.transform([e["text"] for e in train])
            x_test = tfidf.transform([e["text"] for e in test])
            features = "char 1-3-gram TF-IDF"
        else:
            tfidf.fit([e["text"] for e in train] + [e["text_b"] for e in train])

            def pairs(rows):
                u = tfidf.transform([e["text"] for e in rows])
                v = tfidf.transform([e["text_b"] for e in rows])
                return sparse.hstack([abs(u - v), u.multiply(v)]).tocsr()

            x_train, x_test = pairs(train), pairs(test)
            features = "char 1-3-gram TF-IDF, pair [|u - v|, u * v]"
        model = LogisticRegression(max_iter=1000, C=10.0)
    model.fit(x_train, y_train)
    accuracy = float((model.predict(x_test) == y_test).mean())
    majority = float(np.bincount(y_test).max() / len(y_test))
    se = math.sqrt(majority * (1 - majority) / len(y_test))
    print(json.dumps({
        "task": a.task, "size": a.size, "baseline": "logistic regression on " + features,
        "train_examples": len(train), "test_examples": len(test),
        "test_accuracy": round(accuracy, 4), "majority": round(majority, 4),
        "se_at_majority": round(se, 4),
        "standard_errors_above_majority": round((accuracy - majority) / se, 1),
    }))


if __name__ == "__main__":
    main()
