"""`python -m pipeframe.cli`: the same as the `pipeframe` command."""

from pipeframe.cli import main

main()
