"""``python -m tf_tofu SUBCOMMAND ...``: the ``tofu`` command."""

from tf_tofu.cli import run

run()
