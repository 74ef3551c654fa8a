import sys

from attnbench.report.readme.regenerate import main

sys.exit(main())
