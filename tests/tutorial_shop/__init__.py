"""The shop app that docs/tutorial.md builds, step by step: every code block of that page is copied from
these modules, and ``tests/integration/test_tutorial.py`` installs the app, runs its tests and runs its
flow end to end with a real worker."""
