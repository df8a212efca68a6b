"""``python -m tf_tofu.cli SUBCOMMAND ...``: the ``tofu`` command."""

from tf_tofu.cli import run

run()
