"""A flows module whose own import fails: the registry must surface that error, not hide it."""

import no_such_dependency_for_registry_tests  # noqa: F401
