"""`kmt-saved-model-cli`: TensorFlow's `saved_model_cli`, in a process that has registered tensorflow-text's ops.

kmt's SavedModels tokenize with tensorflow-text's SentencePiece ops. TensorFlow's own `saved_model_cli` can
`show` them but cannot `run` them, since nothing in that process loads tensorflow-text. This is the same tool,
with the same flags, after `import tensorflow_text`:

    kmt-saved-model-cli run --dir runs/dates/<time>/export --tag_set serve --signature_def translate \\
        --input_exprs 'text=["Tuesday, March 5, 1996"]'
"""

import sys

from kmt.cli import console_script


@console_script
def main():
    import tensorflow_text  # noqa: F401  (registers the SentencePiece ops the graph uses)
    from tensorflow.python.tools import saved_model_cli

    sys.argv[0] = "saved_model_cli"
    return saved_model_cli.main()


if __name__ == "__main__":
    sys.exit(main())
