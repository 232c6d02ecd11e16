"""``python -m plugins.deploy render|probe|pod-setup`` (see ``plugins.deploy.main``)."""

import sys

from plugins.deploy import main

sys.exit(main())
