import sys

from fsguard.cli.__main__ import main

sys.exit(main())
