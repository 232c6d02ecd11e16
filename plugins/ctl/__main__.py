"""``python -m plugins.ctl``: the same as the ``networkplugin-ctl`` console script."""

import sys

from plugins.ctl import console_main

sys.exit(console_main())
