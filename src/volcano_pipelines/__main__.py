"""`python -m volcano_pipelines` is `vpipe`."""

import sys

from volcano_pipelines.cli import main

sys.exit(main())
