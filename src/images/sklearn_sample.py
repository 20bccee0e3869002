"""Trains the sample scikit-learn model that MLServer serves in the image tests.

Run it with the MLServer image's own python, so that the model is pickled by the same
scikit-learn that will load it:

    python3 sklearn_sample.py --out DIR [--name iris] [--version 1] [--broken]

DIR then holds what the built-in `mlserver` ClusterServingRuntime expects in $(MODEL_DIR):
  model.joblib           the fitted classifier
  model-settings.json    MLServer's settings (name, implementation, uri, version)
and, for the test that sends the requests (not read by MLServer):
  expected.json          {"inputs": [[...], ...], "predictions": [...]} predicted here

--version N trains on labels rotated by N (class k becomes (k + N) % 3), so two versions of
the model answer the same input differently and a test can tell which one served it.
--broken writes a model.joblib that is not a pickle: MLServer fails to load it (a crash loop).
"""

import argparse
import json
import pathlib

import joblib
from sklearn.datasets import load_iris
from sklearn.linear_model import LogisticRegression


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True, type=pathlib.Path)
    parser.add_argument("--name", default="iris")
    parser.add_argument("--version", type=int, default=1)
    parser.add_argument("--broken", action="store_true")
    args = parser.parse_args()

    features, labels = load_iris(return_X_y=True)
    labels = (labels + args.version) % 3
    model = LogisticRegression(max_iter=1000).fit(features, labels)
    # Two rows per class, in the dataset's order: a spread of answers from a tiny request.
    inputs = features[[0, 1, 50, 51, 100, 101]]

    args.out.mkdir(parents=True, exist_ok=True)
    if args.broken:
        (args.out / "model.joblib").write_bytes(b"this is not a pickled model\n")
    else:
        joblib.dump(model, args.out / "model.joblib")
    settings = {
        "name": args.name,
        "implementation": "mlserver_sklearn.SKLearnModel",
        "parameters": {"uri": "./model.joblib", "version": f"v{args.version}"},
    }
    (args.out / "model-settings.json").write_text(json.dumps(settings, indent=2) + "\n")
    expected = {"inputs": inputs.tolist(), "predictions": model.predict(inputs).tolist()}
    (args.out / "expected.json").write_text(json.dumps(expected) + "\n")


if __name__ == "__main__":
    main()
